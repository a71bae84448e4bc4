/*
 * kvmap.c - engine block hash -> own block hash (see kvmap.h).
 */
#include "control/kvmap.h"

#include <errno.h>
#include <stdlib.h>

struct kvmap_slot {
	uint64_t engine, own;
	int used;
};

struct kvmap {
	struct kvmap_slot *slot;
	size_t mask, capacity, count;
};

int kvmap_new(size_t capacity, struct kvmap **out)
{
	struct kvmap *m = calloc(1, sizeof(*m));
	size_t n = 16;
	if (!m || !capacity)
		goto fail;
	while (n < 2 * capacity)
		n <<= 1;
	if (!(m->slot = calloc(n, sizeof(*m->slot))))
		goto fail;
	m->mask = n - 1;
	m->capacity = capacity;
	*out = m;
	return 0;
fail:
	free(m);
	return -ENOMEM;
}

void kvmap_free(struct kvmap *m)
{
	if (!m)
		return;
	free(m->slot);
	free(m);
}

static size_t home(const struct kvmap *m, uint64_t h)
{
	return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 20) & m->mask;
}

/* The slot holding <engine>, or the empty one where it would go. */
static size_t find(const struct kvmap *m, uint64_t engine)
{
	size_t i = home(m, engine);
	while (m->slot[i].used && m->slot[i].engine != engine)
		i = (i + 1) & m->mask;
	return i;
}

int kvmap_put(struct kvmap *m, uint64_t engine, uint64_t own)
{
	size_t i = find(m, engine);
	if (!m->slot[i].used) {
		if (m->count >= m->capacity)
			return -ENOSPC;
		m->count++;
	}
	m->slot[i] = (struct kvmap_slot){engine, own, 1};
	return 0;
}

int kvmap_get(const struct kvmap *m, uint64_t engine, uint64_t *own)
{
	size_t i = find(m, engine);
	if (!m->slot[i].used)
		return 0;
	*own = m->slot[i].own;
	return 1;
}

int kvmap_take(struct kvmap *m, uint64_t engine, uint64_t *own)
{
	size_t i = find(m, engine);
	if (!m->slot[i].used)
		return 0;
	*own = m->slot[i].own;
	/* empty slot i and pull later members of its probe run back over the hole */
	for (size_t j = i;;) {
		j = (j + 1) & m->mask;
		if (!m->slot[j].used)
			break;
		size_t k = home(m, m->slot[j].engine);
		int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		m->slot[i] = m->slot[j];
		i = j;
	}
	m->slot[i].used = 0;
	m->count--;
	return 1;
}

void kvmap_clear(struct kvmap *m)
{
	for (size_t i = 0; i <= m->mask; i++)
		m->slot[i].used = 0;
	m->count = 0;
}

size_t kvmap_count(const struct kvmap *m)
{
	return m->count;
}
