/*
 * evict.h - cache eviction policies as const ops tables: which stored object goes when the
 * cache needs room.
 *
 * A policy orders items (embedded in the cache's objects) and nothing else: no locks, no
 * clocks, no memory of its own per object; the cache calls it under its shard's lock, and the
 * unit tests drive it with plain arrays. Capacity is in bytes: each item says its size, and
 * the cache asks for victims until the new object fits. Two are built:
 *
 *   lru    least recently used: a hit moves the object to the front; the back goes.
 *   sieve  SIEVE (Zhang et al., NSDI '24): one FIFO list and a hand. A hit only sets the
 *          object's visited bit; the hand walks from the oldest end, clearing visited bits,
 *          and evicts the first object it finds unvisited. New objects enter at the head,
 *          so a one-time scan passes through without pushing out what is reused, and an
 *          object that is reused keeps its place without being moved.
 *
 * sieve is the default of the cache: its hit path is one store of a bit (no list to relink,
 * so a hit needs no exclusive lock), and on skewed and scan-heavy traces it keeps more hits
 * than LRU (tests/unit/test_evict.c simulates both; docs/cache.md has the table).
 *
 * Adding a policy: one evict_NAME.c defining a const struct evict_ops, and one line in
 * evict_find().
 */
#ifndef ACCELNET_POLICY_EVICT_H
#define ACCELNET_POLICY_EVICT_H

#include "core/list.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One stored object, as a policy sees it. The cache sets size before insert. */
struct evict_item {
	struct list_node link;
	uint64_t size;	      /* bytes it holds */
	atomic_uchar visited; /* sieve: used since the hand last passed it */
};

struct evict {
	const struct evict_ops *ops;
	struct list_head list;	/* lru: most recent first; sieve: newest first */
	struct list_node *hand; /* sieve: where the next look for a victim starts; NULL: the tail */
	uint64_t bytes, objects; /* what is stored */
};

struct evict_ops {
	const char *name;
	void (*init)(struct evict *e);
	/* A hit on <it>, which is stored. sieve: may run under a shared lock (one atomic bit). */
	void (*touch)(struct evict *e, struct evict_item *it);
	/* Store <it> (its size set). */
	void (*insert)(struct evict *e, struct evict_item *it);
	/* Take out and return the object to evict next, or NULL when empty. */
	struct evict_item *(*victim)(struct evict *e);
	/* Take out <it> wherever it is (purged, replaced, expired). */
	void (*remove)(struct evict *e, struct evict_item *it);
};

/* The policy called <name>, or NULL. */
const struct evict_ops *evict_find(const char *name);
/* "lru, sieve" for messages. */
const char *evict_names(void);

extern const struct evict_ops evict_lru;
extern const struct evict_ops evict_sieve;

#endif
