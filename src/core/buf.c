/*
 * buf.c - the free lists behind buf.h.
 */
#include "core/buf.h"

#include <stdlib.h>

void buf_pool_init(struct buf_pool *pool, uint32_t size, uint32_t max_free)
{
	pool->free = NULL;
	pool->size = size;
	pool->nfree = 0;
	pool->max_free = max_free;
	pool->live = 0;
}

void buf_pool_drain(struct buf_pool *pool)
{
	while (pool->free) {
		struct buf *b = pool->free;
		pool->free = b->next;
		free(b);
	}
	pool->nfree = 0;
}

struct buf *buf_get(struct buf_pool *pool)
{
	struct buf *b = pool->free;
	if (b) {
		pool->free = b->next;
		pool->nfree--;
	} else {
		b = malloc(sizeof(*b) + pool->size);
		if (!b)
			return NULL;
		b->cap = pool->size;
	}
	b->next = NULL;
	b->start = b->end = 0;
	pool->live++;
	return b;
}

void buf_put(struct buf_pool *pool, struct buf *b)
{
	if (!b)
		return;
	pool->live--;
	if (pool->nfree >= pool->max_free) {
		free(b);
		return;
	}
	b->next = pool->free;
	pool->free = b;
	pool->nfree++;
}
