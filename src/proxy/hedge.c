/*
 * hedge.c - a second copy of a slow idempotent request (see hedge.h).
 */
#include "proxy/hedge.h"
#include "runtime/llm.h"
#include "core/clock.h"
#include "core/rand.h"
#include "proxy/admission.h"
#include "runtime/pick.h"
#include "runtime/proxy_metric.h"

#include <errno.h>

int hedge_due(const struct exchange *x, uint64_t *when)
{
	unsigned after = x->pool ? x->pool->conf->hedge_after_ms : 0; /* none before the route */
	if (!after || x->hedged || x->resp_head || !x->up || x->req.framing != HTTP_BODY_NONE ||
	    !http_method_idempotent(x->meth) || !x->uphead)
		return 0;
	*when = x->connect_ms + after;
	return 1;
}

void hedge_start(struct exchange *x)
{
	struct worker *w = x->w;
	struct pick_hint h = {.exclude = x->be,
			      .key = x->wt.key,
			      .has_key = x->wt.has_key,
			      .model = x->wt.model,
			      .has_model = x->wt.has_model};
	int err = 0;
	x->hedged = 1;
	struct backend *be = pool_pick(x->pool, loop_now(w->loop), rand_next(&w->rng), &h);
	if (!be)
		return; /* no other backend free: keep waiting for the first */
	struct upconn *up = upconn_get(w, be, &err);
	if (!up) {
		admission_release(x->pool, be, loop_now(w->loop), rand_next(&w->rng));
		return;
	}
	upconn_own(up, x, exchange_on_upstream);
	x->hedge = up;
	x->hedge_be = be;
	x->hedge_off = 0;
	x->hedge_sent_ns = clock_now_ns();
	backend_count(x->be, PM_BACKEND_HEDGED, 1);
}

void hedge_promote(struct exchange *x)
{
	struct worker *w = x->w;
	if (x->up)
		upconn_close(x->up);
	if (x->be->llm && x->wt.work) { /* the work counted was the first backend's */
		llm_done(x->be->llm, x->wt.work);
		x->wt.work = 0;
	}
	admission_release(x->pool, x->be, loop_now(w->loop), rand_next(&w->rng));
	x->up = x->hedge;
	x->be = x->hedge_be;
	x->sent_ns = x->hedge_sent_ns;
	x->up_reused = x->up->served > 0;
	x->uphead_off = x->hedge_off;
	x->hedge = NULL;
	x->hedge_be = NULL;
	backend_count(x->be, PM_BACKEND_HEDGE_WINS, 1);
}

int hedge_run(struct exchange *x)
{
	struct upconn *h = x->hedge;
	if (h->failed) {
		exchange_drop_hedge(x);
		return 0;
	}
	if (!h->connecting && h->writable && x->hedge_off < x->uphead->end) {
		ssize_t n = net_conn_write(&h->conn, x->uphead->data + x->hedge_off,
					   x->uphead->end - x->hedge_off);
		if (n > 0)
			x->hedge_off += (size_t)n;
		else if (n < 0 && n != -EAGAIN && n != -EINTR) {
			exchange_drop_hedge(x);
			return 0;
		}
		if (x->hedge_off < x->uphead->end)
			h->writable = 0;
	}
	if (!h->connecting && h->readable) {
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
