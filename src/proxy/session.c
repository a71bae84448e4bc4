/*
 * session.c - one client connection and the exchanges it carries.
 *
 * A session is a small state machine driven by session_run(), which every event of the
 * client socket, of its upstream connection and of its timer ends in. run_*() functions
 * move bytes until nothing more can move and say whether to stay (wait for an event), go
 * again (the state changed) or stop (the session is gone).
 *
 *   S_HEAD ---head parsed---> S_EXCHANGE ---response relayed---> S_HEAD (keep-alive)
 *     |                          |   \---no backend / failure---> S_REPLY
 *     \---bad request---> S_REPLY ---> S_HEAD or S_LINGER ---> closed
 *
 * An exchange first reads its request body (up to limits.body_buffer_bytes: await_body),
 * then is admitted to its pool (a backend slot, or the queue), then relays. Reading the
 * body before admission is what keeps a slow client from holding an accelerator; the body's
 * clocks (timeouts.body_ms, limits.min_body_rate over windows) run until it is all read.
 *
 * Bytes are not copied between the sockets: request bodies are written upstream straight
 * from the client's input buffer, responses to the client straight from the upstream
 * connection's input buffer, each time gathered with the head in front in one writev().
 * The one copy is of a body outgrowing a plain buffer into a body buffer (grow_in), and of
 * what follows it back (shrink_in), once per such request.
 * Framing (Content-Length or chunked) is tracked only to know where a body ends; bytes that
 * belong to the body are counted as "ready" and relayed as they are, so Server-Sent Events
 * reach the client one event at a time.
 *
 * A request is retried once, on another backend, when its connection could not be
 * established (nothing was sent, whatever the method), and when a reused keep-alive
 * connection died before any response byte and the method is idempotent.
 */
#include "proxy/proxy-t.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/rand.h"
#include "http/prompt.h"
#include "net/addr.h"
#include "net/sock.h"
#include "proxy/classify.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

enum run { RUN_STAY, RUN_AGAIN, RUN_GONE };

enum up_failure {
	UP_CONNECT,	    /* the connection could not be established */
	UP_CONNECT_TIMEOUT, /* ... within timeouts.connect_ms */
	UP_RESET,	    /* it closed or failed before the response head */
	UP_TIMEOUT,	    /* no response head within timeouts.first_byte_ms */
	UP_BAD,		    /* the response head was malformed */
	UP_INTERIM,	    /* too many interim (1xx) responses */
	UP_LOCAL,	    /* our own shortage (descriptors, buffers): not the backend's */
};

#define LINGER_MS 2000
/* Interim responses (100, 103) relayed per exchange, at most; more is a hostile backend. */
#define INTERIM_MAX 8
#define INTERIM_BYTES_MAX 16384
/* limits.min_body_rate is judged over windows this long, from the end of the head. */
#define BODY_RATE_WINDOW_MS 5000
/* Body buffers one worker lends at once (limits.body_buffer_bytes each, lent while a body is
 * read and given back once it has gone upstream); past that, a body longer than a plain
 * buffer waits for one, unadmitted. */
#define BODY_BUFS_MAX 64
#define BODY_BUF_WAIT_MS 50 /* how often a body waiting for a body buffer looks again */

static const struct conf *conf_of(const struct session *s)
{
	return s->w->px->conf;
}

/* --- buffers and sockets --- */

/*
 * One read from <fd> into *b (taken from the pool if needed). Returns bytes read (> 0),
 * 0 at end of stream, -ENOSPC when the buffer is full, -EAGAIN when nothing was there, or
 * another -errno. A short read means the socket is drained, so *readable is cleared and the
 * next edge will say when more arrives -- unless the peer has shut its side (<hup>): then
 * no edge will come, and the end of stream must still be read.
 */
static ssize_t read_some(struct worker *w, int fd, struct buf **b, int *readable, int hup)
{
	if (!*b && !(*b = buf_get(&w->bufs)))
		return -ENOMEM;
	if (!buf_room(*b))
		buf_compact(*b);
	size_t room = buf_room(*b);
	if (!room)
		return -ENOSPC;
	ssize_t n = recv(fd, (*b)->data + (*b)->end, room, 0);
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR) {
			*readable = 0;
			return -EAGAIN;
		}
		return -errno;
	}
	if ((size_t)n < room && !hup)
		*readable = 0;
	(*b)->end += (uint32_t)n;
	return n;
}

/* Give <b> back to the pool it came from: the plain one, or the one for request bodies. */
static void put_buf(struct worker *w, struct buf *b)
{
	if (b)
		buf_put(b->cap == w->bufs.size ? &w->bufs : &w->body_bufs, b);
}

static void release_buf(struct worker *w, struct buf **b)
{
	if (*b && !buf_len(*b)) {
		put_buf(w, *b);
		*b = NULL;
	}
}

/* Move what s->in holds into a fresh buffer of <pool>, giving the old one back. */
static int move_in(struct session *s, struct buf_pool *pool)
{
	struct buf *b = buf_get(pool);
	if (!b)
		return -ENOMEM;
	memcpy(b->data, buf_head(s->in), buf_len(s->in));
	b->end = (uint32_t)buf_len(s->in);
	put_buf(s->w, s->in);
	s->in = b;
	return 0;
}

/*
 * s->in is full and holds a request body still being buffered: move it to a body buffer
 * (limits.body_buffer_bytes). -ENOSPC when it is one already; -EBUSY when the worker has
 * lent BODY_BUFS_MAX of them (the caller waits for one); -ENOMEM without memory.
 */
static int grow_in(struct session *s)
{
	struct worker *w = s->w;
	if (s->in->cap >= w->body_bufs.size)
		return -ENOSPC;
	if (w->body_bufs.live >= BODY_BUFS_MAX)
		return -EBUSY;
	return move_in(s, &w->body_bufs);
}

/*
 * The request body has gone upstream: a body buffer goes back to its pool at once (so it
 * is lent only while a body is read), what follows in it (a pipelined request) moving to a
 * plain buffer.
 */
static void shrink_in(struct session *s)
{
	struct worker *w = s->w;
	if (!s->in || s->in->cap == w->bufs.size || buf_len(s->in) > w->bufs.size)
		return;
	if (!buf_len(s->in)) {
		put_buf(w, s->in);
		s->in = NULL;
		return;
	}
	(void)move_in(s, &w->bufs); /* without memory the body buffer is kept a while longer */
}

static size_t out_pending(const struct session *s)
{
	return s->out ? buf_len(s->out) : 0;
}

/*
 * The client shut its side while its request is being served. Like nginx without
 * proxy_ignore_client_abort, take that as the client giving up, so that the backend (an
 * accelerator generating tokens nobody will read) is released at once: closing the upstream
 * connection is the cancellation signal inference servers understand. Bytes still queued
 * (a pipelined request) mean the client is still there.
 */
