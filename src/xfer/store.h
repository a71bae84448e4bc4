/*
 * store.h - the receiver's files: where arriving chunks are kept until a file is whole.
 *
 * Each file of a manifest lives, until it is complete, in DIR/.accelnet-xfer/ID.part, with
 * DIR/.accelnet-xfer/ID.state beside it, where ID is a hash of the file's identity (path,
 * size, mode, mtime and chunk size). The state file holds, per chunk, the XXH3-64 of the bytes
 * written and a flag written after them; a transfer restarted with the same file finds its
 * part again, re-hashes the chunks flagged done, and asks only for the others. Only when every
 * chunk is there and the whole-file hash matches is the part fsync'd and renamed to its final
 * path, so a file never appears half-written. Final paths are resolved beneath DIR
 * (openat2 RESOLVE_BENEATH): a symlink inside DIR cannot lead a file out of it.
 *
 * A file found at its final path with the source's size and modification time (completed
 * files get the source's time) is hashed in place instead of received again.
 *
 * One sender at a time per file: the state file is locked (flock) while a session holds it.
 */
#ifndef ACCELNET_XFER_STORE_H
#define ACCELNET_XFER_STORE_H

#include "xfer/wire.h"

#include <pthread.h>
#include <stdint.h>

#define XFER_STORE_DIR XFER_STATE_DIR

struct xfer_store_file {
	int part_fd, state_fd;
	uint64_t size;
	uint32_t nchunks, chunk_size, mode;
	uint32_t ndone;
	uint64_t mtime_ns;
	int in_place; /* already complete at its final path: part_fd and map are that file */
	uint64_t *hashes; /* as verified on arrival */
	uint8_t *done;
	uint8_t *map; /* the part, mapped shared: chunks are received straight into it */
	char id[33];
	char *path; /* borrowed from the manifest */
	int finished;
};

/*
 * Open (or create) the part and state of file <idx> of <m> under the directory <dirfd>:
 * 0, or -errno with *why (-EBUSY: another transfer of the same file is running; -ENOSPC: the
 * file does not fit in the free space less *claimed, the bytes earlier files of the same
 * manifest still need, to which this file's are added). Chunks found done are re-verified
 * before they count. Space is checked, not reserved: a disk filled meanwhile by someone else
 * fails the receive of a chunk instead (see xfer_store_chunk).
 */
int xfer_store_open(int dirfd, const struct xfer_manifest *m, uint32_t idx, struct xfer_store_file *f,
		    uint64_t *claimed, const char **why);
void xfer_store_close(struct xfer_store_file *f);

/*
 * Where chunk <k> lives: callers receive its bytes straight into f->map + k * chunk_size
 * (one copy, from the socket to the page cache; page faults there run in parallel, unlike
 * writes, which the kernel serialises per file; and a fault that cannot be served, a full
 * disk, fails the receive with EFAULT instead of raising SIGBUS, since only the kernel
 * writes the map). Once the bytes match <hash>, xfer_store_record() writes the state (safe
 * from several threads for different chunks: 0 or -errno), then xfer_store_mark(), under
 * the caller's lock, counts the chunk.
 */
static inline uint8_t *xfer_store_chunk(const struct xfer_store_file *f, uint32_t k)
{
	return f->map + (uint64_t)k * f->chunk_size;
}
int xfer_store_record(struct xfer_store_file *f, uint32_t k, uint64_t hash);
/* Returns 1 when the chunk was not counted yet (two copies may arrive at once). */
int xfer_store_mark(struct xfer_store_file *f, uint32_t k, uint64_t hash);

/* XXH3-128 over the chunk hashes of a file, in order, as the manifest's whole hash. */
void xfer_whole_hash(const uint64_t *hashes, uint32_t n, uint8_t out[16]);

/*
 * Complete a file: every chunk there, the whole hash equal to <whole>, data fsync'd, renamed
 * to its path under <dirfd> (parents created), the state removed. 0, or -errno with *why
 * (-EBADMSG: the whole hash differs; the part is then discarded so the next try starts anew).
 */
int xfer_store_finish(int dirfd, struct xfer_store_file *f, const uint8_t whole[16], const char **why);

/*
 * Remove the parts (and states) under <dirfd> that nobody holds and that neither changed for
 * <max_age_s> seconds: transfers abandoned rather than interrupted. 0 or -errno; the count
 * in *removed.
 */
int xfer_store_sweep(int dirfd, uint64_t max_age_s, unsigned *removed);

#endif
