/*
 * kvcache.c - the block cache: blocks in one array, threaded on an LRU list by index (head
 * most recent), found through an open-addressed table of indices with linear probing and
 * backward-shift deletion, so that a delete leaves no tombstones behind. The table has at
 * least twice as many slots as the cache has blocks, so probes stay short.
 */
#include "sim/kvcache.h"

#include <errno.h>
#include <stdlib.h>

#define NIL UINT32_MAX

struct kv_block {
	uint64_t hash;
	uint64_t born; /* the admission that inserted it */
	uint32_t prev, next;
};

struct kvcache {
	struct kv_block *blocks;
	uint32_t *slots; /* block index or NIL */
	size_t mask;	 /* slots - 1 */
	size_t capacity, used, max_prompt;
	uint32_t head, tail; /* most and least recent */
	uint32_t free;	     /* unused blocks, chained by next */
	uint64_t admissions;
	uint64_t *evicted; /* scratch for one admission */
};

static size_t home(const struct kvcache *c, uint64_t hash)
{
	return (size_t)((hash * 0x9e3779b97f4a7c15ull) >> 17) & c->mask;
}

/* The slot holding <hash>, or the empty slot where it would go. */
static size_t slot_of(const struct kvcache *c, uint64_t hash)
{
	size_t i = home(c, hash);
	while (c->slots[i] != NIL && c->blocks[c->slots[i]].hash != hash)
		i = (i + 1) & c->mask;
	return i;
}

static uint32_t find(const struct kvcache *c, uint64_t hash)
{
	return c->slots[slot_of(c, hash)];
}

/* Empty slot i and pull later members of its probe run back over the hole. */
static void slot_delete(struct kvcache *c, size_t i)
{
	size_t j = i;
	for (;;) {
		j = (j + 1) & c->mask;
		if (c->slots[j] == NIL)
			break;
		size_t k = home(c, c->blocks[c->slots[j]].hash);
		/* the entry at j may move to i unless its home lies cyclically in (i, j] */
		int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		c->slots[i] = c->slots[j];
		i = j;
	}
	c->slots[i] = NIL;
}

static void lru_unlink(struct kvcache *c, uint32_t b)
{
	struct kv_block *x = &c->blocks[b];
	if (x->prev != NIL)
		c->blocks[x->prev].next = x->next;
	else
		c->head = x->next;
	if (x->next != NIL)
		c->blocks[x->next].prev = x->prev;
	else
		c->tail = x->prev;
}

static void lru_push_front(struct kvcache *c, uint32_t b)
{
	struct kv_block *x = &c->blocks[b];
	x->prev = NIL;
	x->next = c->head;
	if (c->head != NIL)
		c->blocks[c->head].prev = b;
	c->head = b;
	if (c->tail == NIL)
		c->tail = b;
}

static void touch(struct kvcache *c, uint32_t b)
{
	if (c->head == b)
		return;
	lru_unlink(c, b);
	lru_push_front(c, b);
}

int kvcache_create(size_t capacity, size_t max_prompt_blocks, struct kvcache **out)
{
	if (!capacity || capacity >= NIL / 4 || !max_prompt_blocks)
		return -EINVAL;
	struct kvcache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	size_t nslots = 16;
	while (nslots < 2 * capacity)
		nslots *= 2;
	c->capacity = capacity;
	c->max_prompt = max_prompt_blocks;
	c->mask = nslots - 1;
	c->head = c->tail = NIL;
	c->blocks = calloc(capacity, sizeof(*c->blocks));
	c->slots = malloc(nslots * sizeof(*c->slots));
	c->evicted = calloc(capacity < max_prompt_blocks ? capacity : max_prompt_blocks,
			    sizeof(*c->evicted));
	if (!c->blocks || !c->slots || !c->evicted) {
		kvcache_destroy(c);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nslots; i++)
		c->slots[i] = NIL;
	for (size_t i = 0; i < capacity; i++)
		c->blocks[i].next = i + 1 < capacity ? (uint32_t)(i + 1) : NIL;
	c->free = 0;
	*out = c;
	return 0;
}

