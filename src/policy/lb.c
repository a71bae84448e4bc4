/*
 * lb.c - the registry of balancing policies, looked up by their config names and walked
 * (lb_at) by the config layer for the keys each one declares; the names of the reasons a
 * policy's explain() gives.
 */
#include "policy/lb.h"

#include <stdlib.h>
#include <string.h>

static const struct lb_ops *const policies[] = {
    &lb_round_robin, &lb_weighted_round_robin, &lb_least_connections, &lb_p2c,
    &lb_peak_ewma,   &lb_consistent_hash,      &lb_prefix_affinity,   &lb_llm,
};

#define NPOLICIES (sizeof(policies) / sizeof(policies[0]))

const struct lb_ops *lb_find(const char *name)
{
	for (size_t i = 0; i < NPOLICIES; i++)
		if (strcmp(policies[i]->name, name) == 0)
			return policies[i];
	return NULL;
}

const struct lb_ops *lb_at(size_t i)
{
	return i < NPOLICIES ? policies[i] : NULL;
}

const char *lb_names(void)
{
	static char names[256];
	if (!names[0]) {
		for (size_t i = 0; i < NPOLICIES; i++) {
			if (i)
				strcat(names, ", ");
			strcat(names, policies[i]->name);
		}
	}
	return names;
}

const char *lb_why_name(unsigned why)
{
#define LB_WHY_TEXT(name, text) [LB_WHY_##name] = text,
	static const char *const names[LB_WHYS] = {LB_WHY_LIST(LB_WHY_TEXT)};
#undef LB_WHY_TEXT
	return why < LB_WHYS ? names[why] : "other";
}

void lb_state_free(struct lb_state *st)
{
	free(st->schedule);
	free(st->ring);
	st->schedule = NULL;
	st->nschedule = 0;
	st->ring = NULL;
	st->nring = 0;
}

size_t lb_draw_two(const struct lb_candidate *c, size_t n, uint64_t rnd, int *a, int *b)
{
	size_t eligible = 0;
	for (size_t i = 0; i < n; i++)
		eligible += c[i].eligible != 0;
	if (eligible == 0)
		return 0;
	/* the ka-th and kb-th eligible candidates, ka != kb */
	size_t ka = (size_t)(rnd % eligible), kb = ka;
	if (eligible > 1)
		kb = (ka + 1 + (size_t)((rnd >> 32) % (eligible - 1))) % eligible;
	for (size_t i = 0, k = 0; i < n; i++) {
		if (!c[i].eligible)
			continue;
		if (k == ka)
			*a = (int)i;
		if (k == kb)
			*b = (int)i;
		k++;
	}
	return eligible;
}
