/*
 * store.c - part files, their state, and the final rename (see store.h).
 */
#include "xfer/store.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation per file */
#include <xxhash.h>

static int open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC),
	    .mode = (flags & O_CREAT) ? mode : 0,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	return fd < 0 ? -errno : (int)fd;
}

void xfer_whole_hash(const uint64_t *hashes, uint32_t n, uint8_t out[16])
{
	XXH3_state_t st;
	XXH3_128bits_reset(&st);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t le[8];
		wire_put64(le, hashes[i]);
		XXH3_128bits_update(&st, le, sizeof(le));
	}
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
	memcpy(out, c.digest, 16);
}

static void file_id(const struct xfer_manifest *m, const struct xfer_file *fi, char out[33])
{
	uint8_t tail[8 + 4 + 8 + 4];
	wire_put64(tail, fi->size);
	wire_put32(tail + 8, fi->mode);
	wire_put64(tail + 12, fi->mtime_ns);
	wire_put32(tail + 20, m->chunk_size);
	XXH3_state_t st;
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, fi->path, strlen(fi->path) + 1);
	XXH3_128bits_update(&st, tail, sizeof(tail));
	XXH128_hash_t h = XXH3_128bits_digest(&st);
	snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64,
		 (unsigned long long)h.low64);
}

/* Re-hash the chunks the state says are done; keep those that still match. */
static int state_load(struct xfer_store_file *f)
{
	size_t hb = (size_t)f->nchunks * 8;
	uint8_t *raw = malloc(hb + f->nchunks + 1);
	int rc = 0;
	if (!raw) {
		rc = -ENOMEM;
		goto out;
	}
	/* flags are written one by one, so the file may end early: what is missing is not done */
	memset(raw, 0, hb + f->nchunks);
	ssize_t n = pread(f->state_fd, raw, hb + f->nchunks, 0);
	if (n < 0)
		goto out;
	for (uint32_t k = 0; k < f->nchunks; k++) {
		if (raw[hb + k] != 1)
			continue;
		uint64_t want = wire_get64(raw + 8 * (size_t)k);
		if (XXH3_64bits(xfer_store_chunk(f, k), xfer_store_chunk_len(f, k)) != want)
			continue;
		f->hashes[k] = want;
		f->done[k] = 1;
		f->ndone++;
	}
out:
	free(raw);
	return rc;
}

static const char *const part_gone =
    "the partial file is gone (completed by another transfer of the same "
    "file, or removed as abandoned); send again";

/* DIR/.accelnet-xfer/ID.EXT, opened with O_RDWR and <flags> (O_CREAT...): the descriptor, or
 * -errno with *why. */
static int open_store_file(int dirfd, const char *id, const char *ext, int flags, const char **why)
{
	char name[80];
	snprintf(name, sizeof(name), XFER_STORE_DIR "/%s.%s", id, ext);
	int fd = open_beneath(dirfd, name, O_RDWR | O_NOFOLLOW | flags, 0600);
	if (fd < 0)
		*why = "cannot open a partial file or its state";
	return fd;
}

/* The part just opened: remember which file it is, or check it is the one remembered. 0, or
 * -ESTALE with *why. */
static int part_ident(struct xfer_store_file *f, struct stat *out, const char **why)
{
	struct stat st;
	if (!out)
		out = &st;
	if (fstat(f->part_fd, out) < 0) {
		*why = "cannot stat a partial file";
		return -errno;
	}
	if (!f->known) {
		f->part_dev = (uint64_t)out->st_dev;
		f->part_ino = (uint64_t)out->st_ino;
		f->known = 1;
	} else if (f->part_dev != (uint64_t)out->st_dev || f->part_ino != (uint64_t)out->st_ino) {
		*why = part_gone;
		return -ESTALE;
	}
	return 0;
}