void kvcache_clear(struct kvcache *c)
{
	for (size_t i = 0; i <= c->mask; i++)
		c->slots[i] = NIL;
	for (size_t i = 0; i < c->capacity; i++)
		c->blocks[i].next = i + 1 < c->capacity ? (uint32_t)(i + 1) : NIL;
	c->free = 0;
	c->head = c->tail = NIL;
	c->used = 0;
}

void kvcache_destroy(struct kvcache *c)
{
	if (!c)
		return;
	free(c->blocks);
	free(c->slots);
	free(c->evicted);
	free(c);
}

size_t kvcache_capacity(const struct kvcache *c)
{
	return c->capacity;
}

size_t kvcache_used(const struct kvcache *c)
{
	return c->used;
}

int kvcache_contains(const struct kvcache *c, uint64_t hash)
{
	return find(c, hash) != NIL;
}

size_t kvcache_match(const struct kvcache *c, const uint64_t *hash, size_t n)
{
	size_t k = 0;
	while (k < n && find(c, hash[k]) != NIL)
		k++;
	return k;
}

/* A free block for <hash>, evicting the least recent one when the cache is full. */
static void insert(struct kvcache *c, uint64_t hash, size_t *nevicted)
{
	uint32_t b;
	if (c->used == c->capacity) {
		b = c->tail;
		c->evicted[(*nevicted)++] = c->blocks[b].hash;
		lru_unlink(c, b);
		slot_delete(c, slot_of(c, c->blocks[b].hash));
	} else {
		b = c->free;
		c->free = c->blocks[b].next;
		c->used++;
	}
	c->blocks[b].hash = hash;
	c->blocks[b].born = c->admissions;
	lru_push_front(c, b);
	c->slots[slot_of(c, hash)] = b;
}

void kvcache_admit(struct kvcache *c, const uint64_t *hash, size_t n, size_t hit,
		   const struct kvcache_sink *sink)
{
	size_t m = n < c->capacity ? n : c->capacity, nevicted = 0;
	if (m > c->max_prompt)
		m = c->max_prompt;
	if (hit > m)
		hit = m;
	c->admissions++;
	/* 1. the cached prefix first, so that no insert below can evict it */
	for (size_t i = 0; i < hit; i++) {
		uint32_t b = find(c, hash[i]);
		if (b == NIL) { /* not the caller's match after all: the rest is new */
			hit = i;
			break;
		}
		touch(c, b);
	}
	/* 2. the rest, deepest first; the victims are other prompts' blocks, all of them
	 * less recent than this prompt's, of which fewer than m are in the cache */
	for (size_t i = m; i-- > hit;) {
		uint32_t b = find(c, hash[i]);
		if (b != NIL)
			touch(c, b);
		else
			insert(c, hash[i], &nevicted);
	}
	/* 3. block 0 most recent of all, the deepest block least */
	for (size_t i = hit; i-- > 0;)
		touch(c, find(c, hash[i]));
	if (!sink)
		return;
	if (nevicted && sink->removed)
		sink->removed(sink->arg, c->evicted, nevicted);
	for (size_t i = hit; i < m && sink->stored;) {
		uint32_t b = find(c, hash[i]);
		if (b == NIL || c->blocks[b].born != c->admissions) {
			i++;
			continue;
		}
		size_t from = i;
		while (i < m && (b = find(c, hash[i])) != NIL && c->blocks[b].born == c->admissions)
			i++;
		sink->stored(sink->arg, hash + from, i - from, from ? &hash[from - 1] : NULL);
	}
}

size_t kvcache_list(const struct kvcache *c, uint64_t *out, size_t max)
{
	size_t k = 0;
	for (uint32_t b = c->head; b != NIL && k < max; b = c->blocks[b].next)
		out[k++] = c->blocks[b].hash;
	return k;
}
