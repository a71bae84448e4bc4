/*
 * segcache.c - the segment cache (segcache.h). A record at ring position <at> (counted from
 * the first byte ever written, so it never wraps) is intact while head <= at + cap: the ring
 * writes positions in order, a record that would cross its end starts again at 0 (the tail
 * skipped counts as written), so the bytes of <at> are written again only once head passes
 * at + cap. A slot is empty when its len is 0 (no segment that short is kept).
 */
#include "tok/segcache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WAYS 4

struct segcache_slot {
	uint64_t key;
	uint64_t at; /* the record: nids ids, then len bytes */
	uint32_t len, nids;
	uint32_t first;
};

void segcache_init(struct segcache *c, size_t budget)
{
	memset(c, 0, sizeof(*c));
	c->budget = budget;
	c->key_mask = ~(uint64_t)0;
}

void segcache_free(struct segcache *c)
{
	free(c->slot); /* the ring is in the same block */
	segcache_init(c, c->budget);
}

static size_t record_size(size_t n, size_t nids)
{
	return (nids * sizeof(uint32_t) + n + 3) & ~(size_t)3;
}

/* Takes the memory: a sixteenth of the budget for slots (32 bytes each), the rest ring. */
static int take_memory(struct segcache *c)
{
	size_t nslots = WAYS;
	while (nslots * 2 * sizeof(struct segcache_slot) * 16 <= c->budget)
		nslots *= 2;
	size_t table = nslots * sizeof(struct segcache_slot);
	if (c->budget < 2 * table + 1024) {
		c->budget = 0;
		return -ENOMEM;
	}
	char *block = malloc(c->budget);
	if (!block) {
		c->budget = 0;
		return -ENOMEM;
	}
	c->slot = (struct segcache_slot *)(void *)block;
	memset(c->slot, 0, table);
	c->nslots = nslots;
	c->ring = (uint8_t *)block + table;
	c->cap = (c->budget - table) & ~(size_t)3;
	c->head = 0;
	return 0;
}

int segcache_keeps(const struct segcache *c, size_t n)
{
	return c->budget && n >= SEGCACHE_MIN && n <= UINT32_MAX;
}

static int intact(const struct segcache *c, const struct segcache_slot *s)
{
	return s->len && c->head <= s->at + c->cap;
}

static uint8_t *at_ring(const struct segcache *c, uint64_t at)
{
	return c->ring + (size_t)(at % c->cap);
}

/* Room for a record of <size> bytes at the head: its position, the head moved past it. */
static uint64_t ring_take(struct segcache *c, size_t size)
{
	size_t pos = (size_t)(c->head % c->cap);
	if (size > c->cap - pos)
		c->head += c->cap - pos;
	uint64_t at = c->head;
	c->head += size;
	return at;
}

int segcache_find(struct segcache *c, uint64_t key, int first, const uint8_t *p, size_t n,
		  const uint32_t **ids, size_t *nids)
{
	if (!c->slot || !segcache_keeps(c, n)) {
		c->misses++;
		return 0;
	}
	key &= c->key_mask;
	struct segcache_slot *b = &c->slot[key & (c->nslots - 1) & ~(size_t)(WAYS - 1)];
	for (int w = 0; w < WAYS; w++) {
		struct segcache_slot *s = &b[w];
		if (s->key != key || s->len != n || s->first != (uint32_t) !!first || !intact(c, s))
			continue;
		const uint8_t *r = at_ring(c, s->at);
		if (memcmp(r + s->nids * sizeof(uint32_t), p, n))
			continue;
		size_t size = record_size(n, s->nids);
		/* in the older half, and a copy to the front leaves it intact: move it there */
		if (c->head - s->at > c->cap / 2 && c->head + 2 * size <= s->at + c->cap) {
			uint64_t to = ring_take(c, size);
			memcpy(at_ring(c, to), r, size);
			s->at = to;
			r = at_ring(c, to);
		}
		*ids = (const uint32_t *)(const void *)r;
		*nids = s->nids;
		c->hits++;
		return 1;
	}
	c->misses++;
	return 0;
}

int segcache_put(struct segcache *c, uint64_t key, int first, const uint8_t *p, size_t n,
		 const uint32_t *ids, size_t nids)
{
	if (!segcache_keeps(c, n))
		return 0;
	if (!c->slot && take_memory(c))
		return -ENOMEM;
	size_t size = record_size(n, nids);
	if (nids > UINT32_MAX || size > c->cap / 4)
		return -E2BIG;
	key &= c->key_mask;
	struct segcache_slot *b = &c->slot[key & (c->nslots - 1) & ~(size_t)(WAYS - 1)];
	struct segcache_slot *s = &b[0];
	for (int w = 0; w < WAYS; w++) { /* an empty or overwritten way, else the oldest */
		if (!intact(c, &b[w])) {
			s = &b[w];
			break;
		}
		if (b[w].at < s->at)
			s = &b[w];
	}
	uint64_t at = ring_take(c, size);
	uint8_t *r = at_ring(c, at);
	memcpy(r, ids, nids * sizeof(uint32_t));
	memcpy(r + nids * sizeof(uint32_t), p, n);
	*s = (struct segcache_slot){key, at, (uint32_t)n, (uint32_t)nids, (uint32_t) !!first};
	c->puts++;
	return 0;
}
