/*
 * buf.h - fixed-size byte buffers recycled through per-thread free lists.
 *
 * A buffer holds bytes in data[start..end); readers consume from start, writers append at
 * end. Connections take a buffer when bytes arrive and give it back when it drains, so an
 * idle keep-alive connection holds no buffer at all. A pool is owned by one thread; buffers
 * are page-backed and those beyond the pool's bound go back to the kernel.
 *
 * A pool counts the bytes it has lent (pages, not just data) in lent_bytes: only its owner
 * writes it (a relaxed load and store, no read-modify-write), and any thread may read it,
 * so a memory budget over every pool costs the owners nothing but their own cache line.
 */
#ifndef ACCELNET_CORE_BUF_H
#define ACCELNET_CORE_BUF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct buf {
	struct buf *next; /* free-list link */
	uint32_t start, end, cap;
	char data[];
};

struct buf_pool {
	struct buf *free;
	uint32_t size;	   /* capacity of every buffer of this pool */
	size_t map_bytes;  /* what one buffer takes: its header and data, in whole pages */
	uint32_t nfree;	   /* buffers on the free list */
	uint32_t max_free; /* beyond this (and keep), returned buffers are freed */
	uint32_t keep;	   /* the owner's bound above max_free for now (buf_pool_keep) */
	uint64_t live;	   /* buffers handed out and not yet returned */
	_Atomic uint64_t lent_bytes; /* ... and the memory they take, pages included */
};

void buf_pool_init(struct buf_pool *pool, uint32_t size, uint32_t max_free);
void buf_pool_drain(struct buf_pool *pool);
/*
 * Keep up to <n> free buffers from now on (never fewer than the pool's max_free), and give
 * the free ones beyond that back to the kernel now: the owner raises it while a load swings
 * through more buffers than max_free and lowers it once the load has gone.
 */
void buf_pool_keep(struct buf_pool *pool, uint32_t n);
/* An empty buffer, or NULL when memory is exhausted. */
struct buf *buf_get(struct buf_pool *pool);
void buf_put(struct buf_pool *pool, struct buf *b);

static inline size_t buf_len(const struct buf *b)
{
	return b->end - b->start;
}

static inline char *buf_head(struct buf *b)
{
	return b->data + b->start;
}

static inline size_t buf_room(const struct buf *b)
{
	return b->cap - b->end;
}

static inline void buf_consume(struct buf *b, size_t n)
{
	b->start += (uint32_t)n;
	if (b->start == b->end)
		b->start = b->end = 0;
}

/* Move the unread bytes to the front so that buf_room() is as large as it can be. */
static inline void buf_compact(struct buf *b)
{
	if (b->start == 0)
		return;
	memmove(b->data, b->data + b->start, buf_len(b));
	b->end -= b->start;
	b->start = 0;
}

#endif
