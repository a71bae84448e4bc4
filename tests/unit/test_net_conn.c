/*
 * test_net_conn.c - the transport (net/conn.h, net/tls.h) over socketpairs: plain reads,
 * gathered writes, the peer-closed peek and shutdown; then TLS with a self-signed certificate
 * made here with OpenSSL's APIs: both handshakes driven step by step on non-blocking
 * sockets until done, data both ways (gathered), a read that must wait, close_notify read as
 * the end; a certificate the client does not trust refused with a reason; the first-byte
 * sniff telling TLS from plain; a peer asking for TLS 1.2 renegotiation ignored. The reads
 * for an owner (net_conn_read_start, net_conn_ready): plain and TLS, bytes handed to the
 * callbacks, a full owner pausing and resuming, the end once, ready only on an event.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <fcntl.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/loop.h"
#include "net/conn.h"
#include "net/tls.h"

static char dir[64];
static char cert_path[96], key_path[96], other_path[96], other_key_path[96];

static void pair(struct net_conn *a, struct net_conn *b, int nonblock)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0, sv),
			 0);
	net_conn_init(a, sv[0]);
	net_conn_init(b, sv[1]);
}

static void plain_read_writev_shutdown(void **state)
{
	(void)state;
	struct net_conn a, b;
	char buf[64];
	pair(&a, &b, 1);
	assert_int_equal(net_conn_read(&b, buf, sizeof(buf)), -EAGAIN);
	assert_true(b.want_read);
	struct iovec iov[3] = {{"head ", 5}, {"", 0}, {"body", 4}};
	assert_int_equal(net_conn_writev(&a, iov, 3), 9);
	assert_int_equal(net_conn_peer_closed(&b), 0); /* a byte waits: open */
	assert_int_equal(net_conn_read(&b, buf, sizeof(buf)), 9);
	assert_memory_equal(buf, "head body", 9);
	assert_int_equal(net_conn_peer_closed(&b), 0);
	net_conn_shutdown(&a);
	assert_int_equal(net_conn_peer_closed(&b), 1);
	assert_int_equal(net_conn_read(&b, buf, sizeof(buf)), 0);
	assert_int_equal(net_conn_write(&b, "x", 1), 1); /* only a's sending side ended */
	assert_int_equal(net_conn_read(&a, buf, sizeof(buf)), 1);
	net_conn_close(&a);
	net_conn_close(&a); /* safe twice */
	assert_int_equal(a.fd, -1);
	assert_true(net_conn_write(&b, "y", 1) < 0); /* no SIGPIPE: an error */
	net_conn_close(&b);
}

static void plain_blocking_helpers(void **state)
{
	(void)state;
	struct net_conn a, b;
	char buf[8];
	pair(&a, &b, 0);
	assert_int_equal(net_conn_write_all(&a, "12345678", 8), 0);
	assert_int_equal(net_conn_read_all(&b, buf, 8), 0);
	assert_memory_equal(buf, "12345678", 8);
	assert_int_equal(net_conn_write_all(&a, "1234", 4), 0);
	net_conn_shutdown(&a);
	assert_int_equal(net_conn_read_all(&b, buf, 8), -ECONNRESET); /* ended early */
	net_conn_close(&a);
	net_conn_close(&b);
}

