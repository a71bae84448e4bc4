/*
 * lb_p2c.c - power of two choices: two distinct eligible backends drawn at random, the less
 * loaded (per unit of weight) wins. It avoids both herding on one "least loaded" backend
 * from stale counts and scanning every backend, and is Envoy's LEAST_REQUEST default.
 */
#include "lb/lb.h"

static int p2c_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		    uint64_t ticket, uint64_t rnd)
{
	size_t eligible = 0;
	(void)st;
	(void)ticket;
	for (size_t i = 0; i < n; i++)
		eligible += c[i].eligible != 0;
	if (eligible == 0)
		return -1;

	/* the a-th and b-th eligible backends, a != b */
	size_t a = (size_t)(rnd % eligible), b = a;
	if (eligible > 1)
		b = (a + 1 + (size_t)((rnd >> 32) % (eligible - 1))) % eligible;
	int ia = -1, ib = -1;
	for (size_t i = 0, k = 0; i < n; i++) {
		if (!c[i].eligible)
			continue;
		if (k == a)
			ia = (int)i;
		if (k == b)
			ib = (int)i;
		k++;
	}
	return lb_less_loaded(&c[ib], &c[ia]) ? ib : ia;
}

const struct lb_ops lb_p2c = {
	.name = "p2c",
	.pick = p2c_pick,
};
