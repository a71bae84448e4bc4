/*
 * prefix_pending.c - blocks sent to a backend, not yet confirmed by its engine (see
 * prefix_pending.h).
 */
#include "policy/prefix_pending.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define WAYS 4

struct ppend_set {
	_Atomic uint64_t key[WAYS];  /* 0: empty (a hash of 0 is stored as 1) */
	_Atomic uint64_t sent[WAYS]; /* the ms it was sent */
} __attribute__((aligned(64)));

struct prefix_pending {
	struct ppend_set *set;
	uint64_t mask; /* sets - 1 */
	uint32_t ttl_ms;
	_Atomic uint64_t cleared_ms; /* entries sent at or before it are void */
};

int prefix_pending_new(size_t entries, uint32_t ttl_ms, struct prefix_pending **out)
{
	struct prefix_pending *p = calloc(1, sizeof(*p));
	if (!p || !entries || !ttl_ms)
		goto fail;
	uint64_t sets = 1;
	while (sets * WAYS < (uint64_t)entries)
		sets <<= 1;
	p->set = aligned_alloc(64, sets * sizeof(struct ppend_set));
	if (!p->set)
		goto fail;
	memset(p->set, 0, sets * sizeof(struct ppend_set));
	p->mask = sets - 1;
	p->ttl_ms = ttl_ms;
	*out = p;
	return 0;
fail:
	free(p);
	return -ENOMEM;
}

void prefix_pending_free(struct prefix_pending *p)
{
	if (!p)
		return;
	free(p->set);
	free(p);
}

static uint64_t key_of(uint64_t h)
{
	return h ? h : 1;
}

static struct ppend_set *set_of(const struct prefix_pending *p, uint64_t key)
{
	return &p->set[(key ^ (key >> 32)) & p->mask];
}

static int way_of(struct ppend_set *s, uint64_t key)
{
	for (int w = 0; w < WAYS; w++)
		if (atomic_load_explicit(&s->key[w], memory_order_relaxed) == key)
			return w;
	return -1;
}

/* Is an entry sent at <sent> still pending at <now>? */
static int live(const struct prefix_pending *p, uint64_t sent, uint64_t now)
{
	return sent > atomic_load_explicit(&p->cleared_ms, memory_order_relaxed) &&
	       (now < sent || now - sent < p->ttl_ms);
}

static int pending(const struct prefix_pending *p, uint64_t h, uint64_t now)
{
	uint64_t key = key_of(h);
	struct ppend_set *s = set_of(p, key);
	int w = way_of(s, key);
	return w >= 0 && live(p, atomic_load_explicit(&s->sent[w], memory_order_relaxed), now);
}

void prefix_pending_add(struct prefix_pending *p, const uint64_t *hash, size_t n, uint64_t now_ms)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t key = key_of(hash[i]);
		struct ppend_set *s = set_of(p, key);
		int w = way_of(s, key);
		if (w < 0) { /* an empty or dead way, else the oldest */
			uint64_t oldest = UINT64_MAX;
			for (int v = 0; v < WAYS; v++) {
				uint64_t sent =
				    atomic_load_explicit(&s->sent[v], memory_order_relaxed);
				if (!atomic_load_explicit(&s->key[v], memory_order_relaxed) ||
				    !live(p, sent, now_ms)) {
					w = v;
					break;
				}
				if (sent < oldest) {
					oldest = sent;
					w = v;
				}
			}
			atomic_store_explicit(&s->key[w], key, memory_order_relaxed);
		}
		atomic_store_explicit(&s->sent[w], now_ms, memory_order_relaxed);
	}
}

void prefix_pending_remove(struct prefix_pending *p, const uint64_t *hash, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t key = key_of(hash[i]);
		struct ppend_set *s = set_of(p, key);
		int w = way_of(s, key);
		if (w >= 0)
			atomic_store_explicit(&s->key[w], 0, memory_order_relaxed);
	}
}

void prefix_pending_clear(struct prefix_pending *p, uint64_t now_ms)
{
	atomic_store_explicit(&p->cleared_ms, now_ms, memory_order_relaxed);
}

/* Held by the index, or pending. */
static int known(const struct prefix_index *ix, const struct prefix_pending *p, uint64_t h,
		 uint64_t now)
{
	return prefix_index_holds(ix, h) || pending(p, h, now);
}

size_t prefix_pending_match(const struct prefix_index *ix, const struct prefix_pending *p,
			    const uint64_t *hash, size_t n, uint64_t now_ms)
{
	if (!n || !known(ix, p, hash[0], now_ms))
		return 0;
	/* chain hashes, as prefix_index_match: the longest prefix by bisection */
	size_t lo = 1, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (known(ix, p, hash[mid], now_ms))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

size_t prefix_pending_count(const struct prefix_pending *p, uint64_t now_ms)
{
	size_t n = 0;
	for (uint64_t i = 0; i <= p->mask; i++)
		for (int w = 0; w < WAYS; w++)
			n += atomic_load_explicit(&p->set[i].key[w], memory_order_relaxed) &&
			     live(p, atomic_load_explicit(&p->set[i].sent[w], memory_order_relaxed),
				  now_ms);
	return n;
}
