/*
 * spill.h - spillover: when the primary pool cannot take a request soon enough (its queue
 * is full, none of its backends is up or answers, or the request has waited
 * spillover.after_ms), the request moves, once, to the route's spillover pool. It keeps its
 * tenant and class; an affinity key is not carried over (the other pool hashes its own
 * way, and its request head is gone).
 */
#ifndef ACCELNET_PROXY_SPILL_H
#define ACCELNET_PROXY_SPILL_H

#include "proxy/exchange.h"

/* Has <x>'s route a spillover pool it has not used yet? */
static inline int spill_possible(const struct exchange *x)
{
	return x->route->has_spill && !x->spilled;
}

/* Move <x> to its spillover pool, out of the primary pool's queue; it is admitted afresh. */
void spill_move(struct exchange *x);

#endif