/* This process's umask, read once without changing it (umask(2) would, for every thread). */
static mode_t umask_value = 022;
static void umask_read(void)
{
	FILE *st = fopen("/proc/self/status", "re");
	char line[128];
	unsigned v;
	while (st && fgets(line, sizeof(line), st))
		if (sscanf(line, "Umask: %o", &v) == 1)
			umask_value = (mode_t)v;
	if (st)
		fclose(st);
}

static uint32_t mode_sanitise(uint32_t mode)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, umask_read);
	return mode & 0777 & ~(uint32_t)umask_value; /* 0 stays 0: the sender's file had no bits */
}

/*
 * The file is already at its final path with the source's size and modification time (a
 * transfer run again): hash it instead of receiving it. FINISH still compares the whole hash,
 * so a file changed behind an unchanged time is reported, not trusted.
 */
static int in_place(int dirfd, const struct xfer_file *fi, struct xfer_store_file *f)
{
	struct stat st;
	if (!fi->mtime_ns)
		return 0;
	int fd = open_beneath(dirfd, fi->path, O_RDONLY | O_NOFOLLOW, 0);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != fi->size ||
	    (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec !=
		fi->mtime_ns) {
		close(fd);
		return 0;
	}
	uint8_t *map = NULL;
	if (f->size) {
		map = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED) {
			close(fd);
			return 0;
		}
	}
	for (uint32_t k = 0; k < f->nchunks; k++) {
		f->hashes[k] =
		    XXH3_64bits(map + (uint64_t)k * f->chunk_size, xfer_store_chunk_len(f, k));
		f->done[k] = 1;
	}
	if (map)
		munmap(map, f->size);
	close(fd);
	f->ndone = f->nchunks;
	f->in_place = 1;
	return 1;
}

/* A part left by an earlier run: the chunks its state says are done, re-verified. Nothing
 * is created; -EBUSY when another process holds it. */
static int resume_load(int dirfd, struct xfer_store_file *f, const char **why)
{
	int rc = 0;
	f->state_fd = open_store_file(dirfd, f->id, "state", 0, why);
	if (f->state_fd < 0)
		return f->state_fd == -ENOENT ? 0 : f->state_fd;
	if (flock(f->state_fd, LOCK_EX | LOCK_NB) < 0) {
		*why = "another transfer of this file is in progress";
		rc = -EBUSY;
		goto out;
	}
	f->part_fd = open_store_file(dirfd, f->id, "part", 0, why);
	struct stat st;
	if (f->part_fd < 0 || fstat(f->part_fd, &st) < 0 || (uint64_t)st.st_size != f->size ||
	    !f->size)
		goto out; /* nothing usable: received anew */
	if (part_ident(f, NULL, why))
		goto out;
	f->map = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->part_fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		goto out;
	}
	if ((rc = state_load(f)))
		*why = "out of memory";
	uint64_t have = (uint64_t)st.st_blocks * 512;
	f->reserve = f->size > have ? f->size - have : 0;
out:
	xfer_store_release(f);
	return rc;
}

int xfer_store_open(int dirfd, const struct xfer_manifest *m, uint32_t idx, unsigned skip,
		    struct xfer_store_file *f, const char **why)
{
	const struct xfer_file *fi = &m->files[idx];
	int rc;
	memset(f, 0, sizeof(*f));
	f->part_fd = f->state_fd = -1;
	f->size = fi->size;
	f->nchunks = fi->nchunks;
	f->chunk_size = m->chunk_size;
	f->mode = mode_sanitise(fi->mode);
	f->mtime_ns = fi->mtime_ns;
	f->path = fi->path;
	f->reserve = fi->size;
	file_id(m, fi, f->id);
	size_t n = f->nchunks ? f->nchunks : 1;
	/* one block a file (a tree has many): hashes, then done, writers and multi */
	f->hashes = calloc(n, sizeof(uint64_t) + 3);
	if (f->hashes) {
		f->done = (uint8_t *)(f->hashes + n);
		f->writers = f->done + n;
		f->multi = f->writers + n;
	}
	if (!f->hashes) {
		*why = "out of memory";
		rc = -ENOMEM;
		goto fail;
	}
	if (!(skip & XFER_STORE_NOT_THERE) && in_place(dirfd, fi, f)) {
		f->reserve = 0;
		return 0;
	}
	if (!(skip & XFER_STORE_NO_PARTS) && (rc = resume_load(dirfd, f, why)))
		goto fail;
	return 0;
fail:
	xfer_store_close(f);
	return rc;
}

