/*
 * lb_rr.c - round robin over the eligible backends: the ticket, modulo how many are eligible
 * now, names which of them. A backend that is not eligible leaves its turns to all the others
 * alike, not to the one after it (a pool with unused discovery slots, or one backend down,
 * stays even).
 */
#include "policy/lb.h"

static int rr_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		   const struct lb_draw *d)
{
	(void)st;
	size_t eligible = 0;
	for (size_t i = 0; i < n; i++)
		eligible += c[i].eligible != 0;
	if (!eligible)
		return LB_NONE;
	size_t k = (size_t)(d->ticket % eligible);
	for (size_t i = 0; i < n; i++)
		if (c[i].eligible && k-- == 0)
			return (int)i;
	return LB_NONE;
}

const struct lb_ops lb_round_robin = {
    .name = "round-robin",
    .pick = rr_pick,
};
