/*
 * lb_p2c.c - power of two choices: two distinct eligible backends drawn at random, the less
 * loaded (per unit of weight) wins. It avoids both herding on one "least loaded" backend
 * from stale counts and scanning every backend, and is Envoy's LEAST_REQUEST default.
 */
#include "policy/lb.h"

static int p2c_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		    const struct lb_draw *d)
{
	int a, b;
	(void)st;
	if (!lb_draw_two(c, n, d->rnd, &a, &b))
		return LB_NONE;
	return lb_less_loaded(&c[b], &c[a]) ? b : a;
}

const struct lb_ops lb_p2c = {
    .name = "p2c",
    .pick = p2c_pick,
};
