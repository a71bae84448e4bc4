/*
 * spill.c - moving a request to its route's spillover pool (see spill.h).
 */
#include "proxy/spill.h"
#include "core/rand.h"
#include "proxy/admission.h"
#include "runtime/proxy_metric.h"

void spill_move(struct exchange *x)
{
	struct worker *w = x->w;
	if (x->wt.state != W_IDLE)
		admission_withdraw(x->pool, &x->wt, loop_now(w->loop), rand_next(&w->rng),
				   WITHDRAW_SPILL);
	x->spilled = 1;
	x->att->retried = 0; /* the other pool is admitted afresh */
	x->pool = &w->rt->pools[x->route->spill_pool];
	x->wt.has_key = 0;
	pool_count(x->pool, PM_POOL_SPILLED_IN, 1);
}
