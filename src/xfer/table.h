/*
 * table.h - a grow-only array whose entries never move: one writer appends while other threads
 * index it without a lock.
 *
 * A streamed manifest (wire.h) makes the sender's and the receiver's per-file and per-chunk
 * arrays grow while streams read them: a realloc would move entries under a reader. Here the
 * entries live in segments of doubling size (2^XFER_TABLE_BASE entries, then twice as many,
 * ...), allocated as the table grows and never moved or freed before the table is: entry i is
 * found with one count of leading zeros. An entry is safe to read once its index was published
 * to the reader by something that orders memory (a mutex, an atomic release), after
 * xfer_table_grow() made room and the writer filled it.
 */
#ifndef ACCELNET_XFER_TABLE_H
#define ACCELNET_XFER_TABLE_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#define XFER_TABLE_BASE 8
#define XFER_TABLE_SEGS 26 /* 2^8 * (2^26 - 1) entries: past 2^33, more than any index */

struct xfer_table {
	uint8_t *seg[XFER_TABLE_SEGS];
	size_t esize; /* bytes an entry */
	uint64_t cap; /* entries allocated (zeroed) */
};

static inline void xfer_table_init(struct xfer_table *t, size_t esize)
{
	*t = (struct xfer_table){.esize = esize};
}

static inline void *xfer_table_at(const struct xfer_table *t, uint64_t i)
{
	uint64_t j = i + (1ull << XFER_TABLE_BASE);
	unsigned b = 63u - (unsigned)__builtin_clzll(j);
	return t->seg[b - XFER_TABLE_BASE] + (j - (1ull << b)) * t->esize;
}

/* Room for entries [0, n), new ones zeroed: 0 or -ENOMEM (the table keeps what it had). */
static inline int xfer_table_grow(struct xfer_table *t, uint64_t n)
{
	while (t->cap < n) {
		unsigned k = 0;
		while (k < XFER_TABLE_SEGS && t->seg[k])
			k++;
		if (k == XFER_TABLE_SEGS)
			return -E2BIG;
		uint64_t len = 1ull << (XFER_TABLE_BASE + k);
		if (!(t->seg[k] = calloc(len, t->esize)))
			return -ENOMEM;
		t->cap += len;
	}
	return 0;
}

static inline void xfer_table_free(struct xfer_table *t)
{
	for (unsigned k = 0; k < XFER_TABLE_SEGS; k++)
		free(t->seg[k]);
	*t = (struct xfer_table){.esize = t->esize};
}

#endif
