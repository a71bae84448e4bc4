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
 * Resumption: one session cache for the whole process (the first context's, which OpenSSL
 * keeps as the session context whatever SNI chose; OpenSSL locks it, so every worker shares
 * it), and session tickets whose keys rotate every NET_TLS_TICKET_PERIOD_S: a ticket is
 * issued under the current key and accepted under the current and the previous one.
 * ALPN: "http/1.1" (h2 comes with HTTP/2). kTLS for sending is asked for where OpenSSL and
 * the kernel have it; otherwise OpenSSL encrypts in user space, as it always could.
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
	const char *cert; /* PEM: the certificate, then its chain */
	const char *key;  /* PEM: its private key */
};

struct net_tls_listen_opts {
	const struct net_tls_cert *certs; /* at least one; the first answers by default */
	size_t ncerts;
	const char *ciphers;	  /* TLS 1.2 cipher list (OpenSSL syntax); NULL: the default */
	const char *ciphersuites; /* TLS 1.3 suites; NULL: OpenSSL's (all AEAD) */
	const char *groups;	  /* key exchange groups; NULL: X25519:P-256:P-384 */
	int min_version;	  /* 12 (default) or 13 */
};

/* Build a listener's contexts: 0 with *out, or -errno with a message naming the file. */
int net_tls_listener_new(const struct net_tls_listen_opts *o, struct net_tls_listener **out,
			 char *err, size_t errlen);
void net_tls_listener_free(struct net_tls_listener *l);

/* Put a server session of <l> on the plain connection <c>; the handshake then runs with
 * net_tls_handshake() (net/tls.h). 0 or -ENOMEM. */
int net_tls_listener_attach(struct net_tls_listener *l, struct net_conn *c);

/*
 * Before the handshake reads anything: does the ClientHello waiting on <c> declare itself
 * longer than <max> bytes (1; refuse it before OpenSSL buffers it: a legitimate hello is a
 * few hundred bytes), or not (0; also for what is no handshake at all, which the handshake
 * then refuses)? -EAGAIN: its first 9 bytes have not all arrived.
 */
int net_tls_hello_oversized(struct net_conn *c, size_t max);

/* What a finished handshake agreed, for routes and logs: static strings, or "" when unknown. */
struct net_tls_facts {
	const char *version; /* "TLSv1.3" */
	const char *cipher;  /* "TLS_AES_128_GCM_SHA256" */
	const char *sni;     /* the name the client asked for, or "" */
	int resumed;	     /* the session was resumed */
	int ktls_send;	     /* the kernel encrypts what is sent */
};
void net_tls_facts_get(struct net_conn *c, struct net_tls_facts *f);

#endif
