/*
 * slab.c - records of one size carved from aligned mappings (see slab.h).
 *
 * A mapping is SLAB_CHUNK bytes at an address that is a multiple of SLAB_CHUNK, so a record's
 * mapping is its address rounded down: its header, then the records. A mapping carves its
 * records in order as they are first asked for (the pages past those never touched) and keeps
 * the freed ones on a list of its own; the slab's list holds the mappings with a free record,
 * the newest first. The aligned mapping is taken as twice the size and the ends around the
 * aligned part unmapped.
 */
#include "core/slab.h"
#include "core/check.h"
#include "core/container.h"
#include "core/sanitize.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct slab_chunk {
	struct list_node link; /* on the slab's avail while it has a free record */
	void *free;	       /* freed records, each holding the next */
	uint32_t used, carved;
};
_Static_assert(sizeof(struct slab_chunk) % 16 == 0, "records start 16-byte aligned");

void slab_init(struct slab *s, size_t size)
{
	*s = (struct slab){.size = (uint32_t)((size + 15) & ~(size_t)15)};
	ASSERT(size && size <= SLAB_CHUNK - sizeof(struct slab_chunk)); /* (none: carved past it) */
	s->per = (uint32_t)((SLAB_CHUNK - sizeof(struct slab_chunk)) / s->size);
	list_init(&s->avail);
}

static struct slab_chunk *chunk_map(struct slab *s)
{
	char *p =
	    mmap(NULL, 2 * SLAB_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	char *at = (char *)(((uintptr_t)p + SLAB_CHUNK - 1) & ~(uintptr_t)(SLAB_CHUNK - 1));
	if (at > p)
		munmap(p, (size_t)(at - p));
	munmap(at + SLAB_CHUNK, (size_t)(p + SLAB_CHUNK - at));
	struct slab_chunk *c = (struct slab_chunk *)at;
	list_node_init(&c->link);
	list_push_front(&s->avail, &c->link);
	s->chunks++;
	return c;
}

void *slab_alloc(struct slab *s)
{
	if (ACCELNET_ASAN)
		return calloc(1, s->size);
	struct list_node *n = list_first(&s->avail);
	struct slab_chunk *c = n ? container_of(n, struct slab_chunk, link) : chunk_map(s);
	if (!c)
		return NULL;
	char *r;
	if (c->free) {
		r = c->free;
		memcpy(&c->free, r, sizeof(c->free));
	} else {
		r = (char *)(c + 1) + (size_t)c->carved++ * s->size;
	}
	if (++c->used == s->per)
		list_del(&s->avail, &c->link);
	memset(r, 0, s->size);
	return r;
}

void slab_free(struct slab *s, void *p)
{
	if (!p)
		return;
	if (ACCELNET_ASAN) {
		free(p);
		return;
	}
	struct slab_chunk *c = (struct slab_chunk *)((uintptr_t)p & ~(uintptr_t)(SLAB_CHUNK - 1));
	if (c->used-- == s->per)
		list_push_front(&s->avail, &c->link);
	memcpy(p, &c->free, sizeof(c->free));
	c->free = p;
	if (c->used || s->avail.count == 1)
		return; /* in use, or the last with room: kept */
	list_del(&s->avail, &c->link);
	s->chunks--;
	munmap(c, SLAB_CHUNK);
}

void slab_drain(struct slab *s)
{
	struct list_node *n;
	while ((n = list_first(&s->avail))) {
		list_del(&s->avail, n);
		munmap(container_of(n, struct slab_chunk, link), SLAB_CHUNK);
		s->chunks--;
	}
}