static int client_gone(struct session *s)
{
	char c;
	s->hup_checked = 1;
	ssize_t n = recv(s->io.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

/* --- ending exchanges --- */

static void count_response(struct backend *be, int status)
{
	unsigned cls = status >= 100 && status < 600 ? (unsigned)status / 100 : 0;
	if (be)
		atomic_fetch_add_explicit(&be->responses[cls], 1, memory_order_relaxed);
}

/* Close the hedged copy of the request, if any, and give its slot back. */
static void hedge_drop(struct session *s)
{
	struct exchange *x = &s->x;
	if (!x->hedge)
		return;
	upconn_close(x->hedge);
	x->hedge = NULL;
	pool_release(x->pool, x->hedge_be, loop_now(s->w->loop), rand_next(&s->w->rng));
	x->hedge_be = NULL;
}

/* Let go of the backend slot and the upstream connection (closed, never reused). */
static void exchange_drop_upstream(struct session *s)
{
	struct exchange *x = &s->x;
	hedge_drop(s);
	if (x->up) {
		upconn_close(x->up);
		x->up = NULL;
	}
	if (x->be) {
		pool_release(x->pool, x->be, loop_now(s->w->loop), rand_next(&s->w->rng));
		x->be = NULL;
	}
}

static void exchange_clear(struct session *s)
{
	struct exchange *x = &s->x;
	if (x->wt.state != W_IDLE)
		pool_withdraw(x->pool, &x->wt, loop_now(s->w->loop), rand_next(&s->w->rng));
	exchange_drop_upstream(s);
	buf_put(&s->w->bufs, x->uphead);
	x->uphead = NULL;
	s->in_exchange = 0;
	x->buffering = 0;
}

/* s->out, taken if need be and compacted so its room is at the end; NULL without memory. */
static struct buf *out_buf(struct session *s)
{
	if (!s->out && !(s->out = buf_get(&s->w->bufs)))
		return NULL;
	buf_compact(s->out);
	return s->out;
}

/* Append p[0..n) to s->out. 0, or -ENOMEM (no buffer, or no room left in it). */
static int out_put(struct session *s, const char *p, size_t n)
{
	struct buf *b = out_buf(s);
	if (!b || buf_room(b) < n)
		return -ENOMEM;
	memcpy(b->data + b->end, p, n);
	b->end += (uint32_t)n;
	return 0;
}

/* Queue a response made by the proxy. Decides keep-alive; moves to S_REPLY. */
static enum run reply_error(struct session *s, int status, const char *detail, int keep)
{
	struct worker *w = s->w;
	const char *id = s->in_exchange ? s->x.reqid : NULL;
	if (s->in_exchange && (!s->x.req_read_done || s->x.req_close || s->x.minor == 0))
		keep = 0;
	if (w->draining)
		keep = 0;
	int n = -1;
	if (out_buf(s))
		n = s->in_exchange && s->x.early_head
			? rewrite_sse_error(s->out->data + s->out->end, buf_room(s->out), status,
					    detail)
			: rewrite_error(s->out->data + s->out->end, buf_room(s->out), status,
					detail, keep, id, status == 503 ? 1 : 0);
	if (n < 0) {
		/* the client has not read what it was sent (interim responses, heartbeats):
		 * it cannot get an answer, so it gets a closed connection */
		log_debug("%s %d %s (no room left for the answer: closing)", s->client_ip, status,
			  detail);
		if (s->in_exchange)
			count_response(s->x.be, status);
		session_close(s);
		return RUN_GONE;
	}
	s->out->end += (uint32_t)n;
	log_debug("%s %d %s", s->client_ip, status, detail);
	if (s->in_exchange) {
		count_response(s->x.be, status);
		if (s->x.req_ready)
			buf_consume(s->in, s->x.req_ready);
		exchange_clear(s);
	}
	s->keep_alive = keep != 0;
	s->state = S_REPLY;
	s->phase_ms = loop_now(w->loop);
	return RUN_AGAIN;
}

/* The response can no longer be completed: close both sides. */
static enum run exchange_abort(struct session *s, const char *why)
{
	log_debug("%s: exchange aborted: %s", s->client_ip, why);
	if (s->x.be)
		count_response(s->x.be, 0);
	session_close(s);
	return RUN_GONE;
}

static enum run exchange_finish(struct session *s)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	count_response(x->be, x->status);
	if (x->be) {
		pool_release(x->pool, x->be, loop_now(w->loop), rand_next(&w->rng));
		x->be = NULL;
	}
	struct upconn *up = x->up;
	x->up = NULL;
	if (x->up_reusable && x->req_read_done && !x->req_ready && (!up->in || !buf_len(up->in)))
		upconn_release(up);
	else
		upconn_close(up);
	exchange_clear(s);
	s->served++;
	release_buf(w, &s->out);
	if (!x->client_keep || w->draining || !x->req_read_done) {
		shutdown(s->io.fd, SHUT_WR);
		s->state = S_LINGER;
		s->phase_ms = loop_now(w->loop);
		return RUN_AGAIN;
	}
	s->state = S_HEAD;
	s->phase_ms = loop_now(w->loop);
	s->head_scanned = 0;
	release_buf(w, &s->in);
	return RUN_AGAIN;
}

/* Write what s->out holds to the client while it takes it. RUN_STAY, or RUN_GONE. */
static enum run flush_out(struct session *s)
{
	while (out_pending(s) && s->writable) {
		ssize_t n = send(s->io.fd, buf_head(s->out), out_pending(s), MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR) {
				s->writable = 0;
				return RUN_STAY;
			}
			session_close(s);
			return RUN_GONE;
		}
		buf_consume(s->out, (size_t)n);
	}
	return RUN_STAY;
}

/*
 * routes.sse_heartbeat_ms: a streaming request that has no answer yet gets the proxy's own
 * event-stream head (once) and an SSE comment, so the client and any idle timer between
 * see life while it waits in the queue or for the first token.
 */
static void sse_heartbeat(struct session *s)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	x->hb_next_ms = loop_now(w->loop) + x->route->sse_heartbeat_ms;
	if (out_pending(s))
		return; /* the last one is still unread: a client that does not read gets no more */
	if (!out_buf(s))
		return;
	if (!x->early_head) {
		int n = rewrite_sse_head(s->out->data + s->out->end, buf_room(s->out), x->reqid);
		if (n < 0)
			return;
		s->out->end += (uint32_t)n;
		x->early_head = 1;
	}
	int n = rewrite_sse_comment(s->out->data + s->out->end, buf_room(s->out), "waiting");
	if (n > 0)
		s->out->end += (uint32_t)n;
}

/*
 * Heartbeats go to a streaming request: one that accepts text/event-stream, or whose JSON
 * body asks for "stream": true. The body is looked at when the request goes to admission,
 * over the <len> body bytes at the front of s->in (all of it, once buffered).
 */
static void sse_decide(struct session *s, size_t len)
{
	struct exchange *x = &s->x;
	if (!x->sse_body)
		return;
	x->sse_body = 0;
	x->sse_hb = x->sse_hb || (s->in && http_wants_stream(buf_head(s->in), len));
	x->hb_next_ms = loop_now(s->w->loop) + x->route->sse_heartbeat_ms;
}

/* --- starting exchanges --- */

static enum run exchange_connect(struct session *s, const struct backend *exclude);

/*
 * Hedging (pools.hedge_after_ms): an idempotent request without a body that has had no
 * answer for that long is sent again to another backend with a free slot; the first
 * response head wins and the other connection is closed, which cancels the work there.
 */
