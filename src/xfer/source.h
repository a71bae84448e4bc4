/*
 * source.h - what a sender sends from: memory, a descriptor it was given, or a file it opens
 * only while a chunk of it is sent.
 *
 * A tree of 100,000 files cannot be opened up front (the descriptor limit is often 1,024),
 * so a file named by path is opened (and mapped, for the hash) when a stream needs one of its
 * chunks, and kept in a small set of open files shared by the streams (struct xfer_sources):
 * at most one a stream at a time plus a few kept for the next chunk of the same file, the
 * least recently used closed first. A file opened again must still be the very file (device
 * and inode) the manifest was made from, with its size and modification time: one replaced
 * (a symlink swapped in for a file of a tree, which the walk did not follow, would otherwise
 * be followed now) or changed since is refused (-ESTALE), not sent.
 *
 * A small file (at most XFER_SOURCE_SMALL bytes) is read whole into its slot's buffer and
 * closed at once: no map to make and undo, no descriptor kept, and the stream sends its
 * frame and bytes in one write. Each slot's buffer is allocated once, with the set.
 */
#ifndef ACCELNET_XFER_SOURCE_H
#define ACCELNET_XFER_SOURCE_H

#include "xfer/table.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define XFER_SOURCE_SMALL (64 * 1024)

struct xfer_source {
	int fd;		    /* sendfile from here, or -1 */
	const uint8_t *buf; /* memory (a buffer, or the file mapped for hashing), or NULL */
	uint64_t size;
	/* or, with fd -1 and buf NULL: a file opened when needed, beneath <dirfd> when that is
	 * >= 0 (no symlink followed), and checked against <mtime_ns> and <size> */
	const char *path;
	int dirfd;
	uint64_t mtime_ns;
	uint64_t dev, ino; /* the file the manifest was made from: another one is refused */
};

/* One file of the open set (fd and buf as in struct xfer_source), held while refs > 0. */
struct xfer_open {
	uint32_t file; /* UINT32_MAX: the slot is empty */
	int fd;
	const uint8_t *buf;
	uint64_t size;
	unsigned refs;
	uint64_t used;	/* when it was last held: the least recent empty-handed one goes first */
	uint8_t *small; /* XFER_SOURCE_SMALL bytes: a small file is read here (buf points here) */
};

struct xfer_sources {
	pthread_mutex_t mu;
	pthread_cond_t cv;     /* under mu: a slot was let go */
	struct xfer_table src; /* struct xfer_source, per file (a copy; paths borrowed) */
	uint32_t nfiles;
	struct xfer_table slot_of; /* int32_t, per file: its slot + 1, or 0 */
	struct xfer_open *slot;
	unsigned nslots;
	uint64_t tick;
	int init;
};

/* <src> (<nfiles> entries, copied; their paths borrowed) opened through at most <nslots>
 * descriptors at once. 0 or -ENOMEM. */
int xfer_sources_init(struct xfer_sources *s, const struct xfer_source *src, uint32_t nfiles,
		      unsigned nslots);
/* Files <nfiles> onwards (a part of a streamed manifest), before any stream asks for them. 0 or
 * -ENOMEM. */
int xfer_sources_add(struct xfer_sources *s, const struct xfer_source *src, uint32_t n);
void xfer_sources_free(struct xfer_sources *s);

/*
 * Hold file <f>: its descriptor (or -1) and its memory, valid until xfer_sources_put(). Memory
 * and given descriptors are handed out as they are; a file named by path is opened now unless
 * it is in the set, waiting for a slot when every one is held. 0, or -errno with the reason
 * in <err> (-ESTALE: the file changed since the manifest was made).
 */
int xfer_sources_get(struct xfer_sources *s, uint32_t f, struct xfer_open *out, char *err,
		     size_t errlen);
void xfer_sources_put(struct xfer_sources *s, uint32_t f);

/* Open <path> for reading: as given, or beneath <dirfd> (no symlink followed) when >= 0. */
int xfer_source_open(int dirfd, const char *path);

#endif