/* A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files. */
static void make_cert(const char *cpath, const char *kpath, const char *cn)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	assert_non_null(key);
	X509 *x = X509_new();
	assert_non_null(x);
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -60);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, key);
	X509_NAME *name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, name);
	X509V3_CTX v3;
	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "IP:127.0.0.1");
	assert_non_null(ext);
	X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");
	X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	FILE *f = fopen(cpath, "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_X509(f, x), 1);
	fclose(f);
	f = fopen(kpath, "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
	fclose(f);
	X509_free(x);
	EVP_PKEY_free(key);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/accelnet-net-conn-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(cert_path, sizeof(cert_path), "%s/cert.pem", dir);
	snprintf(key_path, sizeof(key_path), "%s/key.pem", dir);
	snprintf(other_path, sizeof(other_path), "%s/other.pem", dir);
	snprintf(other_key_path, sizeof(other_key_path), "%s/other.key", dir);
	make_cert(cert_path, key_path, "accelnet test");
	make_cert(other_path, other_key_path, "someone else");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(cert_path);
	unlink(key_path);
	unlink(other_path);
	unlink(other_key_path);
	rmdir(dir);
	return 0;
}

/* Both handshakes, a step each in turn, until both are done (or one fails: its code). */
static int handshake_both(struct net_conn *cl, struct net_conn *sv, int *saw_want_read)
{
	int rc_c = -EAGAIN, rc_s = -EAGAIN;
	for (int turn = 0; turn < 100 && (rc_c == -EAGAIN || rc_s == -EAGAIN); turn++) {
		if (rc_c == -EAGAIN) {
			rc_c = net_tls_handshake(cl);
			*saw_want_read |= rc_c == -EAGAIN && cl->want_read;
		}
		if (rc_s == -EAGAIN) {
			rc_s = net_tls_handshake(sv);
			*saw_want_read |= rc_s == -EAGAIN && sv->want_read;
		}
		if (rc_c && rc_c != -EAGAIN)
			return rc_c;
		if (rc_s && rc_s != -EAGAIN)
			return rc_s;
	}
	return rc_c ? rc_c : rc_s;
}

static void tls_pair(struct net_conn *cl, struct net_conn *sv, const char *ca,
		     struct ssl_ctx_st **cctx, struct ssl_ctx_st **sctx)
{
	char err[256];
	struct net_tls_opts so = {.cert = cert_path, .key = key_path};
	struct net_tls_opts co = {.ca = ca};
	assert_int_equal(net_tls_ctx_server(&so, sctx, err, sizeof(err)), 0);
	assert_int_equal(net_tls_ctx_client(&co, cctx, err, sizeof(err)), 0);
	pair(cl, sv, 1);
	assert_int_equal(net_tls_attach(cl, *cctx, 0, "127.0.0.1:443"), 0);
	assert_int_equal(net_tls_attach(sv, *sctx, 1, NULL), 0);
}

static void tls_handshake_and_data(void **state)
{
	(void)state;
	struct net_conn cl, sv;
	struct ssl_ctx_st *cctx, *sctx;
	tls_pair(&cl, &sv, cert_path, &cctx, &sctx);
	int saw_want_read = 0;
	assert_int_equal(handshake_both(&cl, &sv, &saw_want_read), 0);
	assert_true(saw_want_read);

	char buf[64];
	assert_int_equal(net_conn_read(&sv, buf, sizeof(buf)), -EAGAIN);
	assert_true(sv.want_read);
	struct iovec iov[3] = {{"GET ", 4}, {"/x", 2}, {" now", 4}};
	assert_int_equal(net_conn_writev(&cl, iov, 3), 10); /* gathered into one record */
	assert_int_equal(net_conn_read(&sv, buf, sizeof(buf)), 10);
	assert_memory_equal(buf, "GET /x now", 10);
	struct iovec back[2] = {{"ok ", 3}, {"done", 4}};
	assert_int_equal(net_conn_writev(&sv, back, 2), 7);
	assert_int_equal(net_conn_read(&cl, buf, sizeof(buf)), 7);
	assert_memory_equal(buf, "ok done", 7);

	net_conn_shutdown(&cl); /* close_notify */
	assert_int_equal(net_conn_read(&sv, buf, sizeof(buf)), 0);
	net_conn_close(&cl);
	net_conn_close(&sv);
	net_tls_ctx_free(cctx);
	net_tls_ctx_free(sctx);
}

static void tls_untrusted_refused(void **state)
{
	(void)state;
	struct net_conn cl, sv;
	struct ssl_ctx_st *cctx, *sctx;
	tls_pair(&cl, &sv, other_path, &cctx, &sctx); /* the client trusts another certificate */
	int rc_c = -EAGAIN;
	for (int turn = 0; turn < 100 && rc_c == -EAGAIN; turn++) {
		rc_c = net_tls_handshake(&cl);
		net_tls_handshake(&sv);
	}
	assert_int_equal(rc_c, -EACCES);
	char why[256];
	net_tls_error_text(&cl, why, sizeof(why));
	assert_non_null(strstr(why, "not trusted"));
	net_conn_close(&cl);
	net_conn_close(&sv);
	net_tls_ctx_free(cctx);
	net_tls_ctx_free(sctx);
}

static int client_hellos;

static int count_hellos(SSL *ssl, int *alert, void *arg)
{
	(void)ssl, (void)alert, (void)arg;
	client_hellos++;
	return SSL_CLIENT_HELLO_SUCCESS;
}

/* A TLS 1.2 peer (a hostile backend) asking for renegotiation again and again could make
 * the proxy pay a full handshake each time: every context refuses it. */
static void tls_renegotiation_refused(void **state)
{
	(void)state;
	struct net_conn cl, sv;
	struct ssl_ctx_st *cctx, *sctx;
	tls_pair(&cl, &sv, cert_path, &cctx, &sctx);
	SSL_set_max_proto_version(sv.ssl, TLS1_2_VERSION);
	SSL_set_options(sv.ssl, SSL_OP_ALLOW_CLIENT_RENEGOTIATION);
	SSL_clear_options(sv.ssl, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_client_hello_cb(sctx, count_hellos, NULL);
	client_hellos = 0;
	int saw_want_read = 0;
	assert_int_equal(handshake_both(&cl, &sv, &saw_want_read), 0);
	assert_int_equal(client_hellos, 1);

	assert_int_equal(SSL_renegotiate(sv.ssl), 1); /* the peer sends HelloRequest */
	SSL_do_handshake(sv.ssl);
	char buf[64];
	for (int turn = 0; turn < 10; turn++) {
		net_conn_read(&cl, buf, sizeof(buf));
		net_conn_read(&sv, buf, sizeof(buf));
	}
	assert_int_equal(client_hellos, 1);
	net_conn_close(&cl);
	net_conn_close(&sv);
	net_tls_ctx_free(cctx);
	net_tls_ctx_free(sctx);
}

static void tls_sniff(void **state)
{
	(void)state;
	struct net_conn cl, sv;
	struct ssl_ctx_st *cctx, *sctx;
	tls_pair(&cl, &sv, cert_path, &cctx, &sctx);
	assert_int_equal(net_tls_sniff(&sv), -EAGAIN);
	assert_int_equal(net_tls_handshake(&cl), -EAGAIN); /* the ClientHello went out */
	assert_int_equal(net_tls_sniff(&sv), 1);
	assert_int_equal(net_tls_sniff(&sv), 1); /* not consumed */
	net_conn_close(&cl);
	net_conn_close(&sv);

	struct net_conn a, b;
	pair(&a, &b, 1);
	assert_int_equal(net_conn_write(&a, "AXF1", 4), 4);
	assert_int_equal(net_tls_sniff(&b), 0);
	net_conn_close(&a);
	assert_int_equal(net_tls_sniff(&b), 0); /* the byte is still there */
	char buf[8];
	assert_int_equal(net_conn_read(&b, buf, sizeof(buf)), 4);
	assert_int_equal(net_tls_sniff(&b), -ECONNRESET);
	net_conn_close(&b);
	net_tls_ctx_free(cctx);
	net_tls_ctx_free(sctx);
}

static void tls_ctx_errors(void **state)
{
	(void)state;
	char err[256];
	struct ssl_ctx_st *ctx = NULL;
	struct net_tls_opts no_key = {.cert = cert_path};
	assert_int_equal(net_tls_ctx_server(&no_key, &ctx, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "certificate and its key"));
	struct net_tls_opts wrong_key = {.cert = cert_path, .key = other_key_path};
	assert_int_equal(net_tls_ctx_server(&wrong_key, &ctx, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "TLS key"));
	struct net_tls_opts no_ca = {.ca = "/nonexistent/ca.pem"};
	assert_int_equal(net_tls_ctx_client(&no_ca, &ctx, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "CA file"));
}

/* An owner of reads: a small room it lends, what it was handed, how often ready ran. */
struct owner {
	char in[8];
	size_t len, room; /* bytes in <in>; how many of its 8 it lends at most */
	int ended, end, readies, reads;
};

static int owner_alloc(void *arg, char **p, size_t *len)
{
	struct owner *o = arg;
	if (o->len >= o->room)
		return -ENOSPC;
	*p = o->in + o->len;
	*len = o->room - o->len;
	return 0;
}

static void owner_read(void *arg, ssize_t n)
{
	struct owner *o = arg;
	o->reads++;
	if (n > 0) {
		o->len += (size_t)n;
	} else {
		o->ended++;
		o->end = (int)n;
	}
}

static void owner_ready(void *arg)
{
	((struct owner *)arg)->readies++;
}

static const struct net_conn_read_ops owner_ops = {owner_alloc, owner_read, owner_ready};

static void read_callbacks_plain(void **state)
{
	(void)state;
	struct net_conn a, b;
	struct owner o = {.room = sizeof(o.in)};
	pair(&a, &b, 1);
	/* no edge yet: nothing is read, and an event the owner handles itself says so */
	assert_int_equal(net_conn_read_start(&b, &owner_ops, &o), 0);
	assert_int_equal(o.reads, 0);
	assert_int_equal(net_conn_ready(&b, LOOP_WRITE), 0);
	/* twelve bytes, room for eight: the owner is full, the edge is kept */
	assert_int_equal(net_conn_write(&a, "abcdefghijkl", 12), 12);
	assert_int_equal(net_conn_ready(&b, LOOP_READ), 1);
	assert_int_equal(o.readies, 1);
	assert_int_equal(o.len, 8);
	assert_memory_equal(o.in, "abcdefgh", 8);
	assert_true(b.readable);
	/* the owner takes its bytes and starts again: the rest is read at once, no ready */
	o.len = 0;
	assert_int_equal(net_conn_read_start(&b, &owner_ops, &o), 1);
	assert_int_equal(o.len, 4);
	assert_memory_equal(o.in, "ijkl", 4);
	assert_false(b.readable); /* a short plain read drained the socket */
	assert_int_equal(o.readies, 1);
	/* stopped: an edge is recorded and nothing read */
	net_conn_read_stop(&b);
	assert_int_equal(net_conn_write(&a, "m", 1), 1);
	assert_int_equal(net_conn_ready(&b, LOOP_READ), 0);
	assert_int_equal(o.len, 4);
	assert_true(b.readable);
	/* the peer's end: the byte before it, then the end once, and reading stops */
	net_conn_shutdown(&a);
	o.len = 0;
	assert_int_equal(net_conn_read_start(&b, &owner_ops, &o), 1);
	assert_int_equal(o.len, 1);
	assert_int_equal(net_conn_ready(&b, LOOP_READ | LOOP_HUP), 1);
	assert_int_equal(o.ended, 1);
	assert_int_equal(o.end, 0);
	assert_false(b.reading);
	assert_int_equal(net_conn_ready(&b, LOOP_READ | LOOP_HUP), 0);
	assert_int_equal(o.ended, 1);
	net_conn_close(&a);
	net_conn_close(&b);
}

/* An owner that moves the bytes itself (splice): told of read edges, reads nothing through
 * the transport. */
static void read_callbacks_own_bytes(void **state)
{
	(void)state;
	struct net_conn a, b;
	struct owner o = {.room = sizeof(o.in)};
	static const struct net_conn_read_ops own = {.ready = owner_ready};
	pair(&a, &b, 1);
	assert_int_equal(net_conn_write(&a, "xyz", 3), 3);
	assert_int_equal(net_conn_read_start(&b, &own, &o), 0);
	assert_int_equal(net_conn_ready(&b, LOOP_READ), 1);
	assert_int_equal(o.readies, 1);
	assert_int_equal(o.reads, 0);
	char buf[8];
	assert_int_equal(net_conn_read(&b, buf, sizeof(buf)), 3); /* the bytes are still there */
	b.readable = 0;						  /* drained, as the owner says */
	assert_int_equal(net_conn_ready(&b, LOOP_WRITE), 0);
	assert_int_equal(o.readies, 1);
	net_conn_close(&a);
	net_conn_close(&b);
}

static void read_callbacks_tls(void **state)
{
	(void)state;
	struct net_conn cl, sv;
	struct ssl_ctx_st *cctx, *sctx;
	struct owner o = {.room = sizeof(o.in)};
	tls_pair(&cl, &sv, cert_path, &cctx, &sctx);
	int saw_want_read = 0;
	assert_int_equal(handshake_both(&cl, &sv, &saw_want_read), 0);
	/* two records of three bytes: both read on one event (TLS is read until -EAGAIN) */
	assert_int_equal(net_conn_write(&cl, "one", 3), 3);
	assert_int_equal(net_conn_write(&cl, "two", 3), 3);
	net_conn_read_start(&sv, &owner_ops, &o);
	assert_int_equal(net_conn_ready(&sv, LOOP_READ), 1);
	assert_int_equal(o.len, 6);
	assert_memory_equal(o.in, "onetwo", 6);
	assert_false(sv.readable);
	/* close_notify is the clean end (0) */
	net_conn_shutdown(&cl);
	assert_int_equal(net_conn_ready(&sv, LOOP_READ), 1);
	assert_int_equal(o.ended, 1);
	assert_int_equal(o.end, 0);
	net_conn_close(&cl);
	net_conn_close(&sv);
	net_tls_ctx_free(cctx);
	net_tls_ctx_free(sctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(plain_read_writev_shutdown),
	    cmocka_unit_test(plain_blocking_helpers),
	    cmocka_unit_test(tls_handshake_and_data),
	    cmocka_unit_test(tls_untrusted_refused),
	    cmocka_unit_test(tls_renegotiation_refused),
	    cmocka_unit_test(tls_sniff),
	    cmocka_unit_test(tls_ctx_errors),
	    cmocka_unit_test(read_callbacks_plain),
	    cmocka_unit_test(read_callbacks_own_bytes),
	    cmocka_unit_test(read_callbacks_tls),
	};
	return cmocka_run_group_tests_name("net conn", tests, setup, teardown);
}
