/*
 * tls.h - TLS on a struct net_conn: contexts from files, the handshake, the first-byte sniff.
 *
 * A context (SSL_CTX) is built once from {ca, cert, key, insecure} and shared by every
 * connection of a listener or a transfer. A client verifies the server's certificate against
 * <ca>, else the system's CAs, and against the host (address or name) it dialed, unless
 * <insecure>; the name also goes out as SNI. A server needs a certificate and its key; with
 * <ca> it requires a client certificate signed by it (mutual TLS).
 *
 * A client context may also carry cipher settings, a lowest version, and session keeping:
 * with it, each connection attached by net_tls_attach_client() offers the last session kept
 * in its slot and stores there the next one the server gives, so a reconnect resumes.
 *
 * Once attached (net_tls_attach), the connection reads and writes through TLS (net/conn.h).
 * The handshake comes in two shapes:
 *   - non-blocking, for an event loop: net_tls_handshake() one step at a time, -EAGAIN with
 *     want_read/want_write set until it returns 0 or fails;
 *   - blocking, for a thread per connection (xfer): net_tls_connect() / net_tls_accept(),
 *     bounded by the socket's timeouts.
 * A failed handshake says why in a short text (net_tls_error_text()): an untrusted
 * certificate with the verifier's reason, otherwise OpenSSL's first error.
 *
 * One listener can take plain and TLS clients: net_tls_sniff() peeks at the first byte
 * without consuming it (0x16 opens a TLS handshake record).
 *
 * Every function returns 0 or -errno.
 */
#ifndef ACCELNET_NET_TLS_H
#define ACCELNET_NET_TLS_H

#include "net/conn.h"

#include <stddef.h>

struct ssl_ctx_st;
struct ssl_session_st;

struct net_tls_opts {
	const char *ca, *cert, *key; /* PEM files, each may be NULL */
	int insecure;		     /* client: do not verify the server */
	/* client only, each may be NULL / 0 */
	const char *ciphers;	  /* TLS 1.2 cipher list (OpenSSL syntax); NULL: OpenSSL's */
	const char *ciphersuites; /* TLS 1.3 suites; NULL: OpenSSL's */
	int min_version;	  /* 12 (the default when 0) or 13 */
	int keep_sessions;	  /* hand each new session to the slot given at attach */
};

/* A client or server context from <t>: 0 with *out (free with net_tls_ctx_free), or -errno
 * with a message in <err>. */
int net_tls_ctx_client(const struct net_tls_opts *t, struct ssl_ctx_st **out, char *err,
		       size_t errlen);
int net_tls_ctx_server(const struct net_tls_opts *t, struct ssl_ctx_st **out, char *err,
		       size_t errlen);
void net_tls_ctx_free(struct ssl_ctx_st *ctx);

/* Put a TLS session from <ctx> on plain connection <c>, as a server or as a client of
 * <hostport> ("HOST:PORT", "[V6]:PORT" or a bare host; NULL: no name checked, no SNI).
 * 0, or -ENOMEM. */
int net_tls_attach(struct net_conn *c, struct ssl_ctx_st *ctx, int server, const char *hostport);

/*
 * The client side, for an event loop (the proxy to its backends): a session from <ctx> on
 * plain connection <c>, then stepped with net_tls_handshake(). <sni>: the server name sent
 * (NULL: none; never an address). <verify_name>: the host name or address the server's
 * certificate must carry (NULL: not checked; the context's verify setting still applies).
 * <session>: where the last session with this server is kept (NULL: none); a resumable one
 * is offered, and with keep_sessions each new one the server hands out (TLS 1.2 at the end of
 * the handshake, TLS 1.3 tickets later, on a read) replaces it, so *session must outlive the
 * connection. 0, or -ENOMEM.
 */
struct net_tls_peer {
	const char *sni, *verify_name;
	struct ssl_session_st **session;
	const unsigned char *alpn; /* ALPN protocols to offer, in wire form; NULL: none */
	unsigned alpn_len;
};
int net_tls_attach_client(struct net_conn *c, struct ssl_ctx_st *ctx, const struct net_tls_peer *p);

/* Did the finished handshake on <c> agree on the ALPN protocol <proto> (1) or not (0)? */
int net_tls_alpn_is(struct net_conn *c, const char *proto);

/* Was the finished handshake on <c> a resumption (1) or a full one (0)? */
int net_tls_resumed(struct net_conn *c);

/* Let go of a kept session (NULL is fine). */
void net_tls_session_free(struct ssl_session_st *s);

/* One step of the handshake of an attached connection: 0 done, -EAGAIN (wait for what
 * want_read/want_write say), -EACCES (the peer's certificate was refused), -ECONNRESET (the
 * peer left), or -EPROTO / -errno. */
int net_tls_handshake(struct net_conn *c);

/* Why the last handshake of <c> failed, in a short text written to <buf>. */
void net_tls_error_text(struct net_conn *c, char *buf, size_t len);

/* Blocking: attach and handshake as a client of <hostport> / as a server. 0 or -errno (as
 * net_tls_handshake; -ETIMEDOUT when the socket's timeout runs out), with <err> set on
 * failure. */
int net_tls_connect(struct net_conn *c, struct ssl_ctx_st *ctx, const char *hostport, char *err,
		    size_t errlen);
int net_tls_accept(struct net_conn *c, struct ssl_ctx_st *ctx, char *err, size_t errlen);

/* The first byte waiting on <c>, not consumed: 1 when it opens a TLS handshake, 0 when it
 * does not, -ECONNRESET at the peer's end, -EAGAIN (nothing yet, or a blocking socket's
 * timeout), -errno. */
int net_tls_sniff(struct net_conn *c);

#endif