int xfer_store_acquire(int dirfd, struct xfer_store_file *f, const char **why)
{
	int rc;
	if (f->part_fd >= 0)
		return 0;
	if (f->in_place) { /* a relay sends the file from where it is */
		if ((rc = f->part_fd = open_beneath(dirfd, f->path, O_RDONLY | O_NOFOLLOW, 0)) <
		    0) {
			*why = "cannot open the file in place";
			goto fail;
		}
		f->map = f->size ? mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->part_fd, 0) : NULL;
		if (f->map == MAP_FAILED) {
			f->map = NULL;
			*why = "cannot map the file in place";
			rc = -errno;
			goto fail;
		}
		return 0;
	}
	/* a part opened before is opened again, never created: see store.h */
	int create = !f->known, made = 0;
	f->state_fd = open_store_file(dirfd, f->id, "state", create ? O_CREAT | O_EXCL : 0, why);
	if (f->state_fd == -ENOENT && create) { /* the directory for partial files, made once */
		if (mkdirat(dirfd, XFER_STORE_DIR, 0700) < 0 && errno != EEXIST) {
			*why = "cannot create the directory for partial files";
			rc = -errno;
			goto fail;
		}
		f->state_fd = open_store_file(dirfd, f->id, "state", O_CREAT | O_EXCL, why);
	}
	made = f->state_fd >= 0 && create;
	if (f->state_fd == -EEXIST)
		f->state_fd = open_store_file(dirfd, f->id, "state", 0, why);
	if ((rc = f->state_fd) < 0)
		goto gone;
	if (flock(f->state_fd, LOCK_EX | LOCK_NB) < 0) {
		*why = "another transfer of this file is in progress";
		rc = -EBUSY;
		goto fail;
	}
	if ((rc = f->part_fd = open_store_file(dirfd, f->id, "part", create ? O_CREAT : 0, why)) <
	    0)
		goto gone;
	struct stat st;
	if ((rc = part_ident(f, &st, why)))
		goto fail;
	if (made)
		f->created = 1; /* the state is ours, and so is whatever the part holds */
	/* a sparse part of the final size: the space was checked (and reserved) by the caller;
	 * fallocate would reserve it too, but on tmpfs it zeroes every page first */
	if ((uint64_t)st.st_size != f->size && ftruncate(f->part_fd, (off_t)f->size) < 0) {
		*why = "cannot size a partial file";
		rc = -errno;
		goto fail;
	}
	return 0;
gone:
	if (rc == -ENOENT && !create) {
		*why = part_gone;
		rc = -ESTALE;
	}
fail:
	xfer_store_release(f);
	return rc;
}

