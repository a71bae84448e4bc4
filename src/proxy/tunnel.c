/*
 * tunnel.c - the WebSocket tunnel's handshake checks, its pump, its timer and its counts
 * (see tunnel.h).
 *
 * The pump is one function run for each way: read the source into its buffer while there
 * is room, write the buffer to the sink while it takes it. The transport reads (net/conn.h:
 * the client's bytes through client_read(), the backend's through this file's callbacks,
 * both started for the tunnel's life), also on a side's own readiness between passes; the
 * write flags are edges (written until a short write). So a way that stops because the sink
 * is full resumes on the sink's write edge, and one that stops because the buffer is full
 * resumes as soon as the sink has taken some of it, in the same pass.
 */
#include "proxy/tunnel.h"
#include "core/clock.h"
#include "core/log.h"
#include "proxy/client.h"
#include "proxy/forward.h"
#include "proxy/upstream.h"
#include "runtime/proxy_metric.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct tunnel {
	uint64_t last_ms;	    /* a byte last moved, either way */
	uint64_t sent[TUNNEL_WAYS]; /* bytes relayed each way */
	unsigned client_eof : 1;    /* the client ended its side ... */
	unsigned backend_eof : 1;   /* ... the backend its */
	unsigned backend_shut : 1;  /* the backend was told (our sending side shut) */
	unsigned client_shut : 1;   /* ... the client was */
};

/* Is the field <name> of <h> one token <tok>, case-insensitively? */
static int field_is(const struct http_head *h, const char *name, const char *tok)
{
	const struct http_header *f = http_find_only_header(h, name);
	size_t n = strlen(tok);
	return f && f->value.len == n && strncasecmp(f->value.p, tok, n) == 0;
}

/* A WebSocket opening handshake (RFC 6455 section 4.1) as HTTP/1.1 frames one. */
static int asks_websocket(const struct http_head *h)
{
	return h->meth == HTTP_GET && h->minor == 1 && h->framing == HTTP_BODY_NONE &&
	       (h->flags & HTTP_F_UPGRADE) && field_is(h, "upgrade", "websocket");
}

static void count(struct worker *w, enum proxy_metric id, size_t series, uint64_t n)
{
	metrics_add(metrics_shard_self(w->rt->metrics), id, series, n);
}

static int tunnels_full(const struct worker *w, unsigned open)
{
	unsigned max = w->conf->limits.max_tunnels;
	return max && open >= max;
}

enum run tunnel_stage(struct exchange *x)
{
	if (x->codec->http2 && !x->route->websocket && asks_websocket(x->head))
		return exchange_reply(x, 405,
				      "this route does not tunnel WebSocket (routes.websocket)",
				      0); /* an extended CONNECT: a plain GET's 200 would open it */
	if (!x->route->websocket || !asks_websocket(x->head))
		return RUN_AGAIN;
	if (tunnels_full(x->w, atomic_load_explicit(&x->w->rt->tunnels, memory_order_relaxed)))
		return exchange_reply(x, 503, "limits.max_tunnels WebSocket tunnels are open", 0);
	x->tunnel = 1;
	return RUN_AGAIN;
}

int tunnel_accepts(const struct exchange *x, const struct http_head *h)
{
	/* not before the whole handshake went: the rest of our head (X-Forwarded-For, the identity
	 * authenticated) would never go, and the client's first bytes would end the head (an early
	 * event-stream head is the client side's to refuse: it checks before it asks) */
	return x->tunnel && x->uphead && x->att->head_off == forward_head_len(x, x->att) &&
	       (h->flags & HTTP_F_UPGRADE) && field_is(h, "upgrade", "websocket");
}

enum run tunnel_start(struct client *cl, const struct http_head *h, size_t len)
{
	struct exchange *x = cl->x;
	struct worker *w = cl->w;
	struct upconn *up = x->att->up;
	unsigned open = atomic_fetch_add_explicit(&w->rt->tunnels, 1, memory_order_relaxed);
	struct tunnel *t = NULL;
	const char *why = "limits.max_tunnels WebSocket tunnels are open";
	int status = 503, n = -1;
	if (tunnels_full(w, open))
		goto fail;
	why = "out of memory";
	if (!(t = calloc(1, sizeof(*t))))
		goto fail;
	n = rewrite_response(cl->out->data + cl->out->end, buf_room(cl->out), h, 1, x->names.reqid,
			     NULL);
	why = "the backend's 101 head does not fit";
	status = 502;
	if (n < 0)
		goto fail;
	cl->out->end += (uint32_t)n;
	buf_consume(up->in, len);
	x->status = 101;
	x->log.ttfb_ns = clock_now_ns();
	exchange_response_started(x);
	t->last_ms = loop_now(w->loop);
	cl->tunnel = t;
	cl->state = C_TUNNEL;
	cl->conn.readable = 1; /* frames may have come behind the head */
	up->conn.readable = 1;
	up->read_got = 0;
	net_conn_read_stop(&up->conn); /* the upstream half's reads end; the pump's begin */
	return RUN_AGAIN;
fail:
	atomic_fetch_sub_explicit(&w->rt->tunnels, 1, memory_order_relaxed);
	free(t);
	return exchange_reply(x, status, why, 0);
}

