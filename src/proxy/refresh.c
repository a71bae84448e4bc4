/*
 * refresh.c - background refreshes for stale-while-revalidate, and fills whose client left
 * (see refresh.h).
 */
#include "proxy/refresh.h"
#include "core/container.h"
#include "core/log.h"
#include "core/rand.h"
#include "http/body.h"
#include "proxy/admission.h"
#include "proxy/forward.h"
#include "proxy/upstream.h"
#include "runtime/pick.h"

#include <errno.h>
#include <stdlib.h>

/* Interim responses a refresh skips, at most: more is a hostile backend (relay.c's bound). */
#define REFRESH_INTERIM_MAX 8

struct refresh {
	struct list_node link; /* on w->refreshes */
	struct worker *w;
	struct pool_rt *pool;
	struct backend *be;
	struct upconn *up;
	struct buf *req;
	size_t sent;
	struct cache_obj *fill, *stale;
	struct cache_fill_ctx cfx;
	struct http_body body;
	int head_done, storing;
	int reusable;	   /* the connection may carry another request after this answer */
	uint64_t wait_ms;  /* the most time between two signs of progress */
	unsigned interims; /* interim responses skipped */
	struct loop_timer timer;
};

static void refresh_free(struct refresh *r, int ok)
{
	struct worker *w = r->w;
	struct cache_store *s = r->cfx.store;
	loop_timer_stop(w->loop, &r->timer);
	if (r->up) {
		if (ok && r->body.done && r->reusable && (!r->up->in || !buf_len(r->up->in)))
			upconn_release(r->up);
		else
			upconn_close(r->up);
	}
	if (r->be)
		admission_release(r->pool, r->be, loop_now(w->loop), rand_next(&w->rng));
	if (r->fill) { /* (a 304's fill has ended already: r->fill is NULL) */
		cache_fill_end(s, r->fill, ok && r->storing);
		cache_obj_put(s, r->fill);
	}
	if (r->stale && !ok)
		atomic_flag_clear(&r->stale->refreshing); /* a later request may try again */
	if (r->stale)
		cache_obj_put(s, r->stale);
	buf_put(&w->bufs, r->req);
	list_del(&w->refreshes, &r->link);
	free(r);
}

/* The response head is in up->in: what it means for the stored response. */
static int on_head(struct refresh *r)
{
	struct upconn *up = r->up;
	struct http_head h, req;
	int n;
	for (;;) {
		n = http_parse_response(buf_head(up->in), buf_len(up->in), up->in->cap, HTTP_GET,
					&h);
		if (n == 0)
			return buf_len(up->in) == up->in->cap ? -1 : 0;
		if (n < 0 || (h.status < 200 && ++r->interims > REFRESH_INTERIM_MAX))
			return -1;
		if (h.status >= 200)
			break;
		/* interim (100, 103): skipped, and the final head may be right behind it in
		 * what was read (no more bytes may come to look at it again) */
		buf_consume(up->in, (size_t)n);
	}
	r->head_done = 1;
	r->reusable = !(h.flags & HTTP_F_CLOSE) && h.minor == 1 && h.framing != HTTP_BODY_CLOSE;
	http_body_init(&r->body, h.framing, h.content_length);
	if (http_parse_request(buf_head(r->req), buf_len(r->req), buf_len(r->req), &req) <= 0)
		return -1;
	const char *why = NULL;
	if (h.status == 304) {
		struct cache_obj *o = r->fill;
		r->fill = NULL;
		int err = cache_fill_304(&r->cfx, o, r->stale, &h);
		cache_obj_put(r->cfx.store, o);
		buf_consume(up->in, (size_t)n);
		return err < 0 ? -1 : 1;
	}
	if (h.status >= 500 || !cache_fill_start(&r->cfx, r->fill, &h, &req, &why)) {
		/* not storable or an error: the stored response stays as it is; the fill ends
		 * (cache_fill_start ends it when it says no), or it would stay linked, filling,
		 * for every later revalidation of the key to wait on */
		log_debug("refresh: status %d not kept (%s)", h.status, why ? why : "error");
		if (h.status >= 500)
			cache_fill_end(r->cfx.store, r->fill, 0);
		cache_obj_put(r->cfx.store, r->fill);
		r->fill = NULL;
		return -1;
	}
	r->storing = 1;
	buf_consume(up->in, (size_t)n);
	return 0;
}

/* The body bytes in up->in into the fill. 0, or -1 when the fill failed. */
static int body_in(struct refresh *r)
{
	struct upconn *up = r->up;
	if (!up->in || !buf_len(up->in) || r->body.done)
		return 0;
	if (http_body_scan(&r->body, buf_head(up->in), buf_len(up->in), 0) < 0)
		return -1;
	if (r->body.ready &&
	    cache_fill_bytes(&r->cfx, r->fill, buf_head(up->in), r->body.ready) < 0)
		return -1;
	buf_consume(up->in, r->body.ready);
	http_body_sent(&r->body, r->body.ready);
	return 0;
}

