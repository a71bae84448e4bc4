/*
 * smallmem.c - the free lists behind smallmem.h.
 *
 * A block is a 16-byte header (its class, or LARGE for one malloc'd at its asked size) and
 * then the caller's bytes, 16-byte aligned as malloc's are. Class k holds 32 << k bytes.
 * A free block's first bytes link it to the next of its class.
 */
#include "core/smallmem.h"
#include "core/sanitize.h"

#include <stdlib.h>
#include <string.h>

#define HEADER 16
#define LARGE UINT32_MAX
#define SMALLEST 32

struct block {
	uint32_t cls;
	uint32_t size; /* LARGE: the bytes asked for (realloc copies them), else unused */
	uint64_t pad;
};

#if !ACCELNET_ASAN
/* The class that holds <n> bytes, or LARGE. */
static uint32_t class_of(size_t n)
{
	size_t c = SMALLEST;
	for (uint32_t k = 0; k < SMALLMEM_CLASSES; k++, c <<= 1)
		if (n <= c)
			return k;
	return LARGE;
}

static size_t class_bytes(uint32_t k)
{
	return (size_t)SMALLEST << k;
}
#endif

void *smallmem_alloc(struct smallmem *m, size_t n)
{
#if ACCELNET_ASAN
	(void)m;
	return malloc(n);
#else
	uint32_t k = class_of(n);
	struct block *b;
	if (k != LARGE && m->free[k]) {
		b = m->free[k];
		memcpy(&m->free[k], (char *)b + HEADER, sizeof(void *));
		m->nfree[k]--;
		return (char *)b + HEADER;
	}
	if (k == LARGE && n > UINT32_MAX - HEADER)
		return NULL;
	b = malloc(HEADER + (k == LARGE ? n : class_bytes(k)));
	if (!b)
		return NULL;
	b->cls = k;
	b->size = k == LARGE ? (uint32_t)n : 0;
	return (char *)b + HEADER;
#endif
}

void *smallmem_calloc(struct smallmem *m, size_t nmemb, size_t size)
{
	if (size && nmemb > SIZE_MAX / size)
		return NULL;
	void *p = smallmem_alloc(m, nmemb * size);
	if (p)
		memset(p, 0, nmemb * size);
	return p;
}

void smallmem_free(struct smallmem *m, void *p)
{
#if ACCELNET_ASAN
	(void)m;
	free(p);
#else
	if (!p)
		return;
	struct block *b = (struct block *)((char *)p - HEADER);
	uint32_t k = b->cls;
	if (k == LARGE || m->nfree[k] >= SMALLMEM_KEEP) {
		free(b);
		return;
	}
	memcpy(p, &m->free[k], sizeof(void *));
	m->free[k] = b;
	m->nfree[k]++;
#endif
}

void *smallmem_realloc(struct smallmem *m, void *p, size_t n)
{
#if ACCELNET_ASAN
	(void)m;
	return realloc(p, n);
#else
	if (!p)
		return smallmem_alloc(m, n);
	const struct block *b = (const struct block *)((char *)p - HEADER);
	size_t had = b->cls == LARGE ? b->size : class_bytes(b->cls);
	if (b->cls != LARGE && n <= had)
		return p;
	void *q = smallmem_alloc(m, n);
	if (!q)
		return NULL;
	memcpy(q, p, had < n ? had : n);
	smallmem_free(m, p);
	return q;
#endif
}

void smallmem_drain(struct smallmem *m)
{
	for (uint32_t k = 0; k < SMALLMEM_CLASSES; k++) {
		while (m->free[k]) {
			struct block *b = m->free[k];
			memcpy(&m->free[k], (char *)b + HEADER, sizeof(void *));
			free(b);
		}
		m->nfree[k] = 0;
	}
}
