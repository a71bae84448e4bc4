/*
 * slab.h - one thread's records of one size, carved from mappings of their own.
 *
 * For records that come and go in bursts beside ones that stay (a worker's upstream
 * connections, opened by the thousand for a burst of requests and closed as it ends, between
 * the records of the clients that stay idle): from malloc, the freed ones would lie between
 * the others, on pages malloc cannot give back. Here a record comes from a SLAB_CHUNK mapping
 * that holds only records of its size, and a mapping whose records are all free goes back to
 * the kernel (but the last one with room, so that one record coming and going maps nothing).
 * One owner thread, no lock. Under AddressSanitizer each record is calloc'd and freed, so that
 * a use after free still shows.
 */
#ifndef ACCELNET_CORE_SLAB_H
#define ACCELNET_CORE_SLAB_H

#include "core/list.h"

#include <stddef.h>
#include <stdint.h>

#define SLAB_CHUNK 65536 /* bytes a mapping, aligned to as many */

struct slab {
	uint32_t size;		/* a record's bytes, rounded up to 16 */
	uint32_t per;		/* records a mapping */
	struct list_head avail; /* mappings with a free record */
	uint32_t chunks;	/* mappings in all */
};

/* Records of <size> bytes (at most a few KiB; more than a mapping holds is a bug). */
void slab_init(struct slab *s, size_t size);
/* A zeroed record, or NULL without memory. */
void *slab_alloc(struct slab *s);
/* <p> (from slab_alloc of the same <s>, or NULL) back. */
void slab_free(struct slab *s, void *p);
/* Every mapping back to the kernel: the owner ends, its records all freed (a mapping whose
 * records are all still held is not on the slab's list: it would stay mapped). */
void slab_drain(struct slab *s);

#endif
