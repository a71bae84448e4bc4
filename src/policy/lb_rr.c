/*
 * lb_rr.c - round robin: the ticket names the backend; a backend that is not eligible
 * passes its turn to the next one.
 */
#include "policy/lb.h"

static int rr_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		   const struct lb_draw *d)
{
	(void)st;
	for (size_t i = 0; i < n; i++) {
		size_t idx = (size_t)((d->ticket + i) % n);
		if (c[idx].eligible)
			return (int)idx;
	}
	return LB_NONE;
}

const struct lb_ops lb_round_robin = {
    .name = "round-robin",
    .pick = rr_pick,
};
