/*
 * lb.c - the registry of balancing policies, looked up by their config names.
 */
#include "lb/lb.h"

#include <stdlib.h>
#include <string.h>

static const struct lb_ops *const policies[] = {
	&lb_round_robin,
	&lb_weighted_round_robin,
	&lb_least_connections,
	&lb_p2c,
};

#define NPOLICIES (sizeof(policies) / sizeof(policies[0]))

const struct lb_ops *lb_find(const char *name)
{
	for (size_t i = 0; i < NPOLICIES; i++)
		if (strcmp(policies[i]->name, name) == 0)
			return policies[i];
	return NULL;
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

void lb_state_free(struct lb_state *st)
{
	free(st->schedule);
	st->schedule = NULL;
	st->nschedule = 0;
}