static int hedge_due(const struct session *s, uint64_t *when)
{
	const struct exchange *x = &s->x;
	unsigned after = x->pool->conf->hedge_after_ms;
	if (!after || x->hedged || x->resp_head || !x->up || x->req_framing != HTTP_BODY_NONE ||
	    !http_method_idempotent(x->meth) || !x->uphead)
		return 0;
	*when = x->connect_ms + after;
	return 1;
}

static void hedge_start(struct session *s)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	struct pick_hint h = {.exclude = x->be, .key = x->wt.key, .has_key = x->wt.has_key};
	int err = 0;
	x->hedged = 1;
	struct backend *be = pool_pick(x->pool, loop_now(w->loop), rand_next(&w->rng), &h);
	if (!be)
		return; /* no other backend free: keep waiting for the first */
	struct upconn *up = upconn_get(w, be, &err);
	if (!up) {
		pool_release(x->pool, be, loop_now(w->loop), rand_next(&w->rng));
		return;
	}
	up->s = s;
	x->hedge = up;
	x->hedge_be = be;
	x->hedge_off = 0;
	x->hedge_sent_ns = clock_now_ns();
	atomic_fetch_add_explicit(&x->be->hedged, 1, memory_order_relaxed);
}

/* The hedged copy takes over: the first connection is closed and its slot given back. */
static enum run hedge_promote(struct session *s)
{
	struct exchange *x = &s->x;
	if (x->up)
		upconn_close(x->up);
	pool_release(x->pool, x->be, loop_now(s->w->loop), rand_next(&s->w->rng));
	x->up = x->hedge;
	x->be = x->hedge_be;
	x->sent_ns = x->hedge_sent_ns;
	x->up_reused = x->up->served > 0;
	x->uphead_off = x->hedge_off;
	x->hedge = NULL;
	x->hedge_be = NULL;
	atomic_fetch_add_explicit(&x->be->hedge_wins, 1, memory_order_relaxed);
	return RUN_AGAIN;
}

/* Drive the hedged copy: send its head, and promote it once it has an answer. */
static enum run hedge_run(struct session *s)
{
	struct exchange *x = &s->x;
	struct upconn *h = x->hedge;
	if (h->failed) {
		hedge_drop(s);
		return RUN_STAY;
	}
	if (!h->connecting && h->writable && x->hedge_off < x->uphead->end) {
		ssize_t n = send(h->io.fd, x->uphead->data + x->hedge_off,
				 x->uphead->end - x->hedge_off, MSG_NOSIGNAL);
		if (n > 0)
			x->hedge_off += (size_t)n;
		else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			hedge_drop(s);
			return RUN_STAY;
		}
		if (x->hedge_off < x->uphead->end)
			h->writable = 0;
	}
	if (!h->connecting && h->readable) {
		ssize_t n = read_some(s->w, h->io.fd, &h->in, &h->readable, h->hup);
		if (n == 0 || (n < 0 && n != -EAGAIN && n != -ENOSPC)) {
			hedge_drop(s);
			return RUN_STAY;
		}
	}
	if (h->in && buf_len(h->in))
		return hedge_promote(s);
	return RUN_STAY;
}

static enum run upstream_failed(struct session *s, enum up_failure why)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	uint64_t now = loop_now(w->loop);
	struct backend *be = x->be;
	int connect_failed = why == UP_CONNECT || why == UP_CONNECT_TIMEOUT;

	if (why == UP_LOCAL) { /* never marks the backend failed, never spends a retry */
		exchange_drop_upstream(s);
		if (x->resp_head)
			return exchange_abort(s, "proxy out of descriptors or buffers");
		return reply_error(s, 503, "proxy out of descriptors or buffers", 1);
	}

	if (connect_failed && be) {
		backend_mark_failed(be, now);
		log_warn("backend %s: connect failed%s; out of rotation for %u ms", be->name,
			 why == UP_CONNECT_TIMEOUT ? " (timeout)" : "", be->pool->fail_timeout_ms);
	}
	if (x->hedge && !x->resp_head)
		return hedge_promote(s); /* the copy on another backend carries on alone */
	/* a kept-alive connection the backend had closed is not the backend failing: that
	 * retry is free; one after a failed connect spends the pool's retry budget */
	int stale = why == UP_RESET && x->up_reused && http_method_idempotent(x->meth);
	int retry = !x->retried && !x->resp_head && x->req_sent == 0 &&
		    (stale || (connect_failed && pool_retry_allowed(x->pool)));
	if (retry) {
		exchange_drop_upstream(s);
		x->retried = 1;
		x->retry_status = why == UP_CONNECT_TIMEOUT ? 504 : 502;
		x->uphead_off = 0;
		if (be)
			atomic_fetch_add_explicit(&be->retries, 1, memory_order_relaxed);
		return exchange_connect(s, connect_failed ? be : NULL);
	}
	if (be && !connect_failed)
		log_warn("backend %s: %s", be->name,
			 why == UP_TIMEOUT   ? "no response within first_byte_ms"
			 : why == UP_BAD     ? "malformed response"
			 : why == UP_INTERIM ? "too many interim (1xx) responses"
					     : "connection closed before the response");
	if (be && why == UP_TIMEOUT && !x->resp_head) /* a gateway timeout: latency and a failure */
		backend_observe(x->pool, be, now, (clock_now_ns() - x->sent_ns) / 1000, 504);
	exchange_drop_upstream(s);
	if (x->resp_head)
		return exchange_abort(s, "upstream failed mid-response");
	switch (why) {
	case UP_CONNECT_TIMEOUT:
		return reply_error(s, 504, "backend connect timeout", 1);
	case UP_TIMEOUT:
		return reply_error(s, 504, "backend did not answer in time", 1);
	case UP_BAD:
		return reply_error(s, 502, "backend sent a malformed response", 1);
	case UP_INTERIM:
		return reply_error(s, 502, "backend sent too many interim responses", 1);
	case UP_CONNECT:
		return reply_error(s, 502, "backend connection failed", 1);
	default:
		return reply_error(s, 502, "backend closed the connection", 1);
	}
}

/* Count a request of <pool> that no backend will serve. */
static void pool_turned_away(struct pool_rt *pool)
{
	atomic_fetch_add_explicit(&pool->unavailable, 1, memory_order_relaxed);
}

/* x->be holds a claimed slot: take an idle connection to it, or start a new one. */
static enum run exchange_attach(struct session *s)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	uint64_t now = loop_now(w->loop);
	int err = 0;
	x->up = upconn_get(w, x->be, &err);
	if (!x->up) {
		/* the connect failed at once (refused on loopback, or out of descriptors) */
		log_debug("backend %s: connect: %s", x->be->name, strerror(-err));
		return upstream_failed(s, sock_error_is_local(err) ? UP_LOCAL : UP_CONNECT);
	}
	x->up->s = s;
	x->up_reused = x->up->served > 0;
	x->connect_ms = now;
	x->sent_ns = clock_now_ns();
	x->last_read_ns = 0;
	s->last_ms = now;
	return RUN_AGAIN;
}

static int can_spill(const struct session *s)
{
	return s->x.route->has_spill && !s->x.spilled;
}