int xfer_store_map(struct xfer_store_file *f)
{
	if (__atomic_load_n(&f->map, __ATOMIC_ACQUIRE) || !f->size)
		return 0;
	uint8_t *map = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->part_fd, 0), *none = NULL;
	if (map == MAP_FAILED)
		return -errno;
	/* writers of other chunks of the file may map it at the same moment: one map stays */
	if (!__atomic_compare_exchange_n(&f->map, &none, map, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		munmap(map, f->size);
	return 0;
}

void xfer_store_release(struct xfer_store_file *f)
{
	if (f->pinned)
		return;
	if (f->map)
		munmap(f->map, f->size);
	f->map = NULL;
	if (f->part_fd >= 0)
		close(f->part_fd);
	if (f->state_fd >= 0)
		close(f->state_fd); /* drops the lock */
	f->part_fd = f->state_fd = -1;
}

/* Remove the part and state by name: only while holding the lock, so the names are still the
 * files this transfer opened (the part checked by its inode). */
static void unlink_held(int dirfd, struct xfer_store_file *f)
{
	char name[80];
	struct stat st;
	if (f->state_fd < 0 || f->part_fd < 0)
		return;
	snprintf(name, sizeof(name), XFER_STORE_DIR "/%s.part", f->id);
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    (uint64_t)st.st_dev != f->part_dev || (uint64_t)st.st_ino != f->part_ino)
		return;
	unlinkat(dirfd, name, 0);
	snprintf(name, sizeof(name), XFER_STORE_DIR "/%s.state", f->id);
	unlinkat(dirfd, name, 0);
}

void xfer_store_discard(int dirfd, struct xfer_store_file *f)
{
	f->pinned = 0;
	if (f->created && !f->ndone && !f->in_place) /* in place: part_fd is the final file */
		unlink_held(dirfd, f);
	xfer_store_release(f);
}

void xfer_store_close(struct xfer_store_file *f)
{
	f->pinned = 0;
	xfer_store_release(f);
	free(f->hashes); /* done, writers and multi are in its block */
	f->hashes = NULL;
	f->done = f->writers = f->multi = NULL;
}

int xfer_store_record(struct xfer_store_file *f, uint32_t k, uint64_t hash)
{
	/* the data is in the page cache already (received into the map); the hash, then the
	 * flag: a flag always follows its data and hash, so a killed receiver resumes right */
	uint8_t le[8], one = 1;
	wire_put64(le, hash);
	if (pwrite(f->state_fd, le, 8, (off_t)k * 8) != 8 ||
	    pwrite(f->state_fd, &one, 1, (off_t)f->nchunks * 8 + k) != 1)
		return errno ? -errno : -EIO;
	return 0;
}

int xfer_store_mark(struct xfer_store_file *f, uint32_t k, uint64_t hash)
{
	if (f->done[k])
		return 0; /* the first verified copy's hash stands: a later writer's bytes are
			     re-hashed against it at FINISH (multi[]) */
	f->hashes[k] = hash;
	f->done[k] = 1;
	f->ndone++;
	return 1;
}

/*
 * Open the parent directory of <path> beneath <dirfd>, one component at a time, creating the
 * missing ones: no component is ever resolved through a symlink.
 */
static int open_parent(int dirfd, const char *path, const char **base)
{
	char buf[XFER_PATH_MAX + 1];
	snprintf(buf, sizeof(buf), "%s", path);
	int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return -errno;
	char *comp = buf, *slash;
	while ((slash = strchr(comp, '/'))) {
		*slash = 0;
		if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
			int err = -errno;
			close(cur);
			return err;
		}
		int next = open_beneath(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
		close(cur);
		if (next < 0)
			return next;
		cur = next;
		comp = slash + 1;
	}
	*base = path + (comp - buf);
	return cur;
}

int xfer_store_verified(struct xfer_store_file *f, uint32_t k, uint64_t *hash)
{
	uint8_t flag = 0, le[8];
	ssize_t n = pread(f->state_fd, &flag, 1, (off_t)f->nchunks * 8 + k);
	if (n < 0)
		return -errno;
	if (n != 1 || flag != 1)
		return 0;
	if (pread(f->state_fd, le, 8, (off_t)k * 8) != 8)
		return errno ? -errno : -EIO;
	*hash = wire_get64(le);
	int rc = xfer_store_map(f);
	if (rc)
		return rc;
	return XXH3_64bits(xfer_store_chunk(f, k), xfer_store_chunk_len(f, k)) == *hash;
}

/*
 * Before the rename, while holding the lock: re-hash the chunks that had two writers at once,
 * and those whose flag or hash in the state is not what this transfer verified (someone else
 * wrote the state since: nothing should, see store.h, but what is renamed is checked, not
 * assumed). 0, or -EAGAIN with the first chunk whose bytes no longer match what was verified
 * (each such chunk is marked missing, in memory and in the state).
 */
