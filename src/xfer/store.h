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
 * A small file sent whole in a batch skips all of this (xfer_store_put_whole): it is written
 * into a temporary file, renamed into place unsynced and then counted as in place; the
 * receiver syncs the file system once before DONE. A batch's files are either in place whole
 * or not at their final name at all, so a resumed transfer finds them in place or sends them
 * again. An end-game copy of such a file, sent as a CHUNK on another link while its batch is
 * written, creates a part and state for it all the same; xfer_store_finish, finding the file
 * in place, removes them when this transfer created them, so nothing is left after DONE.
 *
 * Descriptors are held only while a file is being received: opening a manifest's files
 * (xfer_store_open) reads what is there and creates nothing, so a refused manifest leaves
 * nothing behind and a manifest of many files costs no descriptor per file. The part and its
 * state are created and locked (flock on the state: one writer at a time per file, across
 * processes) when the first chunk arrives (xfer_store_acquire), and closed, the lock let go,
 * once every chunk is there and no one writes (xfer_store_release). Until FINISH, then, the
 * complete part is nobody's: another transfer of the same file may resume it (finding every
 * chunk done, it writes nothing) and complete it, or the sweep may remove it. So the part's
 * device and inode are recorded when it is first opened, and every later acquire, the one in
 * xfer_store_finish too, opens it without creating it and checks that it is the same file:
 * one that vanished or was replaced is refused (-ESTALE: send again), never created afresh
 * and renamed into place with chunks it does not hold.
 *
 * Only what a transfer created is removed by it (xfer_store_discard): a part it found, even
 * one with no chunk done, may be another transfer's, being written; and it is removed by
 * name only while the lock is held, so the name is still that file's.
 *
 * Modes: a file gets the sender's permission bits masked by 0777 and this process's umask:
 * never setuid, setgid or sticky, never more open than the receiver would create.
 *
 * Chunk ownership: the state on disk, not a transfer's memory, says which chunks are verified.
 * A transfer's done[] is a snapshot (taken when its manifest arrived, and its own chunks since),
 * and other transfers of the same file may lock the part in between, above all once it is
 * complete and let go. So a writer, once it holds the lock and before a byte is written to
 * the part, asks the state (xfer_store_verified): a chunk flagged done whose bytes match its
 * recorded hash is never written again, whoever verified it; the copy is read off the wire
 * and answered as a duplicate, and the chunk counted with the hash on disk (if that is not
 * what this transfer's source holds, its whole hash differs at FINISH). A chunk is flagged
 * (xfer_store_record) before its writer lets go of the lock.
 *
 * Within one transfer the caller counts the writers of each chunk (writers[], under its
 * lock) and flags a chunk that ever had two at once (multi[]): bytes are received into the
 * part at once, so a second writer could change a chunk after the first one's bytes were
 * verified. xfer_store_finish re-hashes every flagged chunk, and every chunk whose flag or
 * hash in the state is not what this transfer verified; a chunk that no longer matches is
 * marked missing and the file refused: what is renamed into place is what was verified.
 * A whole hash that differs at FINISH discards the part only when this transfer created it:
 * one it found may be another's, complete and waiting for its own FINISH.
 */
#ifndef ACCELNET_XFER_STORE_H
#define ACCELNET_XFER_STORE_H

#include "xfer/wire.h"

#include <pthread.h>
#include <stdint.h>

#define XFER_STORE_DIR XFER_STATE_DIR

struct xfer_store_file {
	int part_fd, state_fd; /* -1 unless acquired */
	uint64_t size;
	uint32_t nchunks, chunk_size, mode;
	uint32_t ndone;
	uint64_t mtime_ns;
	uint64_t reserve; /* bytes the part still needs on disk, as found by xfer_store_open */
	int in_place;	  /* already complete at its final path (acquired: part_fd and map are that
			     file) */
	uint64_t *hashes; /* as verified on arrival; one allocation with the three below */
	uint8_t *done;
	uint8_t *writers; /* per chunk: connections receiving into it now (caller's lock) */
	uint8_t *multi;	  /* per chunk: had two writers at once; re-hashed before the rename */
	unsigned busy;	  /* writers of all chunks (caller's lock) */
	int pinned;  /* acquired for good (a bcast relay sends from the map): release is a no-op */
	int known;   /* the part was opened once: part_dev and part_ino say which file it is */
	int created; /* this transfer created the state (and the part): discard may remove them */
	uint64_t part_dev, part_ino;
	uint8_t *map; /* the part, mapped shared while acquired: read to re-hash chunks, and by a
			 bcast relay; chunks are written with pwrite (receiver.c says why) */
	char id[33];
	char *path; /* borrowed from the manifest */
	int finished;
};

/*
 * Look at file <idx> of <m> under the directory <dirfd>: in place already, or a part to
 * resume (chunks found done are re-verified before they count), or nothing yet. Creates
 * nothing and keeps no descriptor. f->reserve is what the part still needs on disk: the
 * caller checks it against the free space (and what other transfers reserved). <skip> says
 * what the caller found missing already, so that a tree of thousands of new files is not looked
 * for file by file (XFER_STORE_*). 0, or -errno with *why (-EBUSY: another transfer of the same
 * file is running).
 */
#define XFER_STORE_NOT_THERE 1u /* skip: the file's directory does not exist */
#define XFER_STORE_NO_PARTS 2u	/* skip: the directory of partial files does not exist */
int xfer_store_open(int dirfd, const struct xfer_manifest *m, uint32_t idx, unsigned skip,
		    struct xfer_store_file *f, const char **why);
/* Create (or open) the part and its state and lock them: before a chunk is received.
 * Once the part is known (opened before), it is opened, never created, and must be the same
 * file. Idempotent. 0, or -errno with *why (-EBUSY: another transfer holds the file; -ESTALE:
 * the part vanished or was replaced). */
int xfer_store_acquire(int dirfd, struct xfer_store_file *f, const char **why);
/* Map the acquired part (read only) unless it is: acquire does not, since chunks are written
 * with pwrite; re-hashing a chunk and a bcast relay read the map. Safe from several writers
 * of one file at once. 0 or -errno. */
int xfer_store_map(struct xfer_store_file *f);
/* Unmap and close what acquire opened (the state lock goes too). */
void xfer_store_release(struct xfer_store_file *f);
/* Remove the part and state when this transfer created them and no chunk of them is done (a
 * refused transfer leaves nothing behind), while still holding the lock; then release. A file
 * this transfer did not create, or does not hold now, is left alone. */
void xfer_store_discard(int dirfd, struct xfer_store_file *f);
void xfer_store_close(struct xfer_store_file *f);

/*
 * Where chunk <k> lives in the map, once mapped (to read it: callers write its bytes to f->part_fd
 * at k * chunk_size with pwrite, so a full disk fails that write, never raises SIGBUS). The file
 * must be acquired. Once the bytes match <hash>, xfer_store_record() writes the state (safe from
 * several threads for different chunks: 0 or -errno), then xfer_store_mark(), under the caller's
 * lock, counts the chunk.
 */
static inline uint8_t *xfer_store_chunk(const struct xfer_store_file *f, uint32_t k)
{
	return f->map + (uint64_t)k * f->chunk_size;
}
/* The length of chunk <k>: chunk_size, less for the last one. */
static inline uint32_t xfer_store_chunk_len(const struct xfer_store_file *f, uint32_t k)
{
	uint64_t off = (uint64_t)k * f->chunk_size;
	return (uint32_t)(f->size - off < f->chunk_size ? f->size - off : f->chunk_size);
}
int xfer_store_record(struct xfer_store_file *f, uint32_t k, uint64_t hash);
/* Whether chunk <k> is verified in the part as it is now: flagged done in the state and its
 * bytes matching the hash recorded there (then in *hash). Call while holding the file (as a
 * writer of the chunk) and before receiving into it: a chunk some transfer verified is not
 * written again. 1, 0, or -errno. */
int xfer_store_verified(struct xfer_store_file *f, uint32_t k, uint64_t *hash);
/* Returns 1 when the chunk was not counted yet (two copies may arrive at once); a chunk
 * counted already keeps the hash it was counted with. */
int xfer_store_mark(struct xfer_store_file *f, uint32_t k, uint64_t hash);

/* XXH3-128 over the chunk hashes of a file, in order, as the manifest's whole hash. */
void xfer_whole_hash(const uint64_t *hashes, uint32_t n, uint8_t out[16]);

/*
 * Complete a file (one in place already: its whole hash compared, and a part this transfer
 * created for it anyway removed): every chunk there (chunks flagged multi, or whose state on disk
 * is not what this transfer verified, are re-hashed first: -EAGAIN with *bad_chunk set to the first
 * that was overwritten; each such is then marked missing), the whole hash equal
 * to <whole>, data fsync'd, renamed to its path under <dirfd> (parents created; no component
 * followed through a symlink), the state removed. Call with no writers. 0, or -errno with *why
 * (-EBADMSG: the whole hash differs; the part is then discarded, when this transfer created
 * it, so the next try starts anew; -ESTALE: the part is gone or is another file, see above;
 * -EBUSY: another transfer holds it). The files of one FINISH share <dirs>: the directory of
 * partial files and the last file's directory stay open, so a tree's files, which arrive in
 * order, have their directories opened once, not once a file.
 */
struct xfer_store_dirs {
	int state_fd;			/* DIR/.accelnet-xfer, or -1 */
	int parent_fd;			/* the directory of the last file completed, or -1 */
	char parent[XFER_PATH_MAX + 1]; /* its path beneath DIR */
};
#define XFER_STORE_DIRS_INIT                                                                       \
	{                                                                                          \
		.state_fd = -1, .parent_fd = -1                                                    \
	}
int xfer_store_finish(int dirfd, struct xfer_store_file *f, const uint8_t whole[16],
		      struct xfer_store_dirs *dirs, uint32_t *bad_chunk, const char **why);
/*
 * A batched file (one chunk, verified, its bytes in <data>): written whole into a new file in
 * the directory of partial files (ID.SEQ.tmp, a name no other writer uses, created with its
 * mode), given its time, closed and renamed to its path (parents created as for xfer_store_finish,
 * sharing <dirs>). Nothing is fsync'd here: the receiver syncs the file system once before it
 * answers DONE (docs/xfer.md, durability). No state file and no lock: a writer killed before the
 * rename leaves only the .tmp file, which the sweep removes; the final name only ever holds a whole
 * file. 0, or -errno with *why (the .tmp removed).
 */
int xfer_store_put_whole(int dirfd, struct xfer_store_file *f, const uint8_t *data,
			 struct xfer_store_dirs *dirs, const char **why);
/* Close what xfer_store_finish kept open in <dirs> (the directories files went to). */
void xfer_store_dirs_close(struct xfer_store_dirs *dirs);

/*
 * Remove the parts (and states) under <dirfd> that nobody holds and that neither changed for
 * <max_age_s> seconds: transfers abandoned rather than interrupted; and batched files left
 * before their rename (ID.SEQ.tmp) as old. 0 or -errno; the count
 * in *removed.
 */
int xfer_store_sweep(int dirfd, uint64_t max_age_s, unsigned *removed);

#endif
