/*
 * attempt.c - an attempt's bookkeeping: its slot taken and given back once, its connection
 * taken, kept alive or closed (see attempt.h).
 */
#include "proxy/attempt.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/rand.h"
#include "proxy/admission.h"
#include "proxy/up_h2.h"
#include "runtime/proxy_metric.h"

void attempt_begin(struct attempt *a, struct pool_rt *pool, struct backend *be)
{
	ASSERT(!a->be && !a->up); /* what it held was let go: a slot is never lost */
	a->pool = pool;
	a->be = be;
	a->up = NULL;
	a->local_wait = 0;
	a->up_reused = 0;
	a->reusable = 0;
	a->slot_freed = 0;
	a->resp_whole = 0;
	a->head_off = 0;
	a->ttft_blocks = 0;
	a->first_ns = 0;
}

int attempt_connect(struct attempt *a, struct worker *w, void *owner, void (*on_event)(void *owner))
{
	int err = 0;
	a->up = a->be->conf->protocol != CONF_PROTO_HTTP1 ? up_h2_get(w, a->be, &err)
							  : upconn_get(w, a->be, &err);
	if (!a->up)
		return err;
	upconn_own(a->up, owner, on_event);
	a->local_wait = 0;
	a->up_reused = a->up->served > 0;
	a->head_off = 0;
	a->connect_ms = loop_now(w->loop);
	a->sent_ns = clock_now_ns();
	return 0;
}

void attempt_free_slot(struct attempt *a, struct worker *w)
{
	if (!a->be || a->slot_freed)
		return;
	admission_release(a->pool, a->be, loop_now(w->loop), rand_next(&w->rng));
	a->slot_freed = 1;
}

void attempt_count_response(const struct attempt *a, int status)
{
	unsigned cls = status >= 100 && status < 600 ? (unsigned)status / 100 : 0;
	if (a->be)
		backend_count_response(a->be, (int)cls);
}

void attempt_end(struct attempt *a, struct worker *w, int reuse)
{
	struct upconn *up = a->up;
	a->up = NULL;
	if (up && up->h2s)
		up_h2_put(up); /* a stream of an HTTP/2 connection */
	else if (up && reuse && (!up->in || !buf_len(up->in)))
		upconn_release(up);
	else if (up)
		upconn_close(up);
	attempt_free_slot(a, w);
	a->be = NULL;
	a->slot_freed = 0;
	a->reusable = 0;
}
