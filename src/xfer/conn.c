/*
 * conn.c - blocking frame I/O, dialing and the handshake of xfer connections (see conn.h).
 */
#include "xfer/conn.h"
#include "core/clock.h"
#include "core/secret.h"
#include "net/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int xfer_token_load(const char *path, struct xfer_token *t, const char **why)
{
	memset(t, 0, sizeof(*t));
	int rc = secret_load(path, t->key, sizeof(t->key), &t->len, why);
	if (rc == -EINVAL)
		*why = "the token file must hold 1 to 256 bytes";
	return rc;
}

int xfer_discard(struct net_conn *c, uint64_t len)
{
	uint8_t sink[16384];
	while (len) {
		size_t n = len < sizeof(sink) ? (size_t)len : sizeof(sink);
		int rc = net_conn_read_all(c, sink, n);
		if (rc)
			return rc;
		len -= n;
	}
	return 0;
}

int xfer_frame_send(struct net_conn *c, uint8_t type, const void *meta, uint32_t meta_len)
{
	uint8_t small[XFER_HDR_LEN + 256];
	if (meta_len <= 256) {
		xfer_hdr_encode(small, type, meta_len, 0);
		if (meta_len)
			memcpy(small + XFER_HDR_LEN, meta, meta_len);
		return net_conn_write_all(c, small, XFER_HDR_LEN + meta_len);
	}
	xfer_hdr_encode(small, type, meta_len, 0);
	int rc = net_conn_write_all(c, small, XFER_HDR_LEN);
	return rc ? rc : net_conn_write_all(c, meta, meta_len);
}

