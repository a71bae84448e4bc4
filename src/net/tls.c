/*
 * tls.c - OpenSSL contexts, handshakes and the TLS sniff (see tls.h).
 *
 * The handshake step maps OpenSSL's outcomes as net/conn.c does for reads and writes
 * (WANT_READ/WANT_WRITE: -EAGAIN with the wish recorded), and tells a refused certificate
 * (-EACCES) apart from other failures (-EPROTO), so a caller can say which. The blocking
 * helpers are the same step on a blocking socket, where -EAGAIN means the socket's timeout
 * ran out. OpenSSL's error queue is per thread: net_tls_error_text() reads it right after a
 * failed call on the same thread, and clears it.
 *
 * Client sessions are kept outside OpenSSL's cache: a connection's SSL carries a pointer to
 * its owner's slot (ex_data), and the new-session callback swaps the session there, so the
 * owner decides how many are kept and who shares them (the proxy: one per worker and
 * backend), with no lock.
 */
#include "net/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* The ex_data index of a client SSL's session slot (struct ssl_session_st **). */
static int slot_index = -1;
static CRYPTO_ONCE slot_once = CRYPTO_ONCE_STATIC_INIT;

static void slot_index_init(void)
{
	slot_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/* OpenSSL has a new session for a client connection (TLS 1.2: the handshake ended; TLS 1.3:
 * a ticket arrived): it replaces the one in the connection's slot. 1: we keep <sess>. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
	SSL_SESSION **slot = slot_index >= 0 ? SSL_get_ex_data(ssl, slot_index) : NULL;
	if (!slot || !SSL_SESSION_is_resumable(sess))
		return 0;
	SSL_SESSION_free(*slot);
	*slot = sess;
	return 1;
}

/* <what>, then OpenSSL's first queued error if any, into <err>; the queue is cleared. */
static void tls_reason(char *err, size_t errlen, const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[200] = "";
	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	snprintf(err, errlen, "%s%s%s", what, buf[0] && what[0] ? ": " : "", buf);
	ERR_clear_error();
}

static int ctx_new(const struct net_tls_opts *t, int server, struct ssl_ctx_st **out, char *err,
		   size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!ctx) {
		tls_reason(err, errlen, "cannot create a TLS context");
		return -ENOMEM;
	}
	SSL_CTX_set_min_proto_version(ctx, t->min_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION);
	/* a TLS 1.2 peer asking again and again would cost a full handshake each time: a
	 * backend wanting a client certificate per location must ask for it up front */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	if (t->ciphers && SSL_CTX_set_cipher_list(ctx, t->ciphers) != 1) {
		tls_reason(err, errlen, "no usable cipher in 'ciphers'");
		goto fail;
	}
	if (t->ciphersuites && SSL_CTX_set_ciphersuites(ctx, t->ciphersuites) != 1) {
		tls_reason(err, errlen, "no usable suite in 'ciphersuites'");
		goto fail;
	}
	if (!server && t->keep_sessions) {
		CRYPTO_THREAD_run_once(&slot_once, slot_index_init);
		if (slot_index < 0) {
			tls_reason(err, errlen, "cannot keep TLS sessions");
			goto fail;
		}
		/* sessions live in each connection's slot, never in the context's cache */
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
							SSL_SESS_CACHE_NO_INTERNAL_STORE);
		SSL_CTX_sess_set_new_cb(ctx, on_new_session);
	}
	/* net_conn_writev() gathers small parts into a buffer on its stack and may pass more
	 * when it repeats a write: a write may complete in part, from a buffer that moved */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (t->cert || server) {
		if (!t->cert || !t->key) {
			snprintf(err, errlen, "TLS needs both a certificate and its key");
			goto fail;
		}
		if (SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1) {
			tls_reason(err, errlen, "cannot load the TLS certificate");
			goto fail;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1 ||
		    SSL_CTX_check_private_key(ctx) != 1) {
			tls_reason(
			    err, errlen,
			    "cannot load the TLS key (or it does not match the certificate)");
			goto fail;
		}
	}
	if (t->ca) {
		if (SSL_CTX_load_verify_locations(ctx, t->ca, NULL) != 1) {
			tls_reason(err, errlen, "cannot load the TLS CA file");
			goto fail;
		}
	} else if (!server && SSL_CTX_set_default_verify_paths(ctx) != 1) {
		tls_reason(err, errlen, "cannot load the system's CA certificates");
		goto fail;
	}
	if (server && t->ca)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	else if (!server && !t->insecure)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	*out = ctx;
	return 0;
fail:
	SSL_CTX_free(ctx);
	return -EINVAL;
}

int net_tls_ctx_client(const struct net_tls_opts *t, struct ssl_ctx_st **out, char *err,
		       size_t errlen)
{
	return ctx_new(t, 0, out, err, errlen);
}

int net_tls_ctx_server(const struct net_tls_opts *t, struct ssl_ctx_st **out, char *err,
		       size_t errlen)
{
	return ctx_new(t, 1, out, err, errlen);
}

void net_tls_ctx_free(struct ssl_ctx_st *ctx)
{
	SSL_CTX_free(ctx);
}