/* The transport's alloc for the backend's side: the room at the end of up->in. */
static int up_room(void *arg, char **p, size_t *len)
{
	struct upconn *up = arg;
	if (!up->in && !(up->in = buf_get(&up->w->bufs)))
		return -ENOMEM;
	if (!buf_room(up->in))
		buf_compact(up->in);
	if (!buf_room(up->in))
		return -ENOSPC;
	*p = up->in->data + up->in->end;
	*len = buf_room(up->in);
	return 0;
}

/* ... and its read: the bytes join up->in; an end is noted. */
static void up_took(void *arg, ssize_t n)
{
	struct upconn *up = arg;
	if (n > 0) {
		up->in->end += (uint32_t)n;
		up->read_got += (size_t)n;
	} else {
		up->read_end = n ? (int)n : 1;
	}
}

static const struct net_conn_read_ops tunnel_up_reads = {.alloc = up_room, .read = up_took};

/* The backend's side, read as client_read() reads the client's (client.h). */
static ssize_t read_backend(struct upconn *up)
{
	if (!up->read_end)
		net_conn_read_start(&up->conn, &tunnel_up_reads, up);
	size_t got = up->read_got;
	up->read_got = 0;
	if (got)
		return (ssize_t)got;
	if (up->read_end)
		return up->read_end == 1 ? 0 : up->read_end;
	return up->conn.readable ? -ENOSPC : -EAGAIN;
}

/*
 * One way: <n> is what reading the source into *b gave (read_backend, client_read; -EAGAIN
 * when not read: after the end, *eof); write *b to <dst> while it takes bytes, give *b back
 * once empty. Bytes written are added to *sent. 0, or -errno when a side failed.
 */
static int pump(struct worker *w, ssize_t n, struct buf **b, struct net_conn *dst, int *writable,
		unsigned *eof, uint64_t *sent, int *moved)
{
	if (n == 0)
		*eof = 1;
	else if (n > 0)
		*moved = 1;
	else if (n != -EAGAIN && n != -ENOSPC)
		return (int)n;
	if (*b && buf_len(*b) && *writable) {
		ssize_t k = net_conn_write(dst, buf_head(*b), buf_len(*b));
		if (k == -EAGAIN || k == -EINTR) {
			*writable = 0;
		} else if (k < 0) {
			return (int)k;
		} else {
			buf_consume(*b, (size_t)k);
			*sent += (uint64_t)k;
			*moved = 1;
			if (buf_len(*b))
				*writable = 0; /* a short write: its socket buffer is full */
		}
	}
	if (*b && !buf_len(*b))
		worker_buf_release(w, b);
	return 0;
}

/* End the tunnel for <why>: counted, logged with the exchange, connection closed. */
static enum run tunnel_close(struct client *cl, enum tunnel_end why)
{
	struct tunnel *t = cl->tunnel;
	struct worker *w = cl->w;
	count(w, PM_PROCESS_TUNNELS_CLOSED, why, 1);
	log_debug("%s: tunnel closed (%s): %llu bytes to the backend, %llu to the client", cl->ip,
		  why == TUNNEL_END_CLOSED  ? "closed"
		  : why == TUNNEL_END_IDLE  ? "idle"
		  : why == TUNNEL_END_DRAIN ? "drain"
					    : "error",
		  (unsigned long long)t->sent[TUNNEL_TO_BACKEND],
		  (unsigned long long)t->sent[TUNNEL_TO_CLIENT]);
	exchange_count_response(cl->x, 101);
	cl->x->relayed = !client_out_pending(cl); /* the route's figures: a 101 once it went */
	tunnel_free(cl);
	client_close(cl);
	return RUN_GONE;
}