int xfer_frame_wait(struct net_conn *c)
{
	struct timeval tv = {0};
	socklen_t tl = sizeof(tv);
	if (net_conn_pending(c))
		return 0;
	int ms =
	    getsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl) == 0 && (tv.tv_sec || tv.tv_usec)
		? (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000)
		: -1;
	for (;;) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		int r = poll(&p, 1, ms);
		if (r > 0)
			return 0; /* (an end or an error: the read says which) */
		if (r == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

static int recv_hdr(struct net_conn *c, struct xfer_hdr *h)
{
	uint8_t raw[XFER_HDR_LEN];
	int rc = net_conn_read_all(c, raw, sizeof(raw));
	if (rc)
		return rc;
	return xfer_hdr_decode(raw, h);
}

int xfer_frame_recv(struct net_conn *c, struct xfer_hdr *h, uint8_t *meta, uint32_t max)
{
	int rc = recv_hdr(c, h);
	if (rc)
		return rc;
	if (h->meta_len > max)
		return -EPROTO;
	return h->meta_len ? net_conn_read_all(c, meta, h->meta_len) : 0;
}

int xfer_frame_recv_head(struct net_conn *c, struct xfer_hdr *h)
{
	return recv_hdr(c, h);
}

int xfer_frame_recv_into(struct net_conn *c, struct xfer_hdr *h, uint8_t *small, uint32_t cap,
			 uint8_t **meta)
{
	*meta = NULL;
	int rc = recv_hdr(c, h);
	return rc ? rc : xfer_frame_recv_meta(c, h, small, cap, meta);
}

int xfer_frame_recv_meta(struct net_conn *c, const struct xfer_hdr *h, uint8_t *small, uint32_t cap,
			 uint8_t **meta)
{
	int rc;
	*meta = h->meta_len < cap ? small : malloc(h->meta_len + 1);
	if (!*meta)
		return -ENOMEM;
	rc = h->meta_len ? net_conn_read_all(c, *meta, h->meta_len) : 0;
	if (rc) {
		if (*meta != small)
			free(*meta);
		*meta = NULL;
	}
	return rc;
}

int xfer_frame_recv_alloc(struct net_conn *c, struct xfer_hdr *h, uint8_t **meta)
{
	return xfer_frame_recv_into(c, h, NULL, 0, meta);
}

/* Read <len> bytes by <due_ms> (clock_now_ms()): each read waits only for the time left. */
static int read_all_by(struct net_conn *c, void *buf, size_t len, uint64_t due_ms)
{
	char *p = buf;
	while (len) {
		uint64_t now = clock_now_ms();
		if (now >= due_ms)
			return -ETIMEDOUT;
		xfer_set_timeout(c->fd, (int)(due_ms - now));
		ssize_t n = net_conn_read(c, p, len);
		if (n == -EINTR)
			continue;
		if (n <= 0)
			return n == -EAGAIN || n == -EWOULDBLOCK ? -ETIMEDOUT
			       : n == 0				 ? -ECONNRESET
								 : (int)n;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int xfer_frame_recv_timed(struct net_conn *c, struct xfer_hdr *h, uint8_t **meta, unsigned frame_ms,
			  uint64_t min_rate)
{
	uint8_t raw[XFER_HDR_LEN];
	*meta = NULL;
	int rc = xfer_frame_wait(c);
	if (rc)
		return rc;
	uint64_t due = clock_now_ms() + frame_ms;
	if ((rc = read_all_by(c, raw, sizeof(raw), due)) || (rc = xfer_hdr_decode(raw, h)))
		return rc;
	due += 1000 * ((uint64_t)h->meta_len / (min_rate ? min_rate : 1));
	if (!h->meta_len)
		return 0;
	if (!(*meta = malloc(h->meta_len + 1)))
		return -ENOMEM;
	if ((rc = read_all_by(c, *meta, h->meta_len, due))) {
		free(*meta);
		*meta = NULL;
	}
	return rc;
}

int xfer_paths_parse(const char *remote, const char *local, struct xfer_path *out, int max,
		     char *err, size_t errlen)
{
	char buf[XFER_ADDR_LIST_MAX + 1];
	const char *why;
	char *save = NULL;
	int n = 0;
	memset(out, 0, sizeof(*out) * (size_t)max);
	if ((remote && strlen(remote) > XFER_ADDR_LIST_MAX) ||
	    (local && strlen(local) > XFER_ADDR_LIST_MAX)) {
		snprintf(err, errlen, "address list too long (at most %d characters)",
			 XFER_ADDR_LIST_MAX);
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", remote ? remote : "");
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (n == max) {
			snprintf(err, errlen, "too many links (at most %d)", max);
			return -EINVAL;
		}
		struct xfer_path *p = &out[n++];
		if (net_addr_parse(t, &p->remote, &why)) {
			snprintf(err, errlen, "bad address '%.64s': %s", t, why);
			return -EINVAL;
		}
		snprintf(p->rname, sizeof(p->rname), "%.63s", t);
	}
	if (!n) {
		snprintf(err, errlen, "no address");
		return -EINVAL;
	}
	if (!local)
		return n;
	snprintf(buf, sizeof(buf), "%s", local);
	int i = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), i++) {
		if (i == n) {
			snprintf(err, errlen, "more source addresses than links");
			return -EINVAL;
		}
		/* parsed with a placeholder port, then bound to port 0 (the kernel picks) */
		char full[128];
		snprintf(full, sizeof(full),
			 strchr(t, ':') && t[0] != '[' ? "[%.64s]:1" : "%.64s:1", t);
		struct xfer_path *p = &out[i];
		if (net_addr_parse(full, &p->local, &why)) {
			snprintf(err, errlen, "bad source address '%.64s'", t);
			return -EINVAL;
		}
		if (p->local.ss.ss_family == AF_INET)
			((struct sockaddr_in *)&p->local.ss)->sin_port = 0;
		else
			((struct sockaddr_in6 *)&p->local.ss)->sin6_port = 0;
		p->has_local = 1;
		snprintf(p->lname, sizeof(p->lname), "%.63s", t);
	}
	return n;
}

void xfer_set_timeout(int fd, int timeout_ms)
{
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/*
 * Connect to <remote> from <local> (NULL: the kernel picks by its routing table) with a
 * blocking socket; <timeout_ms> bounds the connect and, afterwards, every send and receive.
 * A readable <cancel_fd> (or -1 for none) ends the wait early with -ECANCELED. Returns the
 * descriptor or -errno.
 */
static int tcp_dial(const struct net_addr *remote, const struct net_addr *local, int timeout_ms,
		    int cancel_fd)
{
	int fd = socket(remote->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1, err = 0;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (local) {
		/* the port is chosen at connect time, so many streams can share a source address */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (bind(fd, (const struct sockaddr *)&local->ss, local->len) < 0) {
			err = -errno;
			goto fail;
		}
	}
	if (connect(fd, (const struct sockaddr *)&remote->ss, remote->len) < 0) {
		if (errno != EINPROGRESS) {
			err = -errno;
			goto fail;
		}
		struct pollfd p[2] = {{.fd = fd, .events = POLLOUT},
				      {.fd = cancel_fd, .events = POLLIN}};
		int n = poll(p, cancel_fd >= 0 ? 2 : 1, timeout_ms);
		if (n == 0) {
			err = -ETIMEDOUT;
			goto fail;
		}
		if (n > 0 && cancel_fd >= 0 && (p[1].revents & POLLIN)) {
			err = -ECANCELED;
			goto fail;
		}
		socklen_t len = sizeof(err);
		if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) {
			err = -errno;
			goto fail;
		}
		if (err) {
			err = -err;
			goto fail;
		}
	}
	int flags = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	xfer_set_timeout(fd, timeout_ms);
	return fd;
fail:
	close(fd);
	return err;
}

/*
 * The client's proof: HMAC-SHA256(token, nonce | role | session). The server answers with
 * a label in front, so it can never be the client's own proof sent back: HMAC-SHA256(token,
 * "accelnet-xfer server" | nonce | role | session). The session id is the client's fresh
 * random input, so an old answer cannot be replayed to a new transfer.
 */
static void mac_compute(const struct xfer_token *t, int server, const uint8_t nonce[XFER_NONCE_LEN],
			uint8_t role, const uint8_t session[XFER_SESSION_LEN],
			uint8_t out[XFER_MAC_LEN])
{
	static const char label[] = "accelnet-xfer server";
	uint8_t msg[sizeof(label) - 1 + XFER_NONCE_LEN + 1 + XFER_SESSION_LEN], *p = msg;
	if (server) {
		memcpy(p, label, sizeof(label) - 1);
		p += sizeof(label) - 1;
	}
	memcpy(p, nonce, XFER_NONCE_LEN);
	p[XFER_NONCE_LEN] = role;
	memcpy(p + XFER_NONCE_LEN + 1, session, XFER_SESSION_LEN);
	p += XFER_NONCE_LEN + 1 + XFER_SESSION_LEN;
	memset(out, 0, XFER_MAC_LEN);
	if (!t || !t->len)
		return;
	unsigned len = XFER_MAC_LEN;
	HMAC(EVP_sha256(), t->key, (int)t->len, msg, (size_t)(p - msg), out, &len);
	OPENSSL_cleanse(msg, sizeof(msg));
}

/* Client side of the handshake; on ERR the server's text goes to <err>; -EACCES also when
 * the client holds a token and the server's OK does not prove it holds it too. */
static int xfer_handshake_client(struct net_conn *c, const struct xfer_token *t, uint8_t role,
				 const uint8_t session[XFER_SESSION_LEN], char *err, size_t errlen)
{
	struct xfer_hdr h;
	uint8_t meta[512];
	err[0] = 0;
	int rc = xfer_frame_recv(c, &h, meta, sizeof(meta) - 1);
	if (rc)
		return rc;
	if (h.type == XFER_ERR) { /* refused before the challenge (TLS required...) */
		xfer_err_decode(meta, h.meta_len, err, errlen);
		return -EACCES;
	}
	uint8_t nonce[XFER_NONCE_LEN];
	if (h.type != XFER_CHALLENGE || xfer_challenge_decode(meta, h.meta_len, nonce))
		return -EPROTO;
	struct xfer_hello hello = {.version = XFER_VERSION, .role = role};
	memcpy(hello.session, session, XFER_SESSION_LEN);
	mac_compute(t, 0, nonce, role, session, hello.mac);
	uint8_t out[XFER_HELLO_LEN];
	xfer_hello_encode(out, &hello);
	if ((rc = xfer_frame_send(c, XFER_HELLO, out, sizeof(out))))
		return rc;
	if ((rc = xfer_frame_recv(c, &h, meta, sizeof(meta) - 1)))
		return rc;
	if (h.type == XFER_ERR) {
		size_t n = xfer_err_decode(meta, h.meta_len, err, errlen);
		/* a peer of version 1 says only this much */
		if (!strcmp(err, "unsupported protocol version"))
			snprintf(err + n, errlen - n,
				 ": the peer runs an older accelnet (xfer protocol 1); this one "
				 "speaks %u: run the same accelnet release at both ends",
				 XFER_VERSION);
		return -EACCES;
	}
	uint8_t proof[XFER_MAC_LEN], want[XFER_MAC_LEN];
	int has;
	if (h.type != XFER_OK || xfer_ok_decode(meta, h.meta_len, proof, &has))
		return -EPROTO;
	if (t && t->len) {
		/* mutual: the server shows it holds the token too, or it is not the one we meant */
		mac_compute(t, 1, nonce, role, session, want);
		if (!has || CRYPTO_memcmp(want, proof, XFER_MAC_LEN)) {
			snprintf(err, errlen,
				 "the server did not prove it holds the token (a server without "
				 "--token, or not the server you meant)");
			return -EACCES;
		}
	}
	return 0;
}

int xfer_handshake_server(struct net_conn *c, const struct xfer_token *t, struct xfer_hello *out)
{
	uint8_t nonce[XFER_NONCE_LEN];
	if (RAND_bytes(nonce, sizeof(nonce)) != 1)
		return -EIO;
	int rc = xfer_frame_send(c, XFER_CHALLENGE, nonce, sizeof(nonce));
	if (rc)
		return rc;
	struct xfer_hdr h;
	uint8_t meta[XFER_HELLO_LEN];
	if ((rc = xfer_frame_recv(c, &h, meta, sizeof(meta))))
		return rc;
	if (h.type != XFER_HELLO || xfer_hello_decode(meta, h.meta_len, out))
		return -EPROTO;
	if (out->version != XFER_VERSION) {
		char msg[200];
		int n = snprintf(msg, sizeof(msg),
				 "unsupported protocol version: the peer speaks xfer protocol %u, "
				 "this one %u (a manifest sent in parts): run the same accelnet "
				 "release at both ends",
				 out->version, XFER_VERSION);
		xfer_frame_send(c, XFER_ERR, msg, (uint32_t)n);
		return -EPROTO;
	}
	uint8_t want[XFER_MAC_LEN], ok[XFER_MAC_LEN];
	if (!t || !t->len)
		return xfer_frame_send(c, XFER_OK, ok, (uint32_t)xfer_ok_encode(ok, NULL));
	mac_compute(t, 0, nonce, out->role, out->session, want);
	if (CRYPTO_memcmp(want, out->mac, XFER_MAC_LEN)) {
		static const char msg[] = "authentication failed: wrong or missing token";
		xfer_frame_send(c, XFER_ERR, msg, sizeof(msg) - 1);
		return -EACCES;
	}
	mac_compute(t, 1, nonce, out->role, out->session, want);
	return xfer_frame_send(c, XFER_OK, ok, (uint32_t)xfer_ok_encode(ok, want));
}

/* After connecting: TLS with <ctx> (verifying <hostport>'s host), or the plain magic when
 * <ctx> is NULL. -EACCES when TLS fails, with why in <err>. */
static int xfer_conn_start_client(struct net_conn *c, struct ssl_ctx_st *ctx, const char *hostport,
				  char *err, size_t errlen)
{
	if (!ctx) {
		uint8_t magic[4];
		xfer_magic_encode(magic);
		return net_conn_write_all(c, magic, sizeof(magic));
	}
	char why[200];
	int rc = net_tls_connect(c, ctx, hostport, why, sizeof(why));
	if (rc == -EACCES)
		snprintf(err, errlen, "TLS: %s", why);
	else if (rc == -ENOMEM)
		snprintf(err, errlen, "%s", why);
	else if (rc)
		snprintf(err, errlen, "TLS handshake failed (does the server have --tls-cert?)%s%s",
			 why[0] && rc == -EPROTO ? ": " : "", rc == -EPROTO ? why : "");
	return rc == -ENOMEM ? rc : rc ? -EACCES : 0;
}

int xfer_conn_start_server(struct net_conn *c, struct ssl_ctx_st *ctx, int tls_required,
			   const char **why)
{
	int tls = net_tls_sniff(c);
	if (tls < 0) {
		*why = "no preamble";
		return tls == -EAGAIN ? -ETIMEDOUT : tls;
	}
	if (tls) {
		char err[200];
		if (!ctx) {
			*why =
			    "client asked for TLS, and this server has no certificate (--tls-cert)";
			return -EPROTO;
		}
		int rc = net_tls_accept(c, ctx, err, sizeof(err));
		if (rc == -ENOMEM) {
			*why = "cannot start TLS";
			return rc;
		}
		if (rc) {
			*why = "TLS handshake failed (or no valid client certificate)";
			return -EACCES;
		}
		return 0;
	}
	uint8_t magic[4];
	int rc = net_conn_read_all(c, magic, sizeof(magic));
	if (rc)
		return rc;
	if (xfer_magic_decode(magic)) {
		*why = "not an xfer client";
		return -EPROTO;
	}
	if (tls_required) {
		static const char msg[] =
		    "this server requires TLS with a client certificate (--tls)";
		xfer_frame_send(c, XFER_ERR, msg, sizeof(msg) - 1);
		*why = "plain connection refused: TLS required";
		return -EACCES;
	}
	return 0;
}

int xfer_conn_open(const struct xfer_path *p, const struct xfer_dial *d, struct net_conn *c,
		   int *reached, char *err, size_t errlen)
{
	*reached = 0;
	net_conn_init(c, -1);
	int fd = tcp_dial(&p->remote, p->has_local ? &p->local : NULL, d->connect_ms, d->cancel_fd);
	if (fd < 0) {
		snprintf(err, errlen, "cannot reach %s: %s", p->rname, strerror(-fd));
		return fd;
	}
	*reached = 1;
	net_conn_init(c, fd);
	xfer_set_timeout(fd, d->stall_ms);
	err[0] = 0;
	int rc = xfer_conn_start_client(c, d->tls, p->rname, err, errlen);
	if (!rc)
		rc = xfer_handshake_client(c, d->token, d->role, d->session, err, errlen);
	if (rc) {
		if (!err[0])
			snprintf(err, errlen, "%s: %s", p->rname, strerror(-rc));
		net_conn_close(c);
	}
	return rc;
}
