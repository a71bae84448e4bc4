/*
 * smallmem.h - one thread's free lists of small blocks by size class, for a library that
 * allocates a few small objects per message and frees them soon after (nghttp2: a stream, its
 * header list, each frame queued), so that a request takes no trip through malloc.
 *
 * Blocks come from malloc, in eight classes of 32 bytes to 4 KiB, each behind a 16-byte
 * header that names its class; a freed block goes on its class's free list, up to
 * SMALLMEM_KEEP blocks a class (some 4 MiB at most in all), and back to malloc beyond. A
 * request above 4 KiB goes to malloc as it is. One owner thread only, no lock. Under
 * AddressSanitizer every call goes to malloc, so that a use after free still shows.
 */
#ifndef ACCELNET_CORE_SMALLMEM_H
#define ACCELNET_CORE_SMALLMEM_H

#include <stddef.h>
#include <stdint.h>

#define SMALLMEM_CLASSES 8
#define SMALLMEM_KEEP 512 /* free blocks kept a class */

struct smallmem {
	void *free[SMALLMEM_CLASSES];
	uint32_t nfree[SMALLMEM_CLASSES];
};

/* Like malloc, calloc, realloc and free (NULL when memory is exhausted); a block from one
 * of them goes back through smallmem_free() or smallmem_realloc() of the same <m>. */
void *smallmem_alloc(struct smallmem *m, size_t n);
void *smallmem_calloc(struct smallmem *m, size_t nmemb, size_t size);
void *smallmem_realloc(struct smallmem *m, void *p, size_t n);
void smallmem_free(struct smallmem *m, void *p);
/* Give every kept block back to malloc (the owner ends). */
void smallmem_drain(struct smallmem *m);

#endif