/*
 * The primary pool cannot take the request soon enough (its queue is full, none of its
 * backends is up or answers, or the request has waited spillover.after_ms): move it, once, to the
 * route's spillover pool. It keeps its tenant and class; an affinity key is not carried
 * over (the other pool hashes its own way, and its request head is gone).
 */
static enum run exchange_spill(struct session *s)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	if (x->wt.state != W_IDLE)
		pool_withdraw(x->pool, &x->wt, loop_now(w->loop), rand_next(&w->rng));
	x->spilled = 1;
	x->retried = 0; /* the other pool is admitted afresh */
	x->pool = &w->px->rt->pools[x->route->spill_pool];
	x->wt.has_key = 0;
	atomic_fetch_add_explicit(&x->pool->spilled_in, 1, memory_order_relaxed);
	return exchange_connect(s, NULL);
}

/*
 * Find a backend for the exchange: the first time through admission (which may queue it),
 * on a retry directly among the others, never <exclude>.
 */
static enum run exchange_connect(struct session *s, const struct backend *exclude)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	uint64_t now = loop_now(w->loop);
	struct backend *be = NULL;
	if (x->retried) {
		struct pick_hint h = {
		    .exclude = exclude, .key = x->wt.key, .has_key = x->wt.has_key};
		be = pool_pick(x->pool, now, rand_next(&w->rng), &h);
		if (!be && can_spill(s))
			return exchange_spill(s);
		if (!be) {
			pool_turned_away(x->pool);
			return reply_error(s, x->retry_status,
					   x->retry_status == 504
					       ? "backend connect timeout, no other backend"
					       : "backend connection failed, no other backend",
					   1);
		}
	} else {
		switch (pool_admit(x->pool, &x->wt, now, rand_next(&w->rng), &be)) {
		case Q_PICKED:
			break;
		case Q_QUEUED:
			return RUN_STAY; /* session_take_grants() resumes it */
		case Q_FULL:
			pool_turned_away(x->pool);
			if (can_spill(s))
				return exchange_spill(s);
			return reply_error(s, 503, "every backend is busy and the queue is full",
					   1);
		case Q_NONE:
			pool_turned_away(x->pool);
			if (can_spill(s))
				return exchange_spill(s);
			return reply_error(s, 503, "no backend available", 1);
		}
	}
	x->be = be;
	return exchange_attach(s);
}

void session_take_grants(struct worker *w)
{
	struct waiter *wt = worker_inbox_take(&w->inbox), *next;
	for (; wt; wt = next) {
		next = wt->inext;
		struct session *s = container_of(wt, struct session, x.wt);
		wt->inext = NULL;
		wt->state = W_IDLE;
		s->x.be = wt->granted;
		wt->granted = NULL;
		s->last_ms = loop_now(w->loop);
		if (exchange_attach(s) != RUN_GONE)
			session_run(s);
	}
}

static void make_request_id(struct worker *w, char *out)
{
	uint64_t a = rand_next(&w->rng), b = rand_next(&w->rng);
	snprintf(out, REQUEST_ID_MAX + 1, "%016llx%016llx", (unsigned long long)a,
		 (unsigned long long)b);
}

/* A complete request head of <head_len> bytes is at the front of s->in, parsed in w->head. */
static enum run exchange_start(struct session *s, size_t head_len)
{
	struct worker *w = s->w;
	const struct conf *c = conf_of(s);
	const struct http_head *h = &w->head;
	struct exchange *x = &s->x;

	memset(x, 0, sizeof(*x));
	x->wt.owner = w;
	s->in_exchange = 1;
	x->meth = h->meth;
	x->minor = h->minor;
	x->req_close = (h->flags & HTTP_F_CLOSE) != 0;
	x->req_framing = h->framing;
	x->req_left = h->content_length;
	http_chunked_init(&x->req_ch);
	x->req_read_done = h->framing == HTTP_BODY_NONE;
	if (!rewrite_incoming_request_id(h, x->reqid))
		make_request_id(w, x->reqid);

	if (h->framing == HTTP_BODY_LENGTH && c->limits.max_body_bytes &&
	    h->content_length > c->limits.max_body_bytes)
		return reply_error(s, 413, "request body larger than limits.max_body_bytes", 0);
	const struct conf_route *route = route_match(c, h);
	if (!route) {
		buf_consume(s->in, head_len);
		return reply_error(s, 404, "no route matches this request", 1);
	}
	x->route = route;
	x->pool = &w->px->rt->pools[route->pool];
	if (route->sse_heartbeat_ms && h->minor == 1 && h->meth != HTTP_HEAD) {
		/* a HEAD answer has no body: an event stream there would desync the client */
		const struct http_header *a = http_find_header(h, "Accept");
		x->sse_hb = a && memmem(a->value.p, a->value.len, "text/event-stream", 17);
		x->sse_body = h->framing == HTTP_BODY_LENGTH;
		x->hb_next_ms = loop_now(w->loop) + route->sse_heartbeat_ms;
	}
	classify_request(route, x->pool->conf, h, s->client_key, &x->wt);
	pool_retry_earn(x->pool);
	x->want_key = x->pool->conf->hash.key == HASH_KEY_PROMPT && x->pool->conf->balance->keyed &&
		      h->framing == HTTP_BODY_LENGTH && h->content_length > 0;

	struct rewrite_request_info info = {
	    .client_ip = s->client_ip,
	    .request_id = x->reqid,
	    .upstream_minor = h->minor,
	    .trusted = s->trusted,
	};
	if (!(x->uphead = buf_get(&w->bufs)))
		return exchange_abort(s, "out of memory");
	int n = rewrite_request(x->uphead->data, x->uphead->cap, h, &info);
	if (n < 0)
		return reply_error(s, 431, "request head too large once forwarded", 0);
	x->uphead->end = (uint32_t)n;
	if ((h->flags & HTTP_F_EXPECT_CONTINUE) && !x->req_read_done && h->minor == 1) {
		/* answer for the backend (Expect is not forwarded): the client sends the body
		 * now, and it flows to the backend once connected */
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		if (out_put(s, cont, sizeof(cont) - 1) < 0)
			return exchange_abort(s, "out of memory");
	}
	buf_consume(s->in, head_len);
	s->head_scanned = 0;
	s->state = S_EXCHANGE;
	s->last_ms = x->body_start_ms = loop_now(w->loop);
	/* a body is read (up to limits.body_buffer_bytes) before the request may take a
	 * slot, so a client that sends it slowly, or never, holds no accelerator */
	x->buffering = !x->req_read_done && (c->limits.body_buffer_bytes || x->want_key);
	x->rate_mark_ms = x->body_start_ms;
	if (x->buffering)
		return RUN_AGAIN;
	if (x->sse_body) {
		size_t blen = s->in ? buf_len(s->in) : 0;
		sse_decide(s, blen < x->req_left ? blen : (size_t)x->req_left);
	}
	return exchange_connect(s, NULL);
}

static int request_scan(struct session *s);

/* request_scan() found the body malformed (-400) or too large (-413): say so and close. */
static enum run reply_bad_body(struct session *s, int bad)
{
	return reply_error(s, -bad,
			   bad == -413 ? "request body larger than limits.max_body_bytes"
				       : "malformed chunked request body",
			   0);
}

