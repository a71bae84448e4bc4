/*
 * probe.c - the state machine behind probe.h. The probe's bytes move through the transport
 * (net/conn.h), as every connection to a backend does: for a pool with pools.tls the probe
 * does its TLS handshake (non-blocking, within the attempt's timeout, with the pool's
 * verification, offering the probe's last session), and a failed handshake is a failed
 * attempt whose reason (OpenSSL's) the owner is given. Everything here runs on the main
 * thread's loop, never on the request path.
 */
#include "control/probe.h"
#include "net/sock.h"
#include "net/tls.h"
#include "runtime/pool.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An HTTP/2 probe's session and what its answer said so far. */
struct probe_h2 {
	nghttp2_session *ss;
	int status;	      /* :status; 0 until it came */
	int grpc_status;      /* grpc-status; -1 until it came */
	unsigned char msg[8]; /* the start of the answer's body (a gRPC message) */
	size_t mlen;
	unsigned closed : 1; /* the stream ended */
};

static void h2_drop(struct probe *p)
{
	if (!p->h2s)
		return;
	nghttp2_session_del(p->h2s->ss);
	free(p->h2s);
	p->h2s = NULL;
}

/* Close the probe's connection, if it has one. */
static void probe_disconnect(struct probe *p)
{
	if (p->io.fd < 0)
		return;
	loop_io_del(p->loop, &p->io);
	h2_drop(p);
	if (p->nc.ssl && p->phase == PROBE_READ)
		net_conn_shutdown(&p->nc); /* close_notify: the session stays resumable */
	net_conn_close(&p->nc);
	p->io.fd = -1;
}

void probe_end(struct probe *p)
{
	probe_disconnect(p);
	p->phase = PROBE_WAIT;
	uint64_t next = p->started_ms + p->interval_ms;
	uint64_t now = loop_now(p->loop);
	loop_timer_set(p->loop, &p->timer, next > now ? next : now);
}

void probe_fail(struct probe *p, const char *why)
{
	probe_end(p);
	p->ops->failed(p, why);
}

void probe_skip(struct probe *p, int err)
{
	probe_end(p);
	p->ops->skipped(p, err);
}

static int on_h2_header(nghttp2_session *ss, const nghttp2_frame *f, nghttp2_rcbuf *name,
			nghttp2_rcbuf *value, uint8_t flags, void *ud)
{
	struct probe_h2 *h = ud;
	(void)ss, (void)f, (void)flags;
	nghttp2_vec n = nghttp2_rcbuf_get_buf(name), v = nghttp2_rcbuf_get_buf(value);
	int num = 0;
	for (size_t i = 0; i < v.len && i < 4 && v.base[i] >= '0' && v.base[i] <= '9'; i++)
		num = num * 10 + (v.base[i] - '0');
	if (n.len == 7 && !memcmp(n.base, ":status", 7))
		h->status = num;
	else if (n.len == 11 && !memcmp(n.base, "grpc-status", 11) && v.len)
		h->grpc_status = num;
	return 0;
}

static int on_h2_data(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *data,
		      size_t len, void *ud)
{
	struct probe_h2 *h = ud;
	(void)ss, (void)flags, (void)id;
	for (size_t i = 0; i < len && h->mlen < sizeof(h->msg); i++)
		h->msg[h->mlen++] = data[i];
	return 0;
}

static int on_h2_close(nghttp2_session *ss, int32_t id, uint32_t code, void *ud)
{
	(void)ss, (void)id, (void)code;
	((struct probe_h2 *)ud)->closed = 1;
	return 0;
}

/* gRPC's health request: an uncompressed message of no bytes (HealthCheckRequest, service ""). */
static ssize_t grpc_check_body(nghttp2_session *ss, int32_t id, uint8_t *out, size_t len,
			       uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	(void)ss, (void)id, (void)src, (void)ud;
	if (len < 5)
		return NGHTTP2_ERR_DEFERRED;
	memset(out, 0, 5);
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	return 5;
}

/* Write what the session has. 0, or -1. */
static int h2_flush(struct probe *p)
{
	for (;;) {
		const uint8_t *d;
		ssize_t n = nghttp2_session_mem_send(p->h2s->ss, &d);
		if (n < 0)
			return -1;
		if (!n)
			return 0;
		if (net_conn_write(&p->nc, d, (size_t)n) != n)
			return -1; /* a probe's few small frames fit the socket */
	}
}

