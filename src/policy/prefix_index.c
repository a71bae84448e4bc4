/*
 * prefix_index.c - a per-backend estimate of the blocks in its KV cache (see prefix_index.h).
 */
#include "policy/prefix_index.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define WAYS 4

struct pix_set {
	_Atomic uint64_t key[WAYS]; /* 0: empty (a hash of 0 is stored as 1) */
	_Atomic uint64_t stamp[WAYS];
} __attribute__((aligned(64)));

struct prefix_index {
	struct pix_set *set;
	uint64_t mask; /* sets - 1 */
	uint64_t capacity;
	_Atomic uint64_t taken; /* blocks taken in so far: the stamps' clock */
};

int prefix_index_new(size_t capacity, struct prefix_index **out)
{
	struct prefix_index *ix = calloc(1, sizeof(*ix));
	if (!ix || !capacity)
		goto fail;
	uint64_t sets = 1;
	while (sets * WAYS < 2 * (uint64_t)capacity)
		sets <<= 1;
	ix->set = aligned_alloc(64, sets * sizeof(struct pix_set));
	if (!ix->set)
		goto fail;
	memset(ix->set, 0, sets * sizeof(struct pix_set));
	ix->mask = sets - 1;
	ix->capacity = capacity;
	*out = ix;
	return 0;
fail:
	free(ix);
	return -ENOMEM;
}

void prefix_index_free(struct prefix_index *ix)
{
	if (!ix)
		return;
	free(ix->set);
	free(ix);
}

int prefix_index_copy(struct prefix_index *to, const struct prefix_index *from)
{
	if (to->capacity != from->capacity || to->mask != from->mask)
		return -EINVAL;
	for (uint64_t i = 0; i <= from->mask; i++)
		for (int w = 0; w < WAYS; w++) {
			atomic_store_explicit(
			    &to->set[i].key[w],
			    atomic_load_explicit(&from->set[i].key[w], memory_order_relaxed),
			    memory_order_relaxed);
			atomic_store_explicit(
			    &to->set[i].stamp[w],
			    atomic_load_explicit(&from->set[i].stamp[w], memory_order_relaxed),
			    memory_order_relaxed);
		}
	atomic_store_explicit(&to->taken, atomic_load_explicit(&from->taken, memory_order_relaxed),
			      memory_order_relaxed);
	return 0;
}

static uint64_t key_of(uint64_t h)
{
	return h ? h : 1;
}

/* The set of <key>: its low bits (the hash is XXH3 already). */
static struct pix_set *set_of(const struct prefix_index *ix, uint64_t key)
{
	return &ix->set[(key ^ (key >> 32)) & ix->mask];
}

/* The way holding <key> in <s>, or -1. */
static int way_of(struct pix_set *s, uint64_t key)
{
	for (int w = 0; w < WAYS; w++)
		if (atomic_load_explicit(&s->key[w], memory_order_relaxed) == key)
			return w;
	return -1;
}

/* Is block <h> held: known, and fewer than <capacity> blocks taken in since it was used? */
static int held(const struct prefix_index *ix, uint64_t h, uint64_t now)
{
	uint64_t key = key_of(h);
	struct pix_set *s = set_of(ix, key);
	int w = way_of(s, key);
	if (w < 0)
		return 0;
	uint64_t at = atomic_load_explicit(&s->stamp[w], memory_order_relaxed);
	return now < at || now - at < ix->capacity;
}

int prefix_index_holds(const struct prefix_index *ix, uint64_t h)
{
	return held(ix, h, atomic_load_explicit(&ix->taken, memory_order_relaxed));
}

