/*
 * tls_listen.h - what a TLS listener serves: its certificates, chosen per handshake, and the
 * protocol settings every client of it gets.
 *
 * Defaults are the modern ones: TLS 1.2 and 1.3 only; for TLS 1.2 only ECDHE key exchange
 * with AEAD ciphers (forward secrecy everywhere, no CBC, no RSA key exchange); groups
 * X25519, P-256, P-384; the server's cipher order; no renegotiation, no compression. Each
 * can be configured.
 *
 * Several certificates may be given. Those naming the same hosts (subjectAltName DNS
 * entries, or the subject's CN when there are none) share one context, so an RSA and an
 * ECDSA certificate for one name sit side by side and OpenSSL picks by what the client can
 * verify. A client's SNI chooses among the contexts (exact names first, then "*.domain"
 * wildcards for one label); without SNI, or for an unknown name, the first certificate's
 * context answers.
 *
 * Mutual TLS (client_ca): the client is asked for a certificate, which must chain to one of
 * client_ca's certificates within verify_depth intermediates (and, with a CRL file, not be
 * revoked by its issuer's CRL). Required: a client without one fails the handshake.
 * Optional: it may present none, but a certificate it presents must verify. The verified
 * certificate's subject and first SAN reach the exchange through net_tls_facts_get().
 *
 * OCSP stapling: a certificate may come with a DER OCSP response file, checked when loaded
 * (it must be "successful", name this certificate as issued by the issuer in its chain file,
 * say "good", and be current, or the listener is refused); it is stapled to a handshake whose
 * client asks (status_request) until its nextUpdate passes, after which nothing is stapled.
 *
 * Resumption: one session cache for the whole process (the first context's, which OpenSSL
 * keeps as the session context whatever SNI chose; OpenSSL locks it, so every worker shares
 * it), and session tickets whose keys rotate every NET_TLS_TICKET_PERIOD_S: a ticket is
 * issued under the current key and accepted under the current and the previous one.
 * ALPN: "h2" then "http/1.1" where the connection takes HTTP/2 (listen[].http2, said at
 * attach), else "http/1.1" alone; a client offering neither goes on without ALPN. kTLS for sending
 * is asked for where OpenSSL and the kernel have it; otherwise OpenSSL encrypts in user space, as
 * it always could.
 *
 * The contexts are built once, before the workers start, and only read afterwards.
 */
#ifndef ACCELNET_NET_TLS_LISTEN_H
#define ACCELNET_NET_TLS_LISTEN_H

#include "net/conn.h"

#include <stddef.h>

#define NET_TLS_TICKET_PERIOD_S 3600

struct ssl_ctx_st;
struct net_tls_listener;

struct net_tls_cert {
	const char *cert; /* PEM: the certificate, then its chain (with its issuer for OCSP) */
	const char *key;  /* PEM: its private key */
	const char *ocsp; /* DER: an OCSP response for it to staple; NULL: none */
};

struct net_tls_listen_opts {
	const struct net_tls_cert *certs; /* at least one; the first answers by default */
	size_t ncerts;
	const char *ciphers;	  /* TLS 1.2 cipher list (OpenSSL syntax); NULL: the default */
	const char *ciphersuites; /* TLS 1.3 suites; NULL: OpenSSL's (all AEAD) */
	const char *groups;	  /* key exchange groups; NULL: X25519:P-256:P-384 */
	int min_version;	  /* 12 (default) or 13 */
	const char *client_ca;	/* PEM: CAs a client certificate must chain to; NULL: none asked */
	const char *client_crl; /* PEM: CRLs checked against a client's certificate; NULL: none */
	int client_optional;	/* a client may present no certificate */
	int verify_depth;	/* intermediates allowed in a client's chain */
};

/* Build a listener's contexts: 0 with *out, or -errno with a message naming the file. */
int net_tls_listener_new(const struct net_tls_listen_opts *o, struct net_tls_listener **out,
			 char *err, size_t errlen);
void net_tls_listener_free(struct net_tls_listener *l);

/* Put a server session of <l> on the plain connection <c>, offering ALPN "h2" before
 * "http/1.1" when <h2>; the handshake then runs with net_tls_handshake() (net/tls.h). 0 or
 * -ENOMEM. */
int net_tls_listener_attach(struct net_tls_listener *l, struct net_conn *c, int h2);

/*
 * Before the handshake reads anything: does the ClientHello waiting on <c> declare itself
 * longer than <max> bytes (1; refuse it before OpenSSL buffers it: a legitimate hello is a
 * few hundred bytes), or not (0; also for what is no handshake at all, which the handshake
 * then refuses)? -EAGAIN: its first 9 bytes have not all arrived.
 */
int net_tls_hello_oversized(struct net_conn *c, size_t max);

/*
 * Before the handshake reads anything: is what waits on <c> plain HTTP (1: its first byte is
 * an upper-case ASCII letter, as a request's method begins, where a TLS client sends a
 * handshake record, 0x16), or not (0; the handshake judges it)? -EAGAIN: nothing yet.
 */
int net_tls_sniff_plain_http(struct net_conn *c);

/* Take the server session off <c> before its handshake began: a plain connection again, for
 * a plain answer (a plain HTTP request sent to a TLS listener). */
void net_tls_listener_detach(struct net_conn *c);

#define NET_TLS_SUBJECT_MAX 512 /* bytes of a client certificate's subject, as written */
#define NET_TLS_NAME_MAX 256	/* ... of its first SAN, of its CN */

/*
 * What a finished handshake agreed, for routes and logs. version and cipher are static
 * strings, sni lives as long as the connection's session ("" when unknown). The client
 * certificate's texts are copied, with every byte outside printable ASCII written as \XX,
 * so they are safe in a header and in a log line.
 */
struct net_tls_facts {
	const char *version;		       /* "TLSv1.3" */
	const char *cipher;		       /* "TLS_AES_128_GCM_SHA256" */
	const char *sni;		       /* the name the client asked for, or "" */
	int resumed;			       /* the session was resumed */
	int ktls_send;			       /* the kernel encrypts what is sent */
	int client_cert;		       /* a client certificate was presented and verified */
	int alpn_h2;			       /* ALPN chose "h2": the connection speaks HTTP/2 */
	char subject[NET_TLS_SUBJECT_MAX + 1]; /* its subject, RFC 2253 ("CN=a,O=b"), or "" */
	char san[NET_TLS_NAME_MAX + 1];	       /* its first URI, DNS or email SAN, or "" */
	char cn[NET_TLS_NAME_MAX + 1];	       /* its subject's (last) CN, or "" */
};

/* The facts of <c>'s finished handshake into <f>: 0, or -E2BIG when a verified client
 * certificate's subject or SAN is longer than the room for it (refuse the connection rather
 * than pass a cut identity). */
int net_tls_facts_get(struct net_conn *c, struct net_tls_facts *f);

#endif