/*
 * Before admission: read the request body until it is complete, or limits.body_buffer_bytes
 * of it (and, for prefix-affinity, hash.body_max_bytes) are here, or no buffer can hold more.
 * Then the prompt key is taken from what arrived and the request goes to admission; the rest
 * of a longer body streams, under limits.min_body_rate and timeouts.body_ms.
 */
static enum run await_body(struct session *s)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	const struct conf_hash *hc = &x->pool->conf->hash;
	uint64_t want = conf_of(s)->limits.body_buffer_bytes;
	if (x->want_key && hc->body_max_bytes > want)
		want = hc->body_max_bytes;
	if (flush_out(s) == RUN_GONE) /* a "100 Continue" the client waits for */
		return RUN_GONE;
	for (;;) {
		int bad = request_scan(s);
		if (bad)
			return reply_bad_body(s, bad);
		if (x->req_read_done || x->req_ready >= want)
			break;
		if (!s->readable)
			return RUN_STAY;
		ssize_t n = read_some(w, s->io.fd, &s->in, &s->readable, s->hup);
		if (n == -ENOSPC) {
			int err = grow_in(s);
			if (err == -ENOSPC)
				break; /* as much as we hold: the rest streams */
			if (err == -EBUSY) {
				/* every body buffer is lent: wait for one (the timer looks
				 * again), never admit a body that has not arrived */
				x->buf_wait = 1;
				return RUN_STAY;
			}
			if (err < 0)
				return exchange_abort(s, "out of memory");
			continue;
		}
		if (n == -EAGAIN)
			return RUN_STAY;
		if (n <= 0)
			return exchange_abort(s, "client closed during the request body");
		s->last_ms = loop_now(w->loop);
	}
	x->buffering = 0;
	sse_decide(s, x->req_ready);
	if (x->want_key) {
		size_t have = x->req_ready < hc->body_max_bytes ? x->req_ready : hc->body_max_bytes;
		x->wt.has_key = http_prompt_key(buf_head(s->in), have, 1, hc->prefix_bytes,
						&x->wt.key) == 1;
		x->want_key = 0;
	}
	return exchange_connect(s, NULL);
}

/*
 * Is the proxy itself holding the request body back (queued for a slot, its buffer full,
 * or the backend not taking bytes)? Then a slow body is not the client's doing.
 */
static int body_held_back(const struct session *s)
{
	const struct exchange *x = &s->x;
	return x->wt.state != W_IDLE || x->buf_wait || (s->in && buf_len(s->in) >= s->in->cap) ||
	       (x->req_ready && x->up && (x->up->connecting || !x->up->writable));
}

/*
 * When the request body is next judged: timeouts.body_ms after the head for the whole of
 * it, and the end of the current limits.min_body_rate window (BODY_RATE_WINDOW_MS), the
 * earlier of the two; 0 when neither applies.
 */
static uint64_t body_deadline(const struct session *s)
{
	const struct exchange *x = &s->x;
	const struct conf *c = conf_of(s);
	uint64_t due = 0;
	if (x->req_read_done)
		return 0;
	if (c->timeouts.body_ms)
		due = x->body_start_ms + c->timeouts.body_ms;
	if (c->limits.min_body_rate) {
		uint64_t window_end = x->rate_mark_ms + BODY_RATE_WINDOW_MS;
		if (!due || window_end < due)
			due = window_end;
	}
	return due;
}

/*
 * The body deadline came (<now>). Returns 1 when the body is late: past timeouts.body_ms, or
 * slower than limits.min_body_rate over the window that ended. A window in which the proxy
 * held the body back is not counted; a good one starts the next.
 */
static int body_late(struct session *s, uint64_t now)
{
	struct exchange *x = &s->x;
	const struct conf *c = conf_of(s);
	uint64_t got = x->req_sent + x->req_ready;
	if (c->timeouts.body_ms && now >= x->body_start_ms + c->timeouts.body_ms)
		return 1;
	if (!c->limits.min_body_rate || now < x->rate_mark_ms + BODY_RATE_WINDOW_MS)
		return 0;
	uint64_t need = (uint64_t)c->limits.min_body_rate * (now - x->rate_mark_ms) / 1000;
	if (got - x->rate_mark_bytes < need && !body_held_back(s))
		return 1;
	x->rate_mark_ms = now;
	x->rate_mark_bytes = got;
	return 0;
}

/* --- relaying bodies --- */

/* Extend x->req_ready over the body bytes now in s->in. 0, -400 malformed, -413 too large. */
static int request_scan(struct session *s)
{
	struct exchange *x = &s->x;
	uint64_t limit = conf_of(s)->limits.max_body_bytes;
	size_t avail = s->in ? buf_len(s->in) - x->req_ready : 0;
	if (x->req_read_done || !avail)
		return 0;
	if (x->req_framing == HTTP_BODY_LENGTH) {
		size_t take = avail < x->req_left ? avail : (size_t)x->req_left;
		x->req_ready += take;
		x->req_left -= take;
		x->req_read_done = x->req_left == 0;
		return 0;
	}
	const char *p = buf_head(s->in) + x->req_ready;
	while (avail && !http_chunked_done(&x->req_ch)) {
		int is_data;
		ssize_t n = http_chunked_scan(&x->req_ch, p, avail, &is_data);
		if (n < 0)
			return -400;
		if (is_data && limit && (x->req_payload += (uint64_t)n) > limit)
			return -413;
		/* a chunk declared larger than what the limit leaves is refused at its size
		 * line, before a byte of it goes upstream (a backend that cut sizes to 32
		 * bits would read a short chunk and the rest as another request) */
		if (limit && http_chunked_pending(&x->req_ch) > limit - x->req_payload)
			return -413;
		x->req_ready += (size_t)n;
		p += n;
		avail -= (size_t)n;
	}
	x->req_read_done = http_chunked_done(&x->req_ch);
	return 0;
}

/* Extend x->resp_ready over the body bytes now in up->in. -1: malformed. */
static int response_scan(struct exchange *x, struct buf *in)
{
	size_t avail = in ? buf_len(in) - x->resp_ready : 0;
	if (x->resp_read_done || !avail)
		return 0;
	switch (x->resp_framing) {
	case HTTP_BODY_LENGTH: {
		size_t take = avail < x->resp_left ? avail : (size_t)x->resp_left;
		x->resp_ready += take;
		x->resp_left -= take;
		x->resp_read_done = x->resp_left == 0;
		break;
	}
	case HTTP_BODY_CHUNKED: {
		const char *p = buf_head(in) + x->resp_ready;
		while (avail && !http_chunked_done(&x->resp_ch)) {
			int is_data;
			ssize_t n = http_chunked_scan(&x->resp_ch, p, avail, &is_data);
			if (n < 0)
				return -1;
			x->resp_ready += (size_t)n;
			p += n;
			avail -= (size_t)n;
		}
		x->resp_read_done = http_chunked_done(&x->resp_ch);
		break;
	}
	case HTTP_BODY_CLOSE:
		x->resp_ready += avail;
		break;
	case HTTP_BODY_NONE:
		x->resp_read_done = 1;
		break;
	}
	return 0;
}