enum run tunnel_run(struct client *cl)
{
	struct tunnel *t = cl->tunnel;
	struct exchange *x = cl->x;
	struct upconn *up = x->att->up;
	struct worker *w = cl->w;
	for (;;) {
		int moved = 0, err = 0;
		uint64_t to_be = t->sent[TUNNEL_TO_BACKEND], to_cl = t->sent[TUNNEL_TO_CLIENT];
		unsigned ceof = t->client_eof, beof = t->backend_eof;
		if (client_flush(cl) < 0) /* the 101 head */
			return tunnel_close(cl, TUNNEL_END_ERROR);
		worker_buf_release(w, &cl->out);
		err = pump(w, ceof ? -EAGAIN : client_read(cl), &cl->in, &up->conn, &up->writable,
			   &ceof, &t->sent[TUNNEL_TO_BACKEND], &moved);
		if (!err && !client_out_pending(cl))
			err = pump(w, beof ? -EAGAIN : read_backend(up), &up->in, &cl->conn,
				   &cl->writable, &beof, &t->sent[TUNNEL_TO_CLIENT], &moved);
		t->client_eof = ceof;
		t->backend_eof = beof;
		x->req.sent += t->sent[TUNNEL_TO_BACKEND] - to_be; /* what the access log says */
		x->resp.sent += t->sent[TUNNEL_TO_CLIENT] - to_cl;
		if (t->sent[TUNNEL_TO_BACKEND] > to_be)
			count(w, PM_PROCESS_TUNNEL_BYTES, TUNNEL_TO_BACKEND,
			      t->sent[TUNNEL_TO_BACKEND] - to_be);
		if (t->sent[TUNNEL_TO_CLIENT] > to_cl)
			count(w, PM_PROCESS_TUNNEL_BYTES, TUNNEL_TO_CLIENT,
			      t->sent[TUNNEL_TO_CLIENT] - to_cl);
		if (err) {
			log_debug("%s: tunnel: %s", cl->ip, strerror(-err));
			return tunnel_close(cl, TUNNEL_END_ERROR);
		}
		/* an end is passed on once what came before it has gone */
		if (t->client_eof && !cl->in && !t->backend_shut) {
			net_conn_shutdown(&up->conn);
			t->backend_shut = 1;
		}
		if (t->backend_eof && !up->in && !client_out_pending(cl) && !t->client_shut) {
			net_conn_shutdown(&cl->conn);
			t->client_shut = 1;
		}
		if (t->backend_shut && t->client_shut)
			return tunnel_close(cl, TUNNEL_END_CLOSED);
		if (!moved)
			return RUN_STAY;
		t->last_ms = loop_now(w->loop);
	}
}

/* When the drain cuts it: timeouts.tunnel_drain_ms after its worker began draining. */
static uint64_t drain_end(const struct worker *w)
{
	return w->drain_ms + w->conf->timeouts.tunnel_drain_ms;
}

uint64_t tunnel_due(const struct worker *w, uint64_t last_ms, enum tunnel_end *why)
{
	uint64_t idle = last_ms + w->conf->timeouts.tunnel_idle_ms;
	*why = TUNNEL_END_IDLE;
	if (w->draining && drain_end(w) < idle) {
		*why = TUNNEL_END_DRAIN;
		return drain_end(w);
	}
	return idle;
}

uint64_t tunnel_deadline(const struct client *cl)
{
	enum tunnel_end why;
	return tunnel_due(cl->w, cl->tunnel->last_ms, &why);
}

enum run tunnel_on_timer(struct client *cl)
{
	uint64_t now = loop_now(cl->w->loop);
	if (cl->w->draining && now >= drain_end(cl->w))
		return tunnel_close(cl, TUNNEL_END_DRAIN);
	if (now >= cl->tunnel->last_ms + cl->w->conf->timeouts.tunnel_idle_ms)
		return tunnel_close(cl, TUNNEL_END_IDLE);
	return RUN_AGAIN; /* it moved since the timer was set */
}

int tunnel_count_in(struct worker *w)
{
	unsigned open = atomic_fetch_add_explicit(&w->rt->tunnels, 1, memory_order_relaxed);
	if (!tunnels_full(w, open))
		return 0;
	atomic_fetch_sub_explicit(&w->rt->tunnels, 1, memory_order_relaxed);
	return -EBUSY;
}

void tunnel_count_bytes(struct worker *w, enum tunnel_way way, uint64_t n)
{
	if (n)
		count(w, PM_PROCESS_TUNNEL_BYTES, way, n);
}

void tunnel_count_out(struct worker *w, enum tunnel_end why)
{
	count(w, PM_PROCESS_TUNNELS_CLOSED, why, 1);
	atomic_fetch_sub_explicit(&w->rt->tunnels, 1, memory_order_relaxed);
}

void tunnel_free(struct client *cl)
{
	if (!cl->tunnel)
		return;
	atomic_fetch_sub_explicit(&cl->w->rt->tunnels, 1, memory_order_relaxed);
	free(cl->tunnel);
	cl->tunnel = NULL;
}