/* The request as HTTP/2: the preface, SETTINGS, HEADERS (and a gRPC check's message). */
static int h2_send(struct probe *p)
{
	nghttp2_session_callbacks *cb = NULL;
	struct probe_h2 *h = calloc(1, sizeof(*h));
	if (!h || nghttp2_session_callbacks_new(&cb)) {
		free(h);
		return -1;
	}
	h->grpc_status = -1;
	nghttp2_session_callbacks_set_on_header_callback2(cb, on_h2_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_h2_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_h2_close);
	int rc = nghttp2_session_client_new(&h->ss, cb, h);
	nghttp2_session_callbacks_del(cb);
	if (rc) {
		free(h);
		return -1;
	}
	p->h2s = h;
	const char *host = p->be->conf->discover ? p->be->conf->discover_name : p->be->name;
	const char *path = p->grpc ? "/grpc.health.v1.Health/Check" : p->path;
	const char *scheme = p->nc.ssl ? "https" : "http";
	nghttp2_nv nv[] = {
	    {(uint8_t *)":method", (uint8_t *)(p->grpc ? "POST" : "GET"), 7, p->grpc ? 4 : 3, 0},
	    {(uint8_t *)":scheme", (uint8_t *)scheme, 7, strlen(scheme), 0},
	    {(uint8_t *)":authority", (uint8_t *)host, 10, strlen(host), 0},
	    {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
	    {(uint8_t *)"user-agent", (uint8_t *)"accelnet-health", 10, 15, 0},
	    {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
	    {(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0},
	};
	nghttp2_data_provider body = {.read_callback = grpc_check_body};
	if (nghttp2_submit_settings(h->ss, NGHTTP2_FLAG_NONE, NULL, 0) ||
	    nghttp2_submit_request(h->ss, NULL, nv, p->grpc ? 7 : 5, p->grpc ? &body : NULL, NULL) <
		0)
		return -1;
	return h2_flush(p);
}

int probe_h2_status(struct probe *p, int *status, const char **why)
{
	struct probe_h2 *h = p->h2s;
	char b[4096];
	int ended = 0;
	*why = "the connection ended without an answer";
	for (;;) {
		ssize_t n = net_conn_read(&p->nc, b, sizeof(b));
		if (n == -EAGAIN)
			break;
		if (n <= 0 || nghttp2_session_mem_recv(h->ss, (const uint8_t *)b, (size_t)n) < 0) {
			if (n > 0)
				*why = "not HTTP/2";
			ended = 1;
			break;
		}
		p->len += (size_t)n;
	}
	(void)h2_flush(p);
	if (!p->grpc && h->status) {
		*status = h->status;
		return 1;
	}
	if (p->grpc && h->closed) {
		/* HealthCheckResponse: field 1 (status), varint 1 (SERVING), after the 5-byte
		 * message prefix */
		int serving =
		    h->grpc_status == 0 && h->mlen >= 7 && h->msg[5] == 0x08 && h->msg[6] == 0x01;
		*status = serving ? 200 : 503;
		return h->status || h->grpc_status >= 0 ? 1 : -1;
	}
	return ended ? -1 : 0;
}

/* Send the request. 0, or -1 with the attempt failed, or (no path: the connect was the whole
 * check) handed to the owner to judge. */
static int probe_send(struct probe *p)
{
	char req[512];
	if (p->h2 && p->path) {
		if (p->nc.ssl && !net_tls_alpn_is(&p->nc, "h2")) {
			probe_fail(p, "its TLS handshake did not agree on h2 (ALPN)");
			return -1;
		}
		if (h2_send(p) < 0) {
			probe_fail(p, "cannot send the request");
			return -1;
		}
		p->phase = PROBE_READ;
		p->len = 0;
		return 0;
	}
	if (!p->path) {
		p->phase = PROBE_READ;
		p->len = 0;
		p->ops->readable(p);
		return -1;
	}
	int n =
	    snprintf(req, sizeof(req), "GET %s HTTP/%s\r\nHost: %s\r\n%s\r\n", p->path, p->version,
		     p->be->conf->discover ? p->be->conf->discover_name : p->be->name, p->headers);
	/* conf bounds the path; never send past req */
	if (n < 0 || (size_t)n >= sizeof(req)) {
		probe_fail(p, "the request does not fit");
		return -1;
	}
	if (net_conn_write(&p->nc, req, (size_t)n) != n) {
		probe_fail(p, "cannot send the request");
		return -1;
	}
	p->phase = PROBE_READ;
	p->len = 0;
	return 0;
}

/* One step of the TLS handshake. 1: done; 0: it waits, or failed (ended). */
static int probe_handshake(struct probe *p)
{
	int rc = net_tls_handshake(&p->nc);
	if (rc == 0)
		return 1;
	if (rc == -EAGAIN)
		return 0;
	char why[240], tls[200];
	if (rc == -ECONNRESET)
		snprintf(tls, sizeof(tls), "the backend closed the connection");
	else
		net_tls_error_text(&p->nc, tls, sizeof(tls));
	snprintf(why, sizeof(why), "TLS handshake failed: %s", tls);
	probe_fail(p, why);
	return 0;
}

static void probe_on_io(struct loop_io *io, unsigned events)
{
	struct probe *p = container_of(io, struct probe, io);
	if (p->phase == PROBE_CONNECT && (events & (LOOP_WRITE | LOOP_HUP))) {
		int err = sock_error(io->fd);
		if (err && sock_error_is_local(err)) {
			probe_skip(p, err);
			return;
		}
		if (err) {
			probe_fail(p, strerror(-err));
			return;
		}
		if (p->nc.ssl)
			p->phase = PROBE_HANDSHAKE;
		else if (probe_send(p) < 0)
			return;
	}
	if (p->phase == PROBE_HANDSHAKE && (!probe_handshake(p) || probe_send(p) < 0))
		return;
	if (p->phase == PROBE_READ && (events & (LOOP_READ | LOOP_HUP)))
		p->ops->readable(p);
}

static void probe_on_timer(struct loop_timer *t)
{
	struct probe *p = container_of(t, struct probe, timer);
	if (p->phase != PROBE_WAIT) {
		probe_fail(p, p->ops->timed_out);
		return;
	}
	p->started_ms = loop_now(p->loop);
	p->gen = atomic_load(&p->be->gen);
	if (!backend_present(p->be)) { /* an empty or draining discovery slot: nothing to ask */
		probe_end(p);
		return;
	}
	int fd = sock_connect(&p->be->addr);
	if (fd < 0 && sock_error_is_local(fd)) {
		probe_skip(p, fd);
		return;
	}
	if (fd < 0) {
		probe_fail(p, strerror(-fd));
		return;
	}
	net_conn_init(&p->nc, fd);
	p->io.fd = fd;
	int rc = 0;
	if (p->be->tls) {
		struct net_tls_peer peer = {.sni = p->be->conf->tls_sni,
					    .verify_name = p->be->conf->tls_verify_name,
					    .session = &p->session};
		if (p->h2) { /* HTTP/2, agreed by ALPN */
			peer.alpn = (const unsigned char *)"\x02h2";
			peer.alpn_len = 3;
		}
		rc = net_tls_attach_client(&p->nc, p->be->tls, &peer);
	}
	if (rc == 0)
		rc = loop_io_add(p->loop, &p->io);
	if (rc < 0) {
		net_conn_close(&p->nc);
		p->io.fd = -1;
		probe_skip(p, rc);
		return;
	}
	p->phase = PROBE_CONNECT;
	loop_timer_set(p->loop, &p->timer, p->started_ms + p->timeout_ms);
}

void probe_start(struct probe *p)
{
	p->io.fd = -1;
	p->io.fn = probe_on_io;
	p->timer.fn = probe_on_timer;
	p->phase = PROBE_WAIT;
	loop_timer_set(p->loop, &p->timer, loop_now(p->loop));
}

void probe_stop(struct probe *p)
{
	loop_timer_stop(p->loop, &p->timer);
	probe_disconnect(p);
	net_tls_session_free(p->session);
	p->session = NULL;
}