/* The backend says how many requests wait inside it (pools.load_header): remember it. */
static void note_reported_load(struct exchange *x, const struct http_head *h, uint64_t now_ms)
{
	const char *name = x->pool->conf->load_header;
	const struct http_header *f = name[0] ? http_find_header(h, name) : NULL;
	if (!f || !f->value.len || f->value.len > 9)
		return;
	unsigned depth = 0;
	for (uint32_t i = 0; i < f->value.len; i++) {
		char c = f->value.p[i];
		if (c < '0' || c > '9')
			return; /* not a count: ignore it */
		depth = depth * 10 + (unsigned)(c - '0');
	}
	backend_report_load(x->be, now_ms, depth);
}

/* The response has started: nothing to resend, no copy needed any more. */
static void response_started(struct session *s)
{
	struct exchange *x = &s->x;
	x->resp_head = 1;
	hedge_drop(s); /* the first answer wins; the other backend stops working on it */
	buf_put(&s->w->bufs, x->uphead); /* no retry once a response has started */
	x->uphead = NULL;
}

/*
 * The backend's head <h> (<len> bytes) arrived for a request whose event stream the proxy
 * has already begun (heartbeats). A 200 text/event-stream continues it: a chunked body
 * passes through as it is, a Content-Length body becomes one chunk. Anything else ends it
 * with an SSE error event.
 */
static enum run early_stream_continue(struct session *s, const struct http_head *h, size_t len)
{
	struct exchange *x = &s->x;
	const struct http_header *ct = http_find_header(h, "Content-Type");
	int sse =
	    ct && ct->value.len >= 17 && strncasecmp(ct->value.p, "text/event-stream", 17) == 0;
	if (h->status != 200 || !sse || h->framing == HTTP_BODY_CLOSE ||
	    h->framing == HTTP_BODY_NONE) {
		char detail[80];
		snprintf(detail, sizeof(detail), "the backend answered %d%s", h->status,
			 h->status == 200 ? " without a chunked event stream" : "");
		return reply_error(s, h->status == 200 ? 502 : h->status, detail, 1);
	}
	buf_consume(x->up->in, len);
	if (h->framing == HTTP_BODY_LENGTH) {
		x->wrap_tail = 1;
		if (h->content_length) {
			int n = snprintf(s->out->data + s->out->end, buf_room(s->out), "%llx\r\n",
					 (unsigned long long)h->content_length);
			if (n < 0 || (size_t)n >= buf_room(s->out))
				return exchange_abort(s, "client does not read its event stream");
			s->out->end += (uint32_t)n;
			x->wrap_size = 1;
		}
	}
	response_started(s);
	return RUN_AGAIN;
}

/* Parse what up->in holds of the response head. RUN_STAY: need more; RUN_AGAIN: progress. */
static enum run response_head(struct session *s)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	struct upconn *up = x->up;
	struct http_head *h = &w->head;
	int r = http_parse_response(buf_head(up->in), buf_len(up->in), up->in->cap, x->meth, h);
	if (r == 0)
		return buf_len(up->in) == up->in->cap ? upstream_failed(s, UP_BAD) : RUN_STAY;
	if (r < 0 || h->status == 101)
		return upstream_failed(s, UP_BAD);
	if (!out_buf(s))
		return exchange_abort(s, "out of memory");
	if (h->status < 200) {
		/* interim response (100 Continue, 103 Early Hints): pass it on to 1.1 clients,
		 * a few of them: a backend sending them forever would hold the exchange */
		x->interim_bytes += (uint32_t)r;
		if (++x->interims > INTERIM_MAX || x->interim_bytes > INTERIM_BYTES_MAX)
			return upstream_failed(s, UP_INTERIM);
		if (x->minor == 1 && !x->early_head && buf_room(s->out) >= (size_t)r) {
			memcpy(s->out->data + s->out->end, buf_head(up->in), (size_t)r);
			s->out->end += (uint32_t)r;
		}
		buf_consume(up->in, (size_t)r);
		return RUN_AGAIN;
	}
	uint64_t now_ns = clock_now_ns();
	backend_observe(x->pool, x->be, loop_now(w->loop), (now_ns - x->sent_ns) / 1000, h->status);
	note_reported_load(x, h, loop_now(w->loop));
	x->last_read_ns = now_ns;
	x->status = h->status;
	x->resp_framing = h->framing;
	x->resp_left = h->content_length;
	http_chunked_init(&x->resp_ch);
	x->resp_read_done = h->framing == HTTP_BODY_NONE;
	x->client_keep = !x->req_close && x->minor == 1 && !w->draining &&
			 h->framing != HTTP_BODY_CLOSE && x->req_read_done;
	x->up_reusable = !(h->flags & HTTP_F_CLOSE) && h->minor == 1 && x->minor == 1 &&
			 h->framing != HTTP_BODY_CLOSE;
	if (x->early_head)
		return early_stream_continue(s, h, (size_t)r);
	int n = rewrite_response(s->out->data + s->out->end, buf_room(s->out), h, x->client_keep,
				 x->reqid);
	if (n < 0)
		return upstream_failed(s, UP_BAD);
	s->out->end += (uint32_t)n;
	buf_consume(up->in, (size_t)r);
	response_started(s);
	return RUN_AGAIN;
}

/* Write a[0..alen) then b[0..blen) to <fd> in one call. Bytes written, or -errno. */
static ssize_t send_gathered(int fd, const char *a, size_t alen, const char *b, size_t blen)
{
	struct iovec iov[2];
	int n = 0;
	if (alen)
		iov[n++] = (struct iovec){(void *)a, alen};
	if (blen)
		iov[n++] = (struct iovec){(void *)b, blen};
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
	ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
	return sent < 0 ? -errno : sent;
}

/* Write the request head and ready body bytes upstream. */
static enum run send_upstream(struct session *s, int *progress)
{
	struct exchange *x = &s->x;
	struct upconn *up = x->up;
	size_t head_left = x->uphead ? x->uphead->end - x->uphead_off : 0;
	if (!head_left && !x->req_ready)
		return RUN_STAY;
	ssize_t sent =
	    send_gathered(up->io.fd, head_left ? x->uphead->data + x->uphead_off : NULL, head_left,
			  x->req_ready ? buf_head(s->in) : NULL, x->req_ready);
	if (sent == -EAGAIN || sent == -EINTR) {
		up->writable = 0;
		return RUN_STAY;
	}
	if (sent < 0)
		return upstream_failed(s, UP_RESET);
	size_t k = (size_t)sent;
	size_t from_head = k < head_left ? k : head_left;
	x->uphead_off += from_head;
	k -= from_head;
	if (k) {
		buf_consume(s->in, k);
		x->req_ready -= k;
		x->req_sent += k;
		if (x->req_read_done && !x->req_ready)
			shrink_in(s);
	}
	if (head_left > from_head || x->req_ready)
		up->writable = 0; /* a short write: the socket buffer is full */
	*progress = 1;
	s->last_ms = loop_now(s->w->loop);
	return RUN_STAY;
}

