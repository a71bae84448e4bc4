/*
 * hedge.c - a second copy of a slow idempotent request (see hedge.h): a second attempt
 * (attempt.h) in the exchange's other slot, beside the current one until one answers.
 */
#include "proxy/hedge.h"
#include "runtime/llm.h"
#include "core/clock.h"
#include "core/rand.h"
#include "proxy/admission.h"
#include "proxy/forward.h"
#include "proxy/up_h2.h"
#include "runtime/pick.h"
#include "runtime/proxy_metric.h"

#include <errno.h>

int hedge_due(const struct exchange *x, uint64_t *when)
{
	unsigned after = x->pool ? x->pool->conf->hedge_after_ms : 0; /* none before the route */
	if (!after || x->hedged || x->tunnel || x->resp_head || !x->att->up ||
	    x->req.framing != HTTP_BODY_NONE || !http_method_idempotent(x->meth) || !x->uphead)
		return 0;
	*when = x->att->connect_ms + after;
	return 1;
}

void hedge_start(struct exchange *x)
{
	struct worker *w = x->w;
	struct attempt *cur = x->att;
	struct pick_hint h = {.exclude = cur->be,
			      .key = x->wt.key,
			      .has_key = x->wt.has_key,
			      .model = x->wt.model,
			      .has_model = x->wt.has_model};
	x->hedged = 1;
	struct backend *be = pool_pick(x->pool, loop_now(w->loop), rand_next(&w->rng), &h);
	if (!be)
		return; /* no other backend free: keep waiting for the first */
	/* the slot of tries[] the current attempt does not use; a copy is no second retry */
	struct attempt *copy = &x->tries[cur == &x->tries[0] ? 1 : 0];
	*copy = (struct attempt){.retried = cur->retried};
	attempt_begin(copy, x->pool, be);
	if (attempt_connect(copy, w, x->conn, x->codec->wake) < 0) {
		attempt_end(copy, w, 0);
		return;
	}
	copy->up->grpc_web = x->grpc_web;
	x->hedge = copy;
	backend_count(cur->be, PM_BACKEND_HEDGED, 1);
}

void hedge_promote(struct exchange *x)
{
	struct worker *w = x->w;
	struct attempt *first = x->att;
	if (first->be->llm && x->wt.work) { /* the work counted was the first backend's */
		llm_unpicked(first->be->llm, x->wt.blocks, x->wt.nblocks, x->wt.missed,
			     x->wt.ticks);
		llm_done(first->be->llm, x->wt.work);
		x->wt.work = 0;
	}
	attempt_end(first, w, 0);
	x->att = x->hedge;
	x->hedge = NULL;
	backend_count(x->att->be, PM_BACKEND_HEDGE_WINS, 1);
}

/* An HTTP/2 copy's answer, pulled from its stream (up_h2_pull) into h->in as a socket's is
 * read there; its owner's event (the codec's wake) says when more came. */
static int copy_room(void *arg, char **p, size_t *len)
{
	struct upconn *h = arg;
	if (!h->in && !(h->in = buf_get(&h->w->bufs)))
		return -ENOMEM;
	if (!buf_room(h->in))
		return -ENOSPC; /* (promoted at its first byte: never) */
	*p = h->in->data + h->in->end;
	*len = buf_room(h->in);
	return 0;
}

static void copy_took(void *arg, ssize_t n)
{
	struct upconn *h = arg;
	if (n > 0)
		h->in->end += (uint32_t)n;
	else
		h->read_end = n ? (int)n : 1;
}

static const struct net_conn_read_ops copy_reads = {.alloc = copy_room, .read = copy_took};

/* The HTTP/2 copy's stream: 1 when its answer began (bytes in h->in), -1 when it failed. */
static int pull_stream(struct upconn *h)
{
	if (!h->conn.reading && !h->read_end)
		net_conn_read_start(&h->conn, &copy_reads, h);
	(void)up_h2_pull(h);
	if (h->in && buf_len(h->in)) {
		net_conn_read_stop(&h->conn); /* the upstream half reads it from now on */
		return 1;
	}
	return h->read_end ? -1 : 0;
}

int hedge_run(struct exchange *x)
{
	struct attempt *copy = x->hedge;
	struct upconn *h = copy->up;
	if (h->failed) {
		exchange_drop_hedge(x);
		return 0;
	}
	size_t head_len = forward_head_len(x, copy); /* with its credential line */
	if (!h->connecting && h->writable && copy->head_off < head_len) {
		struct iovec iov[3];
		int k = forward_head_iov(x, copy, iov);
		ssize_t n = h->h2s ? up_h2_writev(h, iov, k) : net_conn_writev(&h->conn, iov, k);
		if (n > 0)
			copy->head_off += (size_t)n;
		else if (n < 0 && n != -EAGAIN && n != -EINTR) {
			exchange_drop_hedge(x);
			return 0;
		}
		if (copy->head_off < head_len)
			h->writable = 0;
	}
	if (h->h2s && !h->connecting && copy->head_off == head_len) {
		int r = pull_stream(h);
		if (r < 0)
			exchange_drop_hedge(x);
		else if (r > 0)
			hedge_promote(x);
		return r > 0;
	}
	if (!h->h2s && !h->connecting && h->readable) {
		ssize_t n = worker_read(x->w, &h->conn, &h->in, &h->readable, h->hup);
		if (n == 0 || (n < 0 && n != -EAGAIN && n != -ENOSPC)) {
			exchange_drop_hedge(x);
			return 0;
		}
	}
	if (h->in && buf_len(h->in)) {
		hedge_promote(x);
		return 1;
	}
	return 0;
}