static int chunks_check(struct xfer_store_file *f, uint32_t *bad_chunk)
{
	size_t hb = (size_t)f->nchunks * 8;
	uint8_t *raw = malloc(hb + f->nchunks + 1);
	int rc = 0;
	if (raw) {
		memset(raw, 0, hb + f->nchunks);
		if (pread(f->state_fd, raw, hb + f->nchunks, 0) < 0)
			memset(raw, 0, hb + f->nchunks); /* unreadable: every chunk is re-hashed */
	}
	for (uint32_t k = 0; k < f->nchunks; k++) {
		int same =
		    raw && raw[hb + k] == 1 && wire_get64(raw + 8 * (size_t)k) == f->hashes[k];
		if (!f->done[k] || (same && !f->multi[k]))
			continue;
		f->multi[k] = 0;
		if (!xfer_store_map(f) &&
		    XXH3_64bits(xfer_store_chunk(f, k), xfer_store_chunk_len(f, k)) == f->hashes[k])
			continue;
		uint8_t zero = 0;
		f->done[k] = 0;
		f->ndone--;
		ssize_t n = pwrite(f->state_fd, &zero, 1, (off_t)f->nchunks * 8 + k);
		(void)
		    n; /* if the flag stays, a resume re-hashes the chunk and finds it bad anyway */
		if (!rc)
			*bad_chunk = k;
		rc = -EAGAIN;
	}
	free(raw);
	return rc;
}

/* The parent directory of <path>, from <dirs> when it is the one the last file went to, else
 * opened (open_parent) and kept there instead: the descriptor, which <dirs> owns, or -errno. */
static int dirs_parent(int dirfd, struct xfer_store_dirs *dirs, const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	size_t len = slash ? (size_t)(slash - path) : 0;
	if (dirs->parent_fd >= 0 && strlen(dirs->parent) == len &&
	    !memcmp(dirs->parent, path, len)) {
		*base = slash ? slash + 1 : path;
		return dirs->parent_fd;
	}
	if (dirs->parent_fd >= 0)
		close(dirs->parent_fd);
	dirs->parent_fd = -1;
	int fd = open_parent(dirfd, path, base);
	if (fd >= 0 && len < sizeof(dirs->parent)) {
		memcpy(dirs->parent, path, len);
		dirs->parent[len] = 0;
		dirs->parent_fd = fd;
	} else if (fd >= 0) {
		close(fd); /* cannot happen: paths are at most XFER_PATH_MAX */
		fd = -ENAMETOOLONG;
	}
	return fd;
}

/*
 * A file put in place whole by a batch while a CHUNK copy of it (the sender's end game sends
 * copies as chunks) was being written: the copy's writer created a part and state, which the
 * file, in place already, never goes through. They are this transfer's (created), so they are
 * removed, by name under the lock as for a discard; FINISH calls this with no writer left,
 * before it answers DONE, so a sender that sees DONE leaves nothing in the directory of partial
 * files. A part another transfer holds now (it resumed it: -EBUSY) or replaced is left to it.
 */
static void part_drop(int dirfd, struct xfer_store_file *f)
{
	const char *why;
	if (!f->created)
		return;
	if (f->part_fd < 0) { /* let go once complete (else its writer's lock is still held) */
		f->state_fd = open_store_file(dirfd, f->id, "state", 0, &why);
		if (f->state_fd >= 0 && flock(f->state_fd, LOCK_EX | LOCK_NB) == 0)
			f->part_fd = open_store_file(dirfd, f->id, "part", 0, &why);
	}
	unlink_held(dirfd, f); /* only with both open, and the part's name still that file's */
	xfer_store_release(f);
	f->created = 0;
}

