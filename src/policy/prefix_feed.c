/*
 * prefix_feed.c - a ring of prompts' first blocks, many writers, one reader (see
 * prefix_feed.h).
 */
#include "policy/prefix_feed.h"

#include <errno.h>
#include <stdlib.h>

int prefix_feed_new(struct prefix_feed **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void prefix_feed_free(struct prefix_feed *f)
{
	free(f);
}

void prefix_feed_push(struct prefix_feed *f, const uint64_t *hash, size_t n)
{
	if (!n)
		return;
	if (n > PREFIX_FEED_BLOCKS)
		n = PREFIX_FEED_BLOCKS;
	uint64_t i = atomic_fetch_add_explicit(&f->head, 1, memory_order_relaxed);
	struct prefix_feed_slot *s = &f->slot[i % PREFIX_FEED_SLOTS];
	atomic_store_explicit(&s->stamp, 2 * i + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&s->n, (uint32_t)n, memory_order_relaxed);
	for (size_t k = 0; k < n; k++)
		atomic_store_explicit(&s->hash[k], hash[k], memory_order_relaxed);
	atomic_store_explicit(&s->stamp, 2 * i + 2, memory_order_release);
}

size_t prefix_feed_take(struct prefix_feed *f, uint64_t *cursor, uint64_t *hash)
{
	uint64_t head = atomic_load_explicit(&f->head, memory_order_acquire);
	if (head - *cursor > PREFIX_FEED_SLOTS)
		*cursor = head - PREFIX_FEED_SLOTS; /* fallen a ring behind: skip the overwritten */
	while (*cursor < head) {
		uint64_t i = *cursor;
		struct prefix_feed_slot *s = &f->slot[i % PREFIX_FEED_SLOTS];
		uint64_t st = atomic_load_explicit(&s->stamp, memory_order_acquire);
		if (st < 2 * i + 2)
			return 0; /* still being written (or not yet begun): next time */
		(*cursor)++;
		if (st != 2 * i + 2)
			continue; /* overwritten by a later entry already */
		size_t n = atomic_load_explicit(&s->n, memory_order_relaxed);
		if (n > PREFIX_FEED_BLOCKS)
			n = PREFIX_FEED_BLOCKS;
		for (size_t k = 0; k < n; k++)
			hash[k] = atomic_load_explicit(&s->hash[k], memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->stamp, memory_order_relaxed) != st)
			continue; /* overwritten while copied */
		return n;
	}
	return 0;
}