int net_tls_attach(struct net_conn *c, struct ssl_ctx_st *ctx, int server, const char *hostport)
{
	SSL *ssl = SSL_new(ctx);
	if (!ssl || SSL_set_fd(ssl, c->fd) != 1) {
		SSL_free(ssl);
		return -ENOMEM;
	}
	if (server) {
		SSL_set_accept_state(ssl);
	} else {
		SSL_set_connect_state(ssl);
		if (hostport) {
			char host[256];
			snprintf(host, sizeof(host), "%s",
				 hostport[0] == '[' ? hostport + 1 : hostport);
			char *end = hostport[0] == '[' ? strchr(host, ']') : strrchr(host, ':');
			if (end)
				*end = 0;
			/* the certificate must name what we dialed: an address or a host name */
			if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1) {
				SSL_set1_host(ssl, host);
				SSL_set_tlsext_host_name(ssl, host);
			}
		}
	}
	c->ssl = ssl;
	return 0;
}

int net_tls_alpn_is(struct net_conn *c, const char *proto)
{
	const unsigned char *got = NULL;
	unsigned len = 0;
	if (c->ssl)
		SSL_get0_alpn_selected(c->ssl, &got, &len);
	return got && len == strlen(proto) && !memcmp(got, proto, len);
}

int net_tls_attach_client(struct net_conn *c, struct ssl_ctx_st *ctx, const struct net_tls_peer *p)
{
	SSL *ssl = SSL_new(ctx);
	if (!ssl || SSL_set_fd(ssl, c->fd) != 1)
		goto fail;
	SSL_set_connect_state(ssl);
	if (p->sni && SSL_set_tlsext_host_name(ssl, p->sni) != 1)
		goto fail;
	if (p->verify_name &&
	    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), p->verify_name) != 1 &&
	    SSL_set1_host(ssl, p->verify_name) != 1)
		goto fail;
	if (p->alpn && SSL_set_alpn_protos(ssl, p->alpn, p->alpn_len) != 0)
		goto fail;
	if (p->session) {
		if (slot_index >= 0 && SSL_set_ex_data(ssl, slot_index, p->session) != 1)
			goto fail;
		if (*p->session && SSL_SESSION_is_resumable(*p->session))
			SSL_set_session(ssl, *p->session); /* a refused offer is a full handshake */
	}
	c->ssl = ssl;
	return 0;
fail:
	SSL_free(ssl);
	ERR_clear_error();
	return -ENOMEM;
}

int net_tls_resumed(struct net_conn *c)
{
	return c->ssl && SSL_session_reused(c->ssl);
}

void net_tls_session_free(struct ssl_session_st *s)
{
	SSL_SESSION_free(s);
}

int net_tls_handshake(struct net_conn *c)
{
	c->want_read = c->want_write = 0;
	ERR_clear_error();
	int ret = SSL_do_handshake(c->ssl);
	if (ret == 1)
		return 0;
	ssize_t rc = net_conn_tls_outcome(c, ret);
	if (rc == 0)
		return -ECONNRESET; /* closed during the handshake */
	if (rc == -EPROTO && SSL_get_verify_result(c->ssl) != X509_V_OK)
		return -EACCES;
	return (int)rc;
}

void net_tls_error_text(struct net_conn *c, char *buf, size_t len)
{
	long v = c->ssl ? SSL_get_verify_result(c->ssl) : X509_V_OK;
	if (v != X509_V_OK) {
		snprintf(buf, len, "the %s's certificate is not trusted: %s",
			 SSL_is_server(c->ssl) ? "client" : "server",
			 X509_verify_cert_error_string(v));
		ERR_clear_error();
		return;
	}
	tls_reason(buf, len, "");
}

/* The blocking form of the handshake: -EAGAIN is the socket's timeout running out. */
static int handshake_blocking(struct net_conn *c, char *err, size_t errlen)
{
	int rc = net_tls_handshake(c);
	if (rc == -EAGAIN) {
		c->want_read = c->want_write = 0;
		snprintf(err, errlen, "timed out");
		ERR_clear_error();
		return -ETIMEDOUT;
	}
	if (rc)
		net_tls_error_text(c, err, errlen);
	return rc;
}

int net_tls_connect(struct net_conn *c, struct ssl_ctx_st *ctx, const char *hostport, char *err,
		    size_t errlen)
{
	if (net_tls_attach(c, ctx, 0, hostport)) {
		tls_reason(err, errlen, "cannot start TLS");
		return -ENOMEM;
	}
	return handshake_blocking(c, err, errlen);
}

int net_tls_accept(struct net_conn *c, struct ssl_ctx_st *ctx, char *err, size_t errlen)
{
	if (net_tls_attach(c, ctx, 1, NULL)) {
		tls_reason(err, errlen, "cannot start TLS");
		return -ENOMEM;
	}
	return handshake_blocking(c, err, errlen);
}

int net_tls_sniff(struct net_conn *c)
{
	unsigned char first;
	ssize_t n = net_conn_peek(c, &first, 1);
	if (n == 1)
		return first == 0x16; /* a TLS handshake record */
	return n == 0 ? -ECONNRESET : (int)n;
}