int xfer_store_finish(int dirfd, struct xfer_store_file *f, const uint8_t whole[16],
		      struct xfer_store_dirs *dirs, uint32_t *bad_chunk, const char **why)
{
	char name[64];
	uint8_t got[16];
	int rc = 0, pfd = -1, sd = -1;
	if (f->ndone != f->nchunks) {
		*why = "chunks are missing";
		return -EAGAIN;
	}
	xfer_whole_hash(f->hashes, f->nchunks, got);
	if (f->in_place) {
		part_drop(dirfd, f);
		if (memcmp(got, whole, 16)) {
			*why =
			    "the file at the destination has the source's size and time but other "
			    "content; remove it to transfer it again";
			return -EBADMSG;
		}
		f->finished = 1;
		return 0;
	}
	if (f->nchunks && !f->known) { /* every chunk done, yet no part was ever opened */
		*why = part_gone;
		return -ESTALE;
	}
	if ((rc = xfer_store_acquire(dirfd, f, why)))
		return rc;
	if ((rc = chunks_check(f, bad_chunk))) {
		*why = "a chunk was overwritten after it was verified; send again to resume";
		goto out;
	}
	snprintf(name, sizeof(name), XFER_STORE_DIR "/%s.part", f->id);
	if (memcmp(got, whole, 16)) {
		/* a part this transfer found may hold another transfer's verified chunks: left */
		*why =
		    f->created
			? "whole-file hash differs (the source changed during the transfer?)"
			: "whole-file hash differs from that of the partial file found (the source "
			  "changed, or another transfer of a different file of the same name, size "
			  "and time is running?)";
		if (f->created)
			unlink_held(dirfd, f);
		xfer_store_release(f);
		return -EBADMSG;
	}
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT},
				    {.tv_sec = (time_t)(f->mtime_ns / 1000000000u),
				     .tv_nsec = (long)(f->mtime_ns % 1000000000u)}};
	if (f->mtime_ns)
		futimens(f->part_fd, times); /* the source's time: a later run finds it in place */
	if (fchmod(f->part_fd, f->mode) < 0 || fsync(f->part_fd) < 0) {
		*why = "cannot sync the file";
		rc = -errno;
		goto out;
	}
	const char *base;
	pfd = dirs_parent(dirfd, dirs, f->path, &base);
	if (pfd < 0) {
		*why = "cannot create the file's directory (or it leads outside the directory)";
		rc = pfd;
		goto out;
	}
	sd = dirs->state_fd >= 0 ? dirs->state_fd
				 : open_beneath(dirfd, XFER_STORE_DIR, O_RDONLY | O_DIRECTORY, 0);
	dirs->state_fd = sd >= 0 ? sd : -1;
	if (sd < 0 || renameat(sd, name + sizeof(XFER_STORE_DIR), pfd, base) < 0) {
		rc = -errno;
		*why = "cannot move the file into place";
	} else {
		fsync(pfd);
		snprintf(name, sizeof(name), "%s.state", f->id);
		unlinkat(sd, name, 0);
		f->finished = 1;
	}
out:
	xfer_store_release(f);
	return rc;
}

/* Temporary names of batched files: ID.SEQ.tmp, SEQ counted per process (O_EXCL settles a
 * clash with another process). */
static _Atomic unsigned put_seq;
#define TMP_NAME_LEN (32 + 1 + 8 + sizeof(".tmp") - 1)

