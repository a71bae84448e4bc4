/*
 * buf.c - the free lists behind buf.h.
 *
 * Buffers are whole pages from mmap, not malloc: a buffer beyond the free list's bound goes
 * back to the kernel at once, so memory taken by a burst of busy connections is returned
 * when they go idle (malloc would keep the touched pages in its arena). The free list
 * absorbs the steady state, so mmap and munmap run only when the load changes. Its bound is
 * max_free, or more for a while when the owner says so (buf_pool_keep): a load whose buffers
 * in use swing by hundreds from one loop turn to the next would otherwise map and unmap a
 * buffer at each swing, and each munmap costs a TLB shootdown.
 *
 * Under AddressSanitizer a buffer's bytes are poisoned while it lies on the free list, so a
 * read or write of a buffer given back (one a peer's timing made outlive its owner's hold) is
 * reported as a use after free, as malloc'd memory's would be, not met as another buffer's
 * bytes.
 */
#include "core/buf.h"
#include "core/sanitize.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if ACCELNET_ASAN
#include <sanitizer/asan_interface.h>
#define BUF_POISON(b, n) ASAN_POISON_MEMORY_REGION((b)->data, (n))
#define BUF_UNPOISON(b, n) ASAN_UNPOISON_MEMORY_REGION((b)->data, (n))
#else
#define BUF_POISON(b, n) ((void)(b), (void)(n))
#define BUF_UNPOISON(b, n) ((void)(b), (void)(n))
#endif

static size_t buf_bytes(const struct buf_pool *pool)
{
	return pool->map_bytes;
}

void buf_pool_init(struct buf_pool *pool, uint32_t size, uint32_t max_free)
{
	pool->free = NULL;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	pool->size = size;
	pool->map_bytes = (sizeof(struct buf) + size + page - 1) / page * page;
	pool->nfree = 0;
	pool->max_free = max_free;
	pool->keep = 0;
	pool->live = 0;
	atomic_init(&pool->lent_bytes, 0);
}

/* The owner's own counter: a plain load and store, never a locked add. */
static void lent_add(struct buf_pool *pool, int64_t delta)
{
	uint64_t v = atomic_load_explicit(&pool->lent_bytes, memory_order_relaxed);
	atomic_store_explicit(&pool->lent_bytes, v + (uint64_t)delta, memory_order_relaxed);
}

void buf_pool_drain(struct buf_pool *pool)
{
	while (pool->free) {
		struct buf *b = pool->free;
		pool->free = b->next;
		BUF_UNPOISON(b, b->cap);
		munmap(b, buf_bytes(pool));
	}
	pool->nfree = 0;
}

void buf_pool_keep(struct buf_pool *pool, uint32_t n)
{
	pool->keep = n;
	uint32_t bound = n > pool->max_free ? n : pool->max_free;
	while (pool->nfree > bound) {
		struct buf *b = pool->free;
		pool->free = b->next;
		pool->nfree--;
		BUF_UNPOISON(b, b->cap);
		munmap(b, buf_bytes(pool));
	}
}

struct buf *buf_get(struct buf_pool *pool)
{
	struct buf *b = pool->free;
	if (b) {
		pool->free = b->next;
		pool->nfree--;
	} else {
		void *p = mmap(NULL, buf_bytes(pool), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		b = p;
		b->cap = pool->size;
	}
	BUF_UNPOISON(b, b->cap);
	b->next = NULL;
	b->start = b->end = 0;
	pool->live++;
	lent_add(pool, (int64_t)buf_bytes(pool));
	return b;
}

void buf_put(struct buf_pool *pool, struct buf *b)
{
	if (!b)
		return;
	pool->live--;
	lent_add(pool, -(int64_t)buf_bytes(pool));
	if (pool->nfree >= pool->max_free && pool->nfree >= pool->keep) {
		munmap(b, buf_bytes(pool));
		return;
	}
	BUF_POISON(b, b->cap);
	b->next = pool->free;
	pool->free = b;
	pool->nfree++;
}
