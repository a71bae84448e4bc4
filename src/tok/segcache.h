/*
 * segcache.h - one thread's cache of the ids of text segments: the pieces of a text between
 * its added tokens (tok.h), which BPE encodes each on its own, so that a conversation whose
 * turn k is turn k-1 plus a message costs, on turn k, the new message and a copy of the ids
 * of the rest. A segment is looked up by a 64-bit key the caller chains over everything
 * before it (tok.c), and kept with its bytes: a hit compares them, and whether the segment
 * starts the text, so a key that collides gives a miss, never another segment's ids.
 *
 * Memory is a byte budget fixed at init, taken at the first put and never grown: a ring of
 * records (a segment's ids, then its bytes), written in order and overwriting the oldest
 * (FIFO), and a table of slots, 4 ways a bucket, that point into it; a slot whose record the
 * ring has since overwritten is a miss. A hit on a record in the older half of the ring
 * copies it to the front, so that a conversation still going keeps its start. One struct
 * belongs to one thread: nothing is locked or shared, and nothing is allocated once it holds
 * its memory.
 */
#ifndef ACCELNET_TOK_SEGCACHE_H
#define ACCELNET_TOK_SEGCACHE_H

#include <stddef.h>
#include <stdint.h>

#define SEGCACHE_BUDGET (4u << 20) /* a scratch's default: 4 MiB */
#define SEGCACHE_MIN 16		   /* bytes: a shorter segment costs less to encode */

struct segcache_slot;

struct segcache {
	size_t budget; /* bytes in all (ring and slots); 0: off */
	uint8_t *ring; /* NULL until the first put */
	size_t cap;    /* the ring's bytes */
	uint64_t head; /* where the next record goes, counted from the first ever */
	struct segcache_slot *slot;
	size_t nslots;	   /* a power of two, at least 4 */
	uint64_t key_mask; /* ~0; a test sets 0 to make every key collide */
	uint64_t hits, misses, puts;
};

/* An empty cache of at most <budget> bytes (0: off, every find a miss, every put none). */
void segcache_init(struct segcache *c, size_t budget);
void segcache_free(struct segcache *c);

/* Whether a segment of <n> bytes may be kept: when not, the caller need not key it. */
int segcache_keeps(const struct segcache *c, size_t n);

/*
 * The ids of segment p[0..n) under <key>, <first> when it starts the text: 1 with *ids
 * (in the cache, valid until its next put or find) and *nids, or 0.
 */
int segcache_find(struct segcache *c, uint64_t key, int first, const uint8_t *p, size_t n,
		  const uint32_t **ids, size_t *nids);

/*
 * Keeps ids[0..nids) for segment p[0..n) under <key> and <first>, evicting the oldest
 * records: 0, or -ENOMEM when the cache could not take its memory (it is then off), or
 * -E2BIG when the segment is past a quarter of the ring (not kept).
 */
int segcache_put(struct segcache *c, uint64_t key, int first, const uint8_t *p, size_t n,
		 const uint32_t *ids, size_t nids);

#endif