int xfer_store_put_whole(int dirfd, struct xfer_store_file *f, const uint8_t *data,
			 struct xfer_store_dirs *dirs, const char **why)
{
	char name[64];
	int rc = 0, fd = -1;
	if (dirs->state_fd < 0) {
		if (mkdirat(dirfd, XFER_STORE_DIR, 0700) < 0 && errno != EEXIST) {
			*why = "cannot create the directory for partial files";
			return -errno;
		}
		dirs->state_fd =
		    open_beneath(dirfd, XFER_STORE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
		if (dirs->state_fd < 0) {
			rc = dirs->state_fd;
			dirs->state_fd = -1;
			*why = "cannot open the directory for partial files";
			return rc;
		}
	}
	for (int tries = 0; fd < 0 && tries < 16; tries++) {
		snprintf(name, sizeof(name), "%s.%08x.tmp", f->id, atomic_fetch_add(&put_seq, 1));
		/* created with its mode: f->mode is masked by the umask already, so no fchmod */
		fd = openat(dirs->state_fd, name,
			    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)f->mode);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		*why = "cannot create a file in the directory for partial files";
		return -errno;
	}
	for (uint64_t at = 0; at < f->size;) {
		ssize_t w = write(fd, data + at, f->size - at);
		if (w <= 0) {
			rc = w < 0 ? -errno : -EIO;
			*why = rc == -ENOSPC ? "no space left" : "cannot write it";
			goto fail;
		}
		at += (uint64_t)w;
	}
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT},
				    {.tv_sec = (time_t)(f->mtime_ns / 1000000000u),
				     .tv_nsec = (long)(f->mtime_ns % 1000000000u)}};
	if (f->mtime_ns && futimens(fd, times) < 0) {
		rc = -errno;
		*why = "cannot set its time";
		goto fail;
	}
	close(fd);
	fd = -1;
	const char *base;
	int pfd = dirs_parent(dirfd, dirs, f->path, &base);
	if (pfd < 0) {
		rc = pfd;
		*why = "cannot create the file's directory (or it leads outside the directory)";
		goto fail;
	}
	if (renameat(dirs->state_fd, name, pfd, base) < 0) {
		rc = -errno;
		*why = "cannot move the file into place";
		goto fail;
	}
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlinkat(dirs->state_fd, name, 0);
	return rc;
}

void xfer_store_dirs_close(struct xfer_store_dirs *dirs)
{
	if (dirs->state_fd >= 0)
		close(dirs->state_fd);
	if (dirs->parent_fd >= 0)
		close(dirs->parent_fd);
	dirs->state_fd = dirs->parent_fd = -1;
	dirs->parent[0] = 0;
}

int xfer_store_sweep(int dirfd, uint64_t max_age_s, unsigned *removed)
{
	*removed = 0;
	int sd = open_beneath(dirfd, XFER_STORE_DIR, O_RDONLY | O_DIRECTORY, 0);
	if (sd < 0)
		return sd == -ENOENT ? 0 : sd;
	DIR *d = fdopendir(sd);
	if (!d) {
		close(sd);
		return -errno;
	}
	time_t now = time(NULL);
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		struct stat st;
		if (n == TMP_NAME_LEN && !strcmp(de->d_name + n - 4, ".tmp")) {
			/* a batched file whose writer was killed before its rename; judged by its
			 * ctime, since its mtime is the sender's (futimens) before the rename: a
			 * live writer's copy from an old source must not go under its rename */
			if (fstatat(sd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    (uint64_t)(now - st.st_ctime) > max_age_s &&
			    unlinkat(sd, de->d_name, 0) == 0)
				(*removed)++;
			continue;
		}
		if (n != 32 + sizeof(".state") - 1 || strcmp(de->d_name + 32, ".state"))
			continue;
		int fd = openat(sd, de->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		/* a part in use is locked; an old one nobody holds is abandoned */
		if (fstat(fd, &st) == 0 && (uint64_t)(now - st.st_mtime) > max_age_s &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0) {
			char part[64];
			snprintf(part, sizeof(part), "%.32s.part", de->d_name);
			struct stat pst;
			if (fstatat(sd, part, &pst, AT_SYMLINK_NOFOLLOW) < 0 ||
			    (uint64_t)(now - pst.st_mtime) > max_age_s) {
				unlinkat(sd, part, 0);
				unlinkat(sd, de->d_name, 0);
				(*removed)++;
			}
		}
		close(fd);
	}
	closedir(d);
	return 0;
}
