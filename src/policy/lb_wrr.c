/*
 * lb_wrr.c - smooth weighted round robin.
 *
 * The smooth algorithm (each backend gains its weight, the richest is chosen and pays the
 * total) interleaves backends instead of sending bursts: weights 5,1,1 give a a b a c a a,
 * not a a a a a b c. Its sequence is periodic with period sum(weights)/gcd, so prepare()
 * runs it once and pick() only indexes the schedule with the shared ticket: lock-free, and
 * exact across worker threads. An ineligible backend passes its slot to the next entry.
 */
#include "policy/lb.h"

#include <errno.h>
#include <stdlib.h>

#define WRR_MAX_SCHEDULE (1u << 20)

static unsigned gcd(unsigned a, unsigned b)
{
	while (b) {
		unsigned t = a % b;
		a = b;
		b = t;
	}
	return a;
}

static int wrr_prepare(struct lb_state *st, const unsigned *weights, const char *const *names,
		       size_t n)
{
	(void)names;
	unsigned g = 0;
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		g = gcd(g, weights[i]);
	for (size_t i = 0; i < n; i++)
		total += weights[i] / g;
	if (total == 0 || total > WRR_MAX_SCHEDULE)
		return -EINVAL;

	long *current = calloc(n, sizeof(*current));
	uint32_t *schedule = malloc(total * sizeof(*schedule));
	if (!current || !schedule) {
		free(current);
		free(schedule);
		return -ENOMEM;
	}
	for (uint64_t k = 0; k < total; k++) {
		size_t best = 0;
		for (size_t i = 0; i < n; i++) {
			current[i] += weights[i] / g;
			if (current[i] > current[best])
				best = i;
		}
		current[best] -= (long)total;
		schedule[k] = (uint32_t)best;
	}
	free(current);
	st->schedule = schedule;
	st->nschedule = (uint32_t)total;
	return 0;
}

static int wrr_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		    const struct lb_draw *d)
{
	(void)n;
	for (uint32_t i = 0; i < st->nschedule; i++) {
		uint32_t idx = st->schedule[(d->ticket + i) % st->nschedule];
		if (c[idx].eligible)
			return (int)idx;
	}
	return LB_NONE;
}

const struct lb_ops lb_weighted_round_robin = {
    .name = "weighted-round-robin",
    .prepare = wrr_prepare,
    .pick = wrr_pick,
};
