/*
 * qdisc.c - the registry of queue disciplines, looked up by their config names, and the
 * names of the priority classes.
 */
#include "policy/qdisc.h"

#include <string.h>
#include <strings.h>

static const struct qdisc_ops *const disciplines[] = {&qdisc_fair, &qdisc_fifo};

const struct qdisc_ops *qdisc_find(const char *name)
{
	for (size_t i = 0; i < sizeof(disciplines) / sizeof(disciplines[0]); i++)
		if (strcmp(disciplines[i]->name, name) == 0)
			return disciplines[i];
	return NULL;
}

const char *qdisc_names(void)
{
	static char names[64];
	if (!names[0])
		for (size_t i = 0; i < sizeof(disciplines) / sizeof(disciplines[0]); i++) {
			if (i)
				strcat(names, ", ");
			strcat(names, disciplines[i]->name);
		}
	return names;
}

int qdisc_priority(const char *s, size_t len)
{
	static const char *const names[QD_PRIOS] = {"low", "normal", "high"};
	for (int i = 0; i < QD_PRIOS; i++)
		if (strlen(names[i]) == len && strncasecmp(names[i], s, len) == 0)
			return i;
	return -1;
}
