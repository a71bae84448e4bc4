/*
 * models.c - the per-pool model set (see models.h).
 *
 * Names are known by their XXH3 hash: two names sharing a 64-bit hash would be served by
 * each other's backends, a chance of about n^2 / 2^65 for n names, which we accept for a
 * lookup with no string compares and no memory per request.
 */
#include "policy/models.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

uint64_t models_hash(const char *s, size_t n)
{
	return XXH3_64bits(s, n);
}

static int cmp_entry(const void *a, const void *b)
{
	uint64_t x = ((const struct model_entry *)a)->hash,
		 y = ((const struct model_entry *)b)->hash;
	return x < y ? -1 : x > y;
}

static const struct model_entry *find(const struct model_set *s, uint64_t h)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->e[mid].hash < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->n && s->e[lo].hash == h ? &s->e[lo] : NULL;
}

int models_build(struct model_set *s, char *const *const *names, const size_t *counts,
		 size_t nbackends)
{
	size_t total = 0;
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < nbackends; i++) {
		total += counts[i];
		if (!counts[i])
			s->any[i / 64] |= 1ull << (i % 64);
	}
	if (!total)
		return 0;
	struct model_entry *e = calloc(total, sizeof(*e));
	if (!e)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < nbackends; i++)
		for (size_t k = 0; k < counts[i]; k++) {
			e[n].hash = models_hash(names[i][k], strlen(names[i][k]));
			e[n++].mask[i / 64] |= 1ull << (i % 64);
		}
	qsort(e, n, sizeof(*e), cmp_entry);
	size_t u = 0; /* merge the backends of equal names */
	for (size_t i = 0; i < n; i++) {
		if (u && e[u - 1].hash == e[i].hash) {
			for (size_t w = 0; w < MODELS_MASK_WORDS; w++)
				e[u - 1].mask[w] |= e[i].mask[w];
			continue;
		}
		e[u++] = e[i];
	}
	s->e = e;
	s->n = u;
	return 0;
}

void models_free(struct model_set *s)
{
	free(s->e);
	s->e = NULL;
	s->n = 0;
}

const uint64_t *models_mask(const struct model_set *s, uint64_t h)
{
	if (!s->e)
		return NULL;
	const struct model_entry *e = find(s, h);
	return e ? e->mask : s->any;
}

int models_served(const struct model_set *s, uint64_t h)
{
	const uint64_t *m = models_mask(s, h);
	if (!m)
		return 1;
	for (size_t w = 0; w < MODELS_MASK_WORDS; w++)
		if (m[w])
			return 1;
	return 0;
}
