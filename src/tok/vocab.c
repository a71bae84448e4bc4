/*
 * vocab.c - the vocabulary and merge tables of a BPE model (vocab.h). Both are open-addressing
 * tables at most half full, sized once by vocab_init() from the counts the file declares; the
 * token bytes live in one arena. Nothing here is written after load.
 */
#include "tok/vocab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static size_t pow2_above(size_t n)
{
	size_t s = 16;
	while (s < 2 * n)
		s <<= 1;
	return s;
}

int vocab_init(struct vocab *v, uint32_t nids, size_t bytes, size_t nmerges)
{
	memset(v, 0, sizeof(*v));
	for (int i = 0; i < 256; i++)
		v->byte_id[i] = -1;
	size_t ts = pow2_above(nids), ms = pow2_above(nmerges);
	v->slots = calloc(ts, sizeof(*v->slots));
	v->off = calloc(nids ? nids : 1, sizeof(*v->off));
	v->len = calloc(nids ? nids : 1, sizeof(*v->len));
	v->arena = malloc(bytes ? bytes : 1);
	v->mkey = calloc(ms, sizeof(*v->mkey));
	v->mrank = calloc(ms, sizeof(*v->mrank));
	v->mid = calloc(ms, sizeof(*v->mid));
	if (!v->slots || !v->off || !v->len || !v->arena || !v->mkey || !v->mrank || !v->mid)
		return -ENOMEM;
	for (uint32_t i = 0; i < nids; i++)
		v->len[i] = UINT32_MAX; /* not named */
	v->mask = ts - 1;
	v->mmask = ms - 1;
	v->nids = nids;
	v->arena_cap = bytes;
	return 0;
}

void vocab_free(struct vocab *v)
{
	free(v->slots);
	free(v->off);
	free(v->len);
	free(v->arena);
	free(v->mkey);
	free(v->mrank);
	free(v->mid);
	memset(v, 0, sizeof(*v));
}

int64_t vocab_find(const struct vocab *v, const uint8_t *s, size_t n)
{
	if (n == 1)
		return v->byte_id[s[0]];
	for (size_t i = (size_t)XXH3_64bits(s, n) & v->mask;; i = (i + 1) & v->mask) {
		uint32_t e = v->slots[i];
		if (!e)
			return -1;
		if (v->len[e - 1] == n && !memcmp(v->arena + v->off[e - 1], s, n))
			return e - 1;
	}
}

int vocab_add(struct vocab *v, const uint8_t *s, size_t n, uint32_t id)
{
	if (id >= v->nids || v->len[id] != UINT32_MAX || vocab_find(v, s, n) >= 0)
		return -EEXIST;
	if (n > v->arena_cap - v->arena_len)
		return -ENOMEM;
	memcpy(v->arena + v->arena_len, s, n);
	v->off[id] = (uint32_t)v->arena_len;
	v->len[id] = (uint32_t)n;
	v->arena_len += n;
	size_t i = (size_t)XXH3_64bits(s, n) & v->mask;
	while (v->slots[i])
		i = (i + 1) & v->mask;
	v->slots[i] = id + 1;
	if (n == 1)
		v->byte_id[s[0]] = (int32_t)id;
	return 0;
}

int vocab_add_merge(struct vocab *v, uint32_t a, uint32_t b, uint32_t rank, uint32_t id)
{
	uint64_t key = ((uint64_t)a << 32 | b) + 1;
	uint64_t h = key * 0x9e3779b97f4a7c15ull;
	size_t i = (size_t)(h >> 20) & v->mmask;
	while (v->mkey[i] && v->mkey[i] != key)
		i = (i + 1) & v->mmask;
	v->mkey[i] = key;
	v->mrank[i] = rank;
	v->mid[i] = id;
	return 0;
}