/* Write queued heads and ready response bytes to the client. */
static enum run send_client(struct session *s, int *progress)
{
	struct exchange *x = &s->x;
	struct upconn *up = x->up;
	size_t head_left = out_pending(s);
	if (!head_left && !x->resp_ready)
		return RUN_STAY;
	ssize_t sent = send_gathered(s->io.fd, head_left ? buf_head(s->out) : NULL, head_left,
				     x->resp_ready ? buf_head(up->in) : NULL, x->resp_ready);
	if (sent == -EAGAIN || sent == -EINTR) {
		s->writable = 0;
		return RUN_STAY;
	}
	if (sent < 0)
		return exchange_abort(s, "client went away");
	size_t k = (size_t)sent;
	size_t from_head = k < head_left ? k : head_left;
	if (from_head)
		buf_consume(s->out, from_head);
	k -= from_head;
	if (k) {
		buf_consume(up->in, k);
		x->resp_ready -= k;
	}
	if (out_pending(s) || x->resp_ready)
		s->writable = 0; /* a short write: the socket buffer is full */
	release_buf(s->w, &s->out);
	*progress = 1;
	if (x->resp_head) /* heartbeats do not hold off first_byte_ms */
		s->last_ms = loop_now(s->w->loop);
	return RUN_STAY;
}

/* A streamed response's body bytes arrived: record the time since the previous ones. */
static void note_gap(struct exchange *x)
{
	uint64_t now = clock_now_ns();
	if (x->last_read_ns)
		hist_add(&x->be->gap, (now - x->last_read_ns) / 1000);
	x->last_read_ns = now;
}

static enum run run_exchange(struct session *s)
{
	struct exchange *x = &s->x;
	struct worker *w = s->w;
	if (x->buffering)
		return await_body(s);
	if (x->wt.state != W_IDLE) {
		/* waiting for a slot: only notice a client that gave up */
		if (s->hup && !s->hup_checked && client_gone(s))
			return exchange_abort(s, "client closed the connection while queued");
		return flush_out(s); /* heartbeats */
	}
	for (;;) {
		struct upconn *up = x->up;
		int progress = 0;
		enum run r;
		ssize_t n;

		if (x->hedge && (r = hedge_run(s)) != RUN_STAY)
			continue; /* the copy answered first: carry on with it */
		if (up->failed)
			return upstream_failed(s, sock_error_is_local(up->failed) ? UP_LOCAL
										  : UP_CONNECT);
		/* client -> backend */
		if (!up->connecting && up->writable) {
			r = send_upstream(s, &progress);
			if (r != RUN_STAY)
				return r;
		}
		if (!x->req_read_done && s->readable) {
			n = read_some(w, s->io.fd, &s->in, &s->readable, s->hup);
			if (n == 0 || (n < 0 && n != -EAGAIN && n != -ENOSPC))
				return exchange_abort(s, "client closed during the request body");
			if (n > 0) {
				progress = 1;
				s->last_ms = loop_now(w->loop);
			}
		}
		if (x->req_read_done && s->hup && !s->hup_checked && client_gone(s))
			return exchange_abort(s, "client closed the connection");
		int bad = request_scan(s);
		if (bad && x->resp_head)
			return exchange_abort(s, "bad request body");
		if (bad)
			return reply_bad_body(s, bad);
		/* backend -> client */
		if (!x->resp_read_done && up->readable && !up->connecting) {
			n = read_some(w, up->io.fd, &up->in, &up->readable, up->hup);
			if (n == 0 || (n < 0 && n != -EAGAIN && n != -ENOSPC)) {
				if (!x->resp_head)
					return upstream_failed(s, UP_RESET);
				if (x->resp_framing != HTTP_BODY_CLOSE) {
					/* flush what arrived, then cut the client off */
					(void)response_scan(x, up->in);
					int dummy = 0;
					if (s->writable)
						send_client(s, &dummy);
					return exchange_abort(s, "backend closed mid-response");
				}
				(void)response_scan(x, up->in); /* the tail is body too */
				x->resp_read_done = 1;
				x->up_reusable = 0;
			}
			if (n > 0) {
				progress = 1;
				s->last_ms = loop_now(w->loop);
				if (x->resp_head && x->resp_framing != HTTP_BODY_LENGTH)
					note_gap(x);
			}
		}
		if (!x->resp_head && up->in && buf_len(up->in)) {
			r = response_head(s);
			if (r == RUN_GONE || (r == RUN_AGAIN && s->state != S_EXCHANGE))
				return r;
			if (r == RUN_AGAIN)
				progress = 1;
		}
		if (x->resp_head && response_scan(x, up->in) < 0)
			return exchange_abort(s, "backend sent a malformed chunked body");
		if (s->writable && (out_pending(s) || x->resp_ready)) {
			r = send_client(s, &progress);
			if (r != RUN_STAY)
				return r;
		}
		if (x->wrap_tail && x->resp_read_done && !x->resp_ready) {
			/* the one chunk of a Content-Length body ends; then the last chunk */
			const char *tail = x->wrap_size ? "\r\n0\r\n\r\n" : "0\r\n\r\n";
			if (out_put(s, tail, strlen(tail)) < 0)
				return exchange_abort(s, "out of memory");
			x->wrap_tail = 0;
			continue;
		}
		if (x->resp_head && x->resp_read_done && !out_pending(s) && !x->resp_ready)
			return exchange_finish(s);
		if (!progress)
			return RUN_STAY;
	}
}

/* --- the other states --- */

static enum run run_head(struct session *s)
{
	struct worker *w = s->w;
	size_t max_head = conf_of(s)->limits.max_header_bytes;
	for (;;) {
		size_t len = s->in ? buf_len(s->in) : 0;
		if (len) {
			const char *p = buf_head(s->in);
			/* parse when the head may be complete, and while the request line is short
			 * enough that junk (a TLS hello on this plain port) is refused at once */
			if (len >= max_head || s->head_scanned < 32 ||
			    http_head_may_be_complete(p, s->head_scanned, len)) {
				int r = http_parse_request(p, len, max_head, &w->head);
				if (r > 0)
					return exchange_start(s, (size_t)r);
				if (r < 0)
					return reply_error(s, -r, "malformed request", 0);
			}
			s->head_scanned = len;
		} else if (w->draining) {
			session_close(s);
			return RUN_GONE;
		}
		if (!s->readable)
			return RUN_STAY;
		ssize_t n = read_some(w, s->io.fd, &s->in, &s->readable, s->hup);
		if (n == -EAGAIN)
			return RUN_STAY;
		if (n <= 0) {
			session_close(s);
			return RUN_GONE;
		}
		if (!len)
			s->phase_ms = loop_now(w->loop); /* the header timeout starts now */
	}
}

static enum run run_reply(struct session *s)
{
	if (flush_out(s) == RUN_GONE)
		return RUN_GONE;
	if (out_pending(s))
		return RUN_STAY;
	release_buf(s->w, &s->out);
	s->phase_ms = loop_now(s->w->loop);
	s->head_scanned = 0;
	if (s->keep_alive) {
		s->state = S_HEAD;
		return RUN_AGAIN;
	}
	shutdown(s->io.fd, SHUT_WR);
	s->state = S_LINGER;
	return RUN_AGAIN;
}

/* Read and drop until the client closes, so that our last response is not lost to a RST. */
static enum run run_linger(struct session *s)
{
	while (s->readable) {
		if (s->in)
			s->in->start = s->in->end = 0;
		ssize_t n = read_some(s->w, s->io.fd, &s->in, &s->readable, s->hup);
		if (n == -EAGAIN)
			return RUN_STAY;
		if (n <= 0) {
			session_close(s);
			return RUN_GONE;
		}
	}
	return RUN_STAY;
}

