/*
 * splice_body.c - response bodies relayed by splice(2) (see splice_body.h).
 */
#include "proxy/splice_body.h"
#include "runtime/proxy_metric.h"
#include "net/splice.h"
#include "proxy/upstream.h"

#include <errno.h>

struct splice_x {
	struct net_pipe pipe;
	unsigned on : 1; /* the body goes by splice; the pipe is this exchange's */
};

static size_t ctx_off;
static uint32_t bit; /* joined by a body it splices (splice_body_begin()) */

static struct splice_x *ctx_of(struct exchange *x)
{
	return xhooks_join(x, &splice_hook);
}

static const struct splice_x *ctx_peek(const struct exchange *x)
{
	return xhooks_peek(x, &splice_hook);
}

int splice_body_on(const struct exchange *x)
{
	return ctx_peek(x)->on;
}

size_t splice_body_held(const struct exchange *x)
{
	return ctx_peek(x)->on ? ctx_peek(x)->pipe.held : 0;
}

/* The backend's read edges while splicing: the relay moves the bytes (splice_body_move). */
static void splice_ready(void *arg)
{
	struct exchange *x = arg;
	x->codec->respond(x);
}

static const struct net_conn_read_ops splice_reads = {.ready = splice_ready};

int splice_body_begin(struct client *cl, const struct http_head *h)
{
	struct exchange *x = cl->x;
	struct worker *w = cl->w;
	struct upconn *up = x->att->up;
	if (!bit || !w->conf->tune.splice || h->framing != HTTP_BODY_LENGTH ||
	    h->content_length < SPLICE_MIN_BYTES || !net_splice_able(&up->conn, &cl->conn) ||
	    xhooks_body_wanted(x) || x->hedge || exchange_pace(x)->sse_hb)
		return 0;
	struct splice_x *s = ctx_of(x);
	if (net_pipe_take(&w->pipes, &s->pipe, SPLICE_PIPE_BYTES, SPLICE_PIPES_MAX) < 0)
		return 0; /* none to lend, or no descriptor: copied */
	s->on = 1;
	/* the transport reads no more into up->in: each read edge only wakes the relay, which
	 * splices once what was read with the head has gone to the client */
	net_conn_read_start(&up->conn, &splice_reads, x);
	return 1;
}

/* The client took <n> bytes from the pipe. */
static void note_sent(struct client *cl, size_t n)
{
	struct exchange *x = cl->x;
	struct xpace *p = exchange_pace(x);
	x->resp.sent += n; /* the access log's bytes */
	metrics_add(metrics_shard_self(cl->w->rt->metrics), PM_PROCESS_SPLICED_BYTES, 0, n);
	p->client_full = 0;
	p->client_took_ms = x->last_ms = loop_now(cl->w->loop);
}

/* The client's socket is full: timeouts.send_ms runs from the last bytes it took. */
static void note_client_full(struct client *cl)
{
	struct xpace *p = exchange_pace(cl->x);
	cl->writable = 0;
	if (!p->client_full) {
		p->client_full = 1;
		if (!p->client_took_ms)
			p->client_took_ms = loop_now(cl->w->loop);
	}
}

/* The backend ended (or failed) before the body's last byte: the client gets what the pipe
 * holds, as much as its socket takes now, then a cut connection. */
static enum run backend_cut(struct client *cl)
{
	struct splice_x *s = ctx_of(cl->x);
	ssize_t n = cl->writable ? net_splice_out(&s->pipe, &cl->conn) : 0;
	if (n > 0)
		note_sent(cl, (size_t)n);
	return exchange_abort(cl->x, "backend closed mid-response");
}

/* The body's last byte is in the pipe. What the backend sent past it stays in the socket
 * (a copied body leaves it in the buffer, where attempt_end() sees it): a connection with
 * bytes nobody asked for, or at its end, is not kept, or they would answer the next
 * request sent on it. */
static void check_past_body(struct exchange *x, struct upconn *up)
{
	char b;
	ssize_t n = net_conn_peek(&up->conn, &b, 1);
	if (n == -EAGAIN)
		up->conn.readable = 0; /* drained: the next edge says more came */
	else
		x->att->reusable = 0;
}

enum run splice_body_move(struct client *cl, int *progress)
{
	struct exchange *x = cl->x;
	struct splice_x *s = ctx_of(x);
	struct upconn *up = x->att->up;
	if (client_out_pending(cl) || x->resp.ready)
		return RUN_STAY; /* the head and the bytes read with it go first */
	size_t room = s->pipe.size - s->pipe.held;
	if (!x->resp.done && up->conn.readable && room) {
		size_t want = x->resp.left < room ? (size_t)x->resp.left : room;
		ssize_t n = net_splice_in(&s->pipe, &up->conn, want);
		if (n > 0) {
			x->resp.left -= (uint64_t)n;
			x->resp.done = x->resp.left == 0;
			x->last_ms = loop_now(cl->w->loop);
			*progress = 1;
			if (x->resp.done)
				check_past_body(x, up);
		} else if (n == -EAGAIN) {
			if (!s->pipe.held) /* an empty pipe had a slot: the socket is drained */
				up->conn.readable = 0;
		} else
			return backend_cut(cl);
	}
	if (s->pipe.held && cl->writable) {
		ssize_t n = net_splice_out(&s->pipe, &cl->conn);
		if (n > 0) {
			note_sent(cl, (size_t)n);
			*progress = 1;
		} else if (n == -EAGAIN)
			note_client_full(cl);
		else
			return exchange_abort(x, "client went away");
	}
	return RUN_STAY;
}

static void splice_end(struct exchange *x, uint64_t now_ns)
{
	(void)now_ns;
	struct splice_x *s = ctx_of(x);
	if (s->on)
		net_pipe_give(&x->w->pipes, &s->pipe);
	s->on = 0;
}

const struct xhook splice_hook = {
    .name = "splice",
    .ctx_size = sizeof(struct splice_x),
    .ctx_off = &ctx_off,
    .bit = &bit,
    .end = splice_end,
};
