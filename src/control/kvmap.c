/*
 * kvmap.c - engine block hash -> own block hash (see kvmap.h).
 *
 * The engine picks the keys, so neither a key nor how often the map is cleared may decide
 * the work: a slot's home is taken from the top bits of a keyed mix of the whole key (a
 * multiplication's middle bits depend on the key's low bits alone: keys that differ only
 * above them, i << 40 say, all shared one probe run, and each put walked all of it), and a
 * clear is a new generation (a slot is used only when its generation is the map's), O(1)
 * however many slots: an engine's AllBlocksCleared, a gap or a malformed message clears it,
 * and an engine decides how often those come.
 */
#include "control/kvmap.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

struct kvmap_slot {
	uint64_t engine, own;
	uint32_t gen; /* used when it is the map's gen (never 0) */
};

struct kvmap {
	struct kvmap_slot *slot;
	size_t mask, capacity, count;
	unsigned shift; /* 64 - log2(slots) */
	uint32_t gen;
	uint64_t key; /* the mix's secret: where a hash lands is not the engine's to choose */
};

int kvmap_new(size_t capacity, struct kvmap **out)
{
	struct kvmap *m = calloc(1, sizeof(*m));
	size_t n = 16;
	unsigned bits = 4;
	if (!m || !capacity)
		goto fail;
	while (n < 2 * capacity) {
		n <<= 1;
		bits++;
	}
	if (!(m->slot = calloc(n, sizeof(*m->slot))))
		goto fail;
	m->mask = n - 1;
	m->shift = 64 - bits;
	m->capacity = capacity;
	m->gen = 1;
	if (getrandom(&m->key, sizeof(m->key), GRND_NONBLOCK) != sizeof(m->key))
		m->key = (uint64_t)(uintptr_t)m->slot ^ (uint64_t)time(NULL) << 20;
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

static int used(const struct kvmap *m, size_t i)
{
	return m->slot[i].gen == m->gen;
}

/* A keyed mix of every bit of <h> (splitmix64's finaliser over h + key); the top bits. */
static size_t home(const struct kvmap *m, uint64_t h)
{
	uint64_t x = h + m->key;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (size_t)(x >> m->shift) & m->mask;
}

/* The slot holding <engine>, or the empty one where it would go. */
static size_t find(const struct kvmap *m, uint64_t engine)
{
	size_t i = home(m, engine);
	while (used(m, i) && m->slot[i].engine != engine)
		i = (i + 1) & m->mask;
	return i;
}

int kvmap_put(struct kvmap *m, uint64_t engine, uint64_t own)
{
	size_t i = find(m, engine);
	if (!used(m, i)) {
		if (m->count >= m->capacity)
			return -ENOSPC;
		m->count++;
	}
	m->slot[i] = (struct kvmap_slot){engine, own, m->gen};
	return 0;
}

int kvmap_get(const struct kvmap *m, uint64_t engine, uint64_t *own)
{
	size_t i = find(m, engine);
	if (!used(m, i))
		return 0;
	*own = m->slot[i].own;
	return 1;
}

int kvmap_take(struct kvmap *m, uint64_t engine, uint64_t *own)
{
	size_t i = find(m, engine);
	if (!used(m, i))
		return 0;
	*own = m->slot[i].own;
	/* empty slot i and pull later members of its probe run back over the hole */
	for (size_t j = i;;) {
		j = (j + 1) & m->mask;
		if (!used(m, j))
			break;
		size_t k = home(m, m->slot[j].engine);
		int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		m->slot[i] = m->slot[j];
		i = j;
	}
	m->slot[i].gen = 0;
	m->count--;
	return 1;
}

void kvmap_clear(struct kvmap *m)
{
	m->count = 0;
	if (++m->gen)
		return;
	/* (after 2^32 - 1 clears: every slot swept once, and the count starts again) */
	for (size_t i = 0; i <= m->mask; i++)
		m->slot[i].gen = 0;
	m->gen = 1;
}

size_t kvmap_count(const struct kvmap *m)
{
	return m->count;
}

size_t kvmap_longest_probe(const struct kvmap *m)
{
	size_t most = 0;
	for (size_t i = 0; i <= m->mask; i++)
		if (used(m, i)) {
			size_t d = (i - home(m, m->slot[i].engine)) & m->mask;
			most = d > most ? d : most;
		}
	return most;
}