/* --- driver, timer, lifecycle --- */

static void session_arm_timer(struct session *s)
{
	const struct conf_timeouts *t = &conf_of(s)->timeouts;
	const struct exchange *x = &s->x;
	uint64_t deadline;
	switch (s->state) {
	case S_HEAD:
		if ((s->in && buf_len(s->in)) || !s->served)
			deadline = s->phase_ms + t->header_ms;
		else
			deadline = s->phase_ms + t->idle_ms;
		break;
	case S_EXCHANGE:
		if (x->wt.state != W_IDLE) {
			deadline = x->wt.queued_ms + x->pool->conf->queue_timeout_ms;
			if (can_spill(s) && x->wt.queued_ms + x->route->spill_after_ms < deadline)
				deadline = x->wt.queued_ms + x->route->spill_after_ms;
		} else if (x->up && x->up->connecting)
			deadline = x->connect_ms + t->connect_ms;
		else if (!x->resp_head && x->req_read_done && !x->req_ready &&
			 (!x->uphead || x->uphead_off == x->uphead->end))
			deadline = s->last_ms + t->first_byte_ms;
		else
			deadline = s->last_ms + t->between_bytes_ms;
		uint64_t body_due = body_deadline(s);
		if (body_due && body_due < deadline)
			deadline = body_due;
		if (x->buf_wait && loop_now(s->w->loop) + BODY_BUF_WAIT_MS < deadline)
			deadline = loop_now(s->w->loop) + BODY_BUF_WAIT_MS;
		break;
	case S_REPLY:
		deadline = s->phase_ms + t->between_bytes_ms;
		break;
	default:
		deadline = s->phase_ms + LINGER_MS;
		break;
	}
	uint64_t hedge_at;
	if (s->state == S_EXCHANGE && hedge_due(s, &hedge_at) && hedge_at < deadline)
		deadline = hedge_at;
	if (s->state == S_EXCHANGE && x->sse_hb && !x->resp_head && !x->buffering &&
	    x->hb_next_ms < deadline)
		deadline = x->hb_next_ms;
	loop_timer_set(s->w->loop, &s->timer, deadline);
}

void session_run(struct session *s)
{
	for (;;) {
		enum run r;
		switch (s->state) {
		case S_HEAD:
			r = run_head(s);
			break;
		case S_EXCHANGE:
			r = run_exchange(s);
			break;
		case S_REPLY:
			r = run_reply(s);
			break;
		default:
			r = run_linger(s);
			break;
		}
		if (r == RUN_GONE)
			return;
		if (r == RUN_STAY)
			break;
	}
	session_arm_timer(s);
}

static void session_on_timer(struct loop_timer *t)
{
	struct session *s = container_of(t, struct session, timer);
	enum run r = RUN_AGAIN;
	uint64_t hedge_at;
	switch (s->state) {
	case S_HEAD:
		if (s->in && buf_len(s->in))
			r = reply_error(s, 408, "request head not received in time", 0);
		else {
			session_close(s);
			r = RUN_GONE;
		}
		break;
	case S_EXCHANGE: {
		uint64_t body_due = body_deadline(s), now = loop_now(s->w->loop);
		if (body_due && now >= body_due && body_late(s, now)) {
			/* a body too slow or too late: whatever slot it holds is freed */
			if (s->x.resp_head)
				r = exchange_abort(s, "request body not received in time");
			else
				r = reply_error(s, 408, "request body not received in time", 0);
		} else if (s->x.buf_wait) {
			s->x.buf_wait = 0; /* look for a free body buffer again */
		} else if (body_due && now >= body_due) {
			/* a good rate window ended: the next one is armed */
		} else if (s->x.sse_hb && !s->x.resp_head && !s->x.buffering &&
			   loop_now(s->w->loop) >= s->x.hb_next_ms) {
			sse_heartbeat(s);
		} else if (hedge_due(s, &hedge_at) && loop_now(s->w->loop) >= hedge_at) {
			hedge_start(s); /* no answer yet: ask a second backend too */
		} else if (s->x.wt.state != W_IDLE && can_spill(s) &&
			   loop_now(s->w->loop) <
			       s->x.wt.queued_ms + s->x.pool->conf->queue_timeout_ms) {
			r = exchange_spill(s); /* waited spillover.after_ms */
		} else if (s->x.wt.state != W_IDLE) {
			/* a slot granted at this very moment is handed back by the withdrawal */
			pool_withdraw(s->x.pool, &s->x.wt, loop_now(s->w->loop),
				      rand_next(&s->w->rng));
			atomic_fetch_add_explicit(&s->x.pool->queue.timeouts, 1,
						  memory_order_relaxed);
			r = reply_error(s, 503, "no backend slot freed within queue.timeout_ms", 1);
		} else if (s->x.up && s->x.up->connecting)
			r = upstream_failed(s, UP_CONNECT_TIMEOUT);
		else if (!s->x.resp_head && s->x.req_read_done)
			r = upstream_failed(s, UP_TIMEOUT);
		else if (!s->x.resp_head)
			r = reply_error(s, 408, "request body not received in time", 0);
		else
			r = exchange_abort(s, "no bytes within between_bytes_ms");
		break;
	}
	default:
		session_close(s);
		r = RUN_GONE;
		break;
	}
	if (r != RUN_GONE)
		session_run(s);
}

static void session_on_io(struct loop_io *io, unsigned events)
{
	struct session *s = container_of(io, struct session, io);
	if (events & (LOOP_READ | LOOP_HUP))
		s->readable = 1;
	if (events & LOOP_WRITE)
		s->writable = 1;
	if (events & LOOP_HUP)
		s->hup = 1;
	session_run(s);
}

void session_accept(struct worker *w, int fd, const struct sockaddr_storage *peer)
{
	struct session *s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return;
	}
	s->io.fd = fd;
	s->io.fn = session_on_io;
	s->timer.fn = session_on_timer;
	s->w = w;
	s->state = S_HEAD;
	s->phase_ms = loop_now(w->loop);
	net_addr_host((const struct sockaddr *)peer, s->client_ip, sizeof(s->client_ip));
	s->client_key = classify_client_key((const struct sockaddr *)peer);
	s->trusted = net_cidr_match(conf_of(s)->trusted_proxies, conf_of(s)->ntrusted_proxies,
				    (const struct sockaddr *)peer);
	if (loop_io_add(w->loop, &s->io) < 0) {
		close(fd);
		free(s);
		return;
	}
	s->next = w->sessions;
	if (w->sessions)
		w->sessions->prev = s;
	w->sessions = s;
	w->nsessions++;
	session_arm_timer(s);
}

void session_close(struct session *s)
{
	struct worker *w = s->w;
	if (s->in_exchange)
		exchange_clear(s);
	loop_timer_stop(w->loop, &s->timer);
	loop_io_del(w->loop, &s->io);
	close(s->io.fd);
	put_buf(w, s->in);
	put_buf(w, s->out);
	if (s->prev)
		s->prev->next = s->next;
	else
		w->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	w->nsessions--;
	free(s);
	worker_session_gone(w);
}
