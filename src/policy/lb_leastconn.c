/*
 * lb_leastconn.c - least connections: the eligible backend with the fewest requests in
 * flight per unit of weight. Ties are broken by the ticket, so an idle pool is still used
 * in turn rather than always starting with the first backend.
 */
#include "policy/lb.h"

static int lc_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		   const struct lb_draw *d)
{
	int best = -1;
	(void)st;
	for (size_t i = 0; i < n; i++) {
		size_t idx = (size_t)((d->ticket + i) % n);
		if (!c[idx].eligible)
			continue;
		if (best < 0 || lb_less_loaded(&c[idx], &c[best]))
			best = (int)idx;
	}
	return best;
}

const struct lb_ops lb_least_connections = {
    .name = "least-connections",
    .pick = lc_pick,
};