size_t prefix_index_match(const struct prefix_index *ix, const uint64_t *hash, size_t n)
{
	uint64_t now = atomic_load_explicit(&ix->taken, memory_order_relaxed);
	if (!n || !held(ix, hash[0], now))
		return 0; /* the common answer for all but the prompt's home: one probe */
	/* chain hashes: holding block i means (almost always) holding every block before it,
	 * so the longest prefix is found by bisection */
	size_t lo = 1, hi = n; /* blocks [0, lo) held; [hi, n) not known to be */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (held(ix, hash[mid], now))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint64_t prefix_index_insert(struct prefix_index *ix, const uint64_t *hash, size_t n)
{
	uint64_t now = atomic_load_explicit(&ix->taken, memory_order_relaxed), fresh = 0;
	uint64_t moved = 0; /* the ages of the blocks refreshed: a tick per <capacity> of them */
	for (size_t i = 0; i < n; i++) {
		uint64_t key = key_of(hash[i]);
		struct pix_set *s = set_of(ix, key);
		int w = way_of(s, key);
		uint64_t at = w < 0 ? 0 : atomic_load_explicit(&s->stamp[w], memory_order_relaxed);
		if (w < 0 || (now >= at && now - at >= ix->capacity))
			fresh++; /* new to the cache (or back after the engine dropped it) */
		else if (now > at)
			moved += now - at; /* refreshed: past the blocks younger than it (essay) */
		if (w < 0) {		   /* an empty way, else the oldest */
			uint64_t oldest = UINT64_MAX;
			for (int v = 0; v < WAYS; v++) {
				uint64_t k = atomic_load_explicit(&s->key[v], memory_order_relaxed);
				uint64_t used =
				    atomic_load_explicit(&s->stamp[v], memory_order_relaxed);
				if (!k) {
					w = v;
					break;
				}
				if (used < oldest) {
					oldest = used;
					w = v;
				}
			}
			atomic_store_explicit(&s->key[w], key, memory_order_relaxed);
		}
		atomic_store_explicit(&s->stamp[w], now + fresh + moved / ix->capacity,
				      memory_order_relaxed);
	}
	uint64_t ticks = fresh + (moved + ix->capacity / 2) / ix->capacity;
	if (ticks)
		atomic_fetch_add_explicit(&ix->taken, ticks, memory_order_relaxed);
	return ticks;
}

void prefix_index_remove(struct prefix_index *ix, const uint64_t *hash, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t key = key_of(hash[i]);
		struct pix_set *s = set_of(ix, key);
		int w = way_of(s, key);
		if (w >= 0)
			atomic_store_explicit(&s->key[w], 0, memory_order_relaxed);
	}
}

void prefix_index_take_back(struct prefix_index *ix, const uint64_t *hash, size_t n, uint64_t ticks)
{
	prefix_index_remove(ix, hash, n);
	uint64_t now = atomic_load_explicit(&ix->taken, memory_order_relaxed);
	while (ticks && !atomic_compare_exchange_weak_explicit(
			    &ix->taken, &now, now > ticks ? now - ticks : 0, memory_order_relaxed,
			    memory_order_relaxed))
		;
}

/* O(1): a clock <capacity> ahead makes every block taken in so far too old to be held (a
 * peer drives how often this runs: an engine's AllBlocksCleared events, its malformed
 * messages). The ways are swept only when the clock nears its end, and it starts again. */
void prefix_index_clear(struct prefix_index *ix)
{
	uint64_t now = atomic_load_explicit(&ix->taken, memory_order_relaxed);
	if (now < UINT64_MAX / 4) {
		atomic_store_explicit(&ix->taken, now + ix->capacity, memory_order_relaxed);
		return;
	}
	for (uint64_t i = 0; i <= ix->mask; i++)
		for (int w = 0; w < WAYS; w++)
			atomic_store_explicit(&ix->set[i].key[w], 0, memory_order_relaxed);
	atomic_store_explicit(&ix->taken, 0, memory_order_relaxed);
}

size_t prefix_index_capacity(const struct prefix_index *ix)
{
	return (size_t)ix->capacity;
}

size_t prefix_index_count(const struct prefix_index *ix)
{
	uint64_t now = atomic_load_explicit(&ix->taken, memory_order_relaxed);
	size_t held_now = 0;
	for (uint64_t i = 0; i <= ix->mask; i++)
		for (int w = 0; w < WAYS; w++) {
			uint64_t k = atomic_load_explicit(&ix->set[i].key[w], memory_order_relaxed);
			uint64_t at =
			    atomic_load_explicit(&ix->set[i].stamp[w], memory_order_relaxed);
			held_now += k && (now < at || now - at < ix->capacity);
		}
	return held_now;
}