/* Move what can move. 1: done well; 0: wait; -1: failed. */
static int step(struct refresh *r)
{
	struct upconn *up = r->up;
	if (up->failed)
		return -1;
	size_t cl = 0; /* the backend's credential line (forward.h) goes with the head */
	const char *cred = forward_cred(r->be, &cl);
	if (r->req && !up->connecting && up->writable && r->sent < buf_len(r->req) + cl) {
		struct iovec iov[3];
		int k = forward_iov(buf_head(r->req), buf_len(r->req), r->sent, cred, cl, iov);
		ssize_t n = net_conn_writev(&up->conn, iov, k);
		if (n > 0)
			r->sent += (size_t)n;
		else if (n != -EAGAIN && n != -EINTR)
			return -1;
		if (r->sent < buf_len(r->req) + cl)
			up->writable = 0;
	}
	if (r->head_done && body_in(r) < 0)
		return -1; /* (an adopted fill's bytes read before it was) */
	while (!up->connecting && up->readable && !r->body.done) {
		ssize_t n = worker_read(r->w, &up->conn, &up->in, &up->readable, up->hup);
		if (n == -EAGAIN)
			break;
		if (n == 0 && r->head_done && r->body.framing == HTTP_BODY_CLOSE) {
			r->body.done = 1;
			break;
		}
		if (n <= 0 && n != -ENOSPC)
			return -1;
		if (!r->head_done) {
			int k = on_head(r);
			if (k)
				return k;
		}
		if (r->head_done && body_in(r) < 0)
			return -1;
	}
	if (r->head_done && r->body.done)
		return 1;
	loop_timer_set(r->w->loop, &r->timer, loop_now(r->w->loop) + r->wait_ms);
	return 0;
}

static void on_event(void *arg)
{
	struct refresh *r = arg;
	int k = step(r);
	if (k)
		refresh_free(r, k > 0);
}

static void on_timer(struct loop_timer *t)
{
	refresh_free(container_of(t, struct refresh, timer), 0);
}

int refresh_start(struct worker *w, struct pool_rt *pool, struct buf *req, struct cache_obj *fill,
		  struct cache_obj *stale, const struct cache_fill_ctx *cfx)
{
	struct pick_hint hint = {0};
	int err = 0;
	struct refresh *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	struct backend *be = pool_pick(pool, loop_now(w->loop), rand_next(&w->rng), &hint);
	if (!be) {
		free(r);
		return -EBUSY;
	}
	struct upconn *up = upconn_get(w, be, &err);
	if (!up) {
		admission_release(pool, be, loop_now(w->loop), rand_next(&w->rng));
		free(r);
		return err ? err : -ENOMEM;
	}
	r->w = w;
	r->pool = pool;
	r->be = be;
	r->up = up;
	r->req = req;
	r->fill = fill;
	r->stale = stale;
	r->cfx = *cfx;
	cache_obj_get(fill);
	cache_obj_get(stale);
	r->wait_ms = w->conf->timeouts.first_byte_ms;
	r->timer.fn = on_timer;
	list_push_back(&w->refreshes, &r->link);
	upconn_own(up, r, on_event);
	loop_timer_set(w->loop, &r->timer,
		       loop_now(w->loop) + w->conf->timeouts.connect_ms +
			   w->conf->timeouts.first_byte_ms);
	on_event(r);
	return 0;
}

int refresh_adopt(struct worker *w, struct pool_rt *pool, struct backend *be, struct upconn *up,
		  int reusable, const struct http_body *body, struct cache_obj *fill,
		  const struct cache_fill_ctx *cfx)
{
	struct refresh *r = calloc(1, sizeof(*r));
	if (!r) {
		upconn_close(up);
		admission_release(pool, be, loop_now(w->loop), rand_next(&w->rng));
		return -ENOMEM;
	}
	r->w = w;
	r->pool = pool;
	r->be = be;
	r->up = up;
	r->fill = fill;
	r->cfx = *cfx;
	r->body = *body;
	r->head_done = r->storing = 1;
	r->reusable = reusable;
	r->wait_ms = w->conf->timeouts.between_bytes_ms ? w->conf->timeouts.between_bytes_ms
							: w->conf->timeouts.first_byte_ms;
	cache_obj_get(fill);
	r->timer.fn = on_timer;
	list_push_back(&w->refreshes, &r->link);
	upconn_own(up, r, on_event);
	up->readable = 1; /* whatever edge the transport had not drained: the read says */
	loop_timer_set(w->loop, &r->timer, loop_now(w->loop) + r->wait_ms);
	on_event(r);
	return 0;
}

void refresh_drop_all(struct worker *w)
{
	struct list_node *n;
	while ((n = list_first(&w->refreshes)))
		refresh_free(container_of(n, struct refresh, link), 0);
}
