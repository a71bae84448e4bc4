/*
 * send.c - xfer_send(): items to a manifest and sources, then one engine run; the streamed
 * sender (xfer_send_begin/add/end, and xfer_send_paths over it), which sends the manifest in
 * parts as its caller lists files, so chunks of the files listed flow while a tree is still
 * walked; the expansion of paths (files and directory trees) into items; and, for a server
 * answering GET, the same streamed send of names resolved beneath its directory and never
 * outside (xfer_send_beneath).
 */
#include "xfer/send.h"
#include "accelnet/xfer.h"
#include "core/clock.h"
#include "xfer/engine.h"

#include <dirent.h>
#include <glob.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct list {
	struct xfer_item *v;
	unsigned n, cap;
};

/* Where a walk puts what it finds: <add>(<arg>, name, path) for each regular file. */
struct sink {
	int (*add)(void *arg, const char *name, const char *path);
	void *arg;
};

static int list_push(void *arg, const char *name, const char *path)
{
	struct list *l = arg;
	if (l->n == l->cap) {
		unsigned cap = l->cap ? 2 * l->cap : 16;
		struct xfer_item *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	struct xfer_item *it = &l->v[l->n];
	memset(it, 0, sizeof(*it));
	it->name = strdup(name);
	it->path = strdup(path);
	if (!it->name || !it->path) {
		free((char *)it->name);
		free((char *)it->path);
		return -ENOMEM;
	}
	l->n++;
	return 0;
}

/*
 * Add <path> as <name>: a regular file, or every regular file beneath a directory. The paths
 * given are followed when they are symlinks (as cp and rsync do); symlinks and special files
 * inside a tree are skipped, so a link loop cannot send us round for ever.
 */
static int walk(const struct sink *l, const char *path, const char *name, int top, char *bad,
		size_t badlen)
{
	struct stat st;
	if ((top ? stat(path, &st) : lstat(path, &st)) < 0) {
		snprintf(bad, badlen, "%s", path);
		return -errno;
	}
	if (S_ISREG(st.st_mode)) {
		int rc = l->add(l->arg, name, path);
		if (rc && !bad[0])
			snprintf(bad, badlen, "%s", path);
		return rc;
	}
	if (!top && !S_ISDIR(st.st_mode))
		return 0;
	if (!S_ISDIR(st.st_mode)) {
		snprintf(bad, badlen, "%s", path);
		return -EINVAL;
	}
	DIR *d = opendir(path);
	if (!d) {
		snprintf(bad, badlen, "%s", path);
		return -errno;
	}
	int rc = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		/* an entry's type as readdir gives it, where the file system gives one: a regular
		 * file is listed without an lstat of its own (a tree's files were looked at twice,
		 * here and again for the manifest) */
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (de->d_type != DT_UNKNOWN && de->d_type != DT_REG && de->d_type != DT_DIR))
			continue; /* symlinks and special files are skipped */
		char *p = NULL, *n = NULL;
		if (asprintf(&p, "%s/%s", path, de->d_name) < 0 ||
		    asprintf(&n, "%s/%s", name, de->d_name) < 0)
			rc = -ENOMEM;
		else if (de->d_type == DT_REG && (rc = l->add(l->arg, n, p)) && !bad[0])
			snprintf(bad, badlen, "%s", p);
		else if (de->d_type != DT_REG)
			rc = walk(l, p, n, 0, bad, badlen);
		free(p);
		free(n);
	}
	closedir(d);
	return rc;
}

/* Walk <paths> as xfer_items_from_paths names them, into <sink>. */
static int walk_paths(const struct sink *sink, const char *const *paths, unsigned n, const char *to,
		      char *bad, size_t badlen)
{
	int rc = 0;
	bad[0] = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		char buf[4096];
		snprintf(buf, sizeof(buf), "%s", paths[i]);
		size_t len = strlen(buf);
		while (len > 1 && buf[len - 1] == '/')
			buf[--len] = 0;
		const char *base = strrchr(buf, '/') ? strrchr(buf, '/') + 1 : buf;
		char *name = NULL;
		if (asprintf(&name, "%s%s%s", to ? to : "", to && n > 1 ? "/" : "",
			     to && n == 1 ? "" : base) < 0)
			return -ENOMEM;
		rc = walk(sink, buf, name, 1, bad, badlen);
		free(name);
	}
	return rc;
}

int xfer_items_from_paths(const char *const *paths, unsigned n, const char *to,
			  struct xfer_item **items, unsigned *nitems, char *bad, size_t badlen)
{
	struct list l = {0};
	struct sink sink = {.add = list_push, .arg = &l};
	int rc = walk_paths(&sink, paths, n, to, bad, badlen);
	if (rc) {
		xfer_items_free(l.v, l.n);
		return rc;
	}
	*items = l.v;
	*nitems = l.n;
	return 0;
}

void xfer_items_free(struct xfer_item *items, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		free((char *)items[i].name);
		free((char *)items[i].path);
	}
	free(items);
}

#define BENEATH_DEPTH_MAX 128

/* Every regular file beneath the open directory <dfd> (closed here), as <name>/... and
 * <path>/...; symlinks and special files are skipped. */
static int walk_beneath(const struct sink *l, int dfd, const char *path, const char *name,
			unsigned depth)
{
	if (depth > BENEATH_DEPTH_MAX) {
		close(dfd);
		return -ELOOP;
	}
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	int rc = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		struct stat st;
		/* an entry's type as readdir gives it, where the file system gives one: a regular
		 * file is listed without an lstat of its own (a tree's files were looked at twice,
		 * here and again for the manifest) */
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		char *p = NULL, *n = NULL;
		if (asprintf(&p, "%s/%s", path, de->d_name) < 0 ||
		    asprintf(&n, "%s/%s", name, de->d_name) < 0) {
			rc = -ENOMEM;
		} else if (S_ISREG(st.st_mode)) {
			rc = l->add(l->arg, n, p);
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				rc = walk_beneath(l, sub, p, n, depth + 1);
		}
		free(p);
		free(n);
	}
	closedir(d);
	return rc;
}

/*
 * Each of <names> beneath <dirfd>: its descriptor in fds[i] (a directory, kept for the walk) or
 * -1 (a file), all looked at before anything is sent, so a name that cannot be served fails the
 * GET before the first part. 0, or -errno with the reason in <err>.
 */
static int names_open(int dirfd, const char *const *names, unsigned n, int *fds, char *err,
		      size_t errlen)
{
	int rc = 0;
	for (unsigned i = 0; i < n; i++)
		fds[i] = -1;
	for (unsigned i = 0; i < n && !rc; i++) {
		/* no symlink is followed, as none is inside a tree: one could lead outside DIR, or
		 * to DIR itself or its partial files (XFER_STATE_DIR) */
		struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
				       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
						  RESOLVE_NO_MAGICLINKS};
		int fd = (int)syscall(SYS_openat2, dirfd, names[i], &how, sizeof(how));
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			rc = -errno;
			snprintf(
			    err, errlen, "'%s': %s", names[i],
			    rc == -EXDEV ? "leads outside the served directory"
			    : rc == -ELOOP
				? "is or goes through a symlink (get follows none: one could lead "
				  "outside the served directory or into its partial files)"
				: strerror(-rc));
			if (fd >= 0)
				close(fd);
		} else if (S_ISDIR(st.st_mode)) {
			fds[i] = fd;
		} else {
			close(fd);
			if (!S_ISREG(st.st_mode)) {
				rc = -EINVAL;
				snprintf(err, errlen, "'%s': neither a file nor a directory",
					 names[i]);
			}
		}
	}
	if (rc)
		for (unsigned i = 0; i < n; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	return rc;
}

/* What the manifest says of a file: stat'd by path, or opened beneath <dirfd> (no symlink
 * followed) and closed again when dirfd >= 0. Files are opened again as their chunks are
 * sent (source.h). 0 or -errno. */
static int source_stat(int dirfd, const char *path, struct stat *st)
{
	if (dirfd < 0)
		return stat(path, st) < 0 ? -errno : 0;
	int fd = xfer_source_open(dirfd, path), rc = 0;
	if (fd < 0 || fstat(fd, st) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	return rc;
}

int xfer_send(const struct xfer_send_opts *o, const struct xfer_item *items, unsigned n,
	      struct xfer_report *rep)
{
	return xfer_send_items(o, NULL, -1, items, n, rep);
}

int xfer_send_items(const struct xfer_send_opts *o, const struct xfer_adopt *ad, int dirfd,
		    const struct xfer_item *items, unsigned n, struct xfer_report *rep)
{
	struct xfer_manifest m = {
	    .chunk_size = (o->chunk_kib ? o->chunk_kib : XFER_SEND_CHUNK_KIB) * 1024u, .nfiles = n};
	struct xfer_source *src = calloc(n ? n : 1, sizeof(*src));
	struct xfer_engine *e = NULL;
	int rc = -ENOMEM;
	memset(rep, 0, sizeof(*rep));
	m.files = calloc(n ? n : 1, sizeof(*m.files));
	if (!src || !m.files)
		goto out;
	for (unsigned i = 0; i < n; i++)
		src[i].fd = -1;
	if (m.chunk_size < 4096 || m.chunk_size > XFER_DATA_MAX) {
		snprintf(rep->error, sizeof(rep->error), "chunk size must be 4 KiB to 64 MiB");
		rc = -EINVAL;
		goto out;
	}
	for (unsigned i = 0; i < o->nbcast; i++) {
		if (i == XFER_FWD_MAX) {
			snprintf(rep->error, sizeof(rep->error), "at most %d bcast hops",
				 XFER_FWD_MAX + 1);
			rc = -EINVAL;
			goto out;
		}
		m.fwd[m.nfwd++] = (char *)o->bcast[i];
	}
	for (unsigned i = 0; i < n; i++) {
		struct xfer_file *f = &m.files[i];
		const char *why;
		f->path = (char *)items[i].name;
		if (xfer_path_check(f->path, strlen(f->path), &why)) {
			snprintf(rep->error, sizeof(rep->error), "'%s': %s", f->path, why);
			rc = -EINVAL;
			goto out;
		}
		if (!items[i].path) {
			src[i].buf = items[i].buf;
			f->size = src[i].size = items[i].len;
			f->mode = 0644;
		} else {
			struct stat st;
			if ((rc = source_stat(dirfd, items[i].path, &st)) ||
			    (!S_ISREG(st.st_mode) && (rc = -EINVAL))) {
				snprintf(rep->error, sizeof(rep->error), "%s: %s", items[i].path,
					 rc == -EINVAL ? "not a regular file" : strerror(-rc));
				goto out;
			}
			f->size = src[i].size = (uint64_t)st.st_size;
			f->mode = st.st_mode & 07777;
			f->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u +
				      (uint64_t)st.st_mtim.tv_nsec;
			src[i].path = items[i].path;
			src[i].dirfd = dirfd;
			src[i].mtime_ns = f->mtime_ns;
			src[i].dev = (uint64_t)st.st_dev;
			src[i].ino = (uint64_t)st.st_ino;
		}
		f->nchunks = xfer_chunks_of(f->size, m.chunk_size);
	}
	if ((rc = xfer_engine_start(o, ad, NULL, 0, &m, src, 0, &e, rep)))
		goto out;
	if (!(rc = xfer_engine_feed_files(e, m.nfiles)))
		rc = xfer_engine_finish(e, rep);
out:
	xfer_engine_free(e);
	free(src);
	free(m.files);
	if (rc && !rep->error[0])
		snprintf(rep->error, sizeof(rep->error), "%s", strerror(-rc));
	return rc;
}

/*
 * The streamed sender. Files are listed into a pending part; a part goes out when it holds
 * part_max files (XFER_PART_FIRST for the first, so data starts early, then twice as many each
 * time up to XFER_PART_MAX) or when XFER_PART_MS passed since the last one while files wait;
 * its chunks are fed as soon as its NEED is back (engine.h), while the caller lists on. The first
 * part starts the engine. A bcast chain takes the parts as they come too: each relay forwards a
 * part to its next hop as it arrives (receiver.c).
 */
#define XFER_PART_FIRST 64
#define XFER_PART_MAX 4096
#define XFER_PART_MS 100
#define XFER_HOLD_ENV "ACCELNET_XFER_HOLD_LAST_PART"

struct xfer_sending {
	struct xfer_send_opts o;
	const struct xfer_adopt *ad; /* a server answering GET: the client's connections */
	int dirfd;		     /* and item paths beneath it (-1: as given) */
	struct xfer_engine *e;
	struct xfer_file *files; /* the pending part */
	struct xfer_source *src;
	uint32_t n, cap, part_max;
	uint32_t listed; /* files in the parts sent */
	uint64_t last_ns;
	char **owned; /* every name and path handed to the engine: freed with it */
	size_t nowned, capowned;
	int failed;
	struct xfer_report rep; /* progress while listing */
};

int xfer_send_begin(const struct xfer_send_opts *o, struct xfer_sending **out)
{
	struct xfer_sending *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->o = *o;
	x->dirfd = -1;
	x->part_max = XFER_PART_FIRST;
	x->last_ns = clock_now_ns();
	*out = x;
	return 0;
}

static int own(struct xfer_sending *x, char *s)
{
	if (!s)
		return -ENOMEM;
	if (x->nowned == x->capowned) {
		size_t cap = x->capowned ? 2 * x->capowned : 256;
		char **v = realloc(x->owned, cap * sizeof(*v));
		if (!v) {
			free(s);
			return -ENOMEM;
		}
		x->owned = v;
		x->capowned = cap;
	}
	x->owned[x->nowned++] = s;
	return 0;
}

/*
 * For tests: with ACCELNET_XFER_HOLD_LAST_PART set to a glob(3) pattern, a manifest in several
 * parts holds its last part until a path matches it (a file the receiver puts in place), for
 * at most 20 s, and fails the transfer if none did: a test sees that data flowed while the
 * manifest was still being listed, without timing anything. 0 or -ETIMEDOUT.
 */
static int hold_last_part(struct xfer_report *rep)
{
	const char *pattern = getenv(XFER_HOLD_ENV);
	if (!pattern || !*pattern)
		return 0;
	for (uint64_t until = clock_now_ns() + 20000000000ull; clock_now_ns() < until;) {
		glob_t g;
		int found = glob(pattern, GLOB_NOSORT, NULL, &g) == 0 && g.gl_pathc > 0;
		globfree(&g);
		if (found)
			return 0;
		usleep(5000);
	}
	snprintf(rep->error, sizeof(rep->error),
		 "%s: nothing matched '%.150s' before the manifest's last part", XFER_HOLD_ENV,
		 pattern);
	return -ETIMEDOUT;
}

/* Send the pending part (the last when <last>) and feed its chunks. 0, or -errno with
 * rep->error set. */
static int part_flush(struct xfer_sending *x, int last, struct xfer_report *rep)
{
	struct xfer_manifest p = {
	    .chunk_size = (x->o.chunk_kib ? x->o.chunk_kib : XFER_SEND_CHUNK_KIB) * 1024u,
	    .nfiles = x->n,
	    .files = x->files,
	    .last = (uint8_t)last};
	int rc;
	if (last && x->e && (rc = hold_last_part(rep)))
		return rc;
	if (!x->e) {
		if (p.chunk_size < 4096 || p.chunk_size > XFER_DATA_MAX) {
			snprintf(rep->error, sizeof(rep->error),
				 "chunk size must be 4 KiB to 64 MiB");
			return -EINVAL;
		}
		for (unsigned i = 0; i < x->o.nbcast; i++) {
			if (i == XFER_FWD_MAX) {
				snprintf(rep->error, sizeof(rep->error), "at most %d bcast hops",
					 XFER_FWD_MAX + 1);
				return -EINVAL;
			}
			p.fwd[p.nfwd++] = (char *)x->o.bcast[i];
		}
		for (uint32_t i = 0; i < x->n; i++)
			x->files[i].nchunks = xfer_chunks_of(x->files[i].size, p.chunk_size);
		rc = xfer_engine_start(&x->o, x->ad, NULL, 0, &p, x->src,
				       last ? 0 : XFER_ENGINE_MORE, &x->e, rep);
	} else {
		for (uint32_t i = 0; i < x->n; i++)
			x->files[i].nchunks = xfer_chunks_of(x->files[i].size, p.chunk_size);
		rc = xfer_engine_list(x->e, &p, x->src, rep);
	}
	if (rc)
		return rc;
	if (x->listed == 0 && (rc = xfer_engine_feed_files(x->e, x->n))) /* later: the engine's */
		return rc;
	x->listed += x->n;
	x->n = 0;
	x->last_ns = clock_now_ns();
	if (x->part_max < XFER_PART_MAX)
		x->part_max *= 2;
	return 0;
}

int xfer_send_add(struct xfer_sending *x, const struct xfer_item *it, struct xfer_report *rep)
{
	if (x->failed)
		return x->failed;
	int rc = -ENOMEM;
	char *name = strdup(it->name), *path = it->path ? strdup(it->path) : NULL;
	if (own(x, name) || (it->path && own(x, path)))
		goto fail;
	if (x->n == x->cap) {
		uint32_t cap = x->cap ? 2 * x->cap : 64;
		struct xfer_file *f = realloc(x->files, cap * sizeof(*f));
		if (f)
			x->files = f;
		struct xfer_source *s = f ? realloc(x->src, cap * sizeof(*s)) : NULL;
		if (!s)
			goto fail;
		x->src = s;
		x->cap = cap;
	}
	const char *why;
	if (xfer_path_check(name, strlen(name), &why)) {
		snprintf(rep->error, sizeof(rep->error), "'%s': %s", name, why);
		rc = -EINVAL;
		goto fail;
	}
	struct xfer_file *f = &x->files[x->n];
	struct xfer_source *src = &x->src[x->n];
	*f = (struct xfer_file){.path = name};
	*src = (struct xfer_source){.fd = -1};
	if (!path) {
		src->buf = it->buf;
		f->size = src->size = it->len;
		f->mode = 0644;
	} else {
		struct stat st;
		if ((rc = source_stat(x->dirfd, path, &st)) ||
		    (!S_ISREG(st.st_mode) && (rc = -EINVAL))) {
			snprintf(rep->error, sizeof(rep->error), "%s: %s", path,
				 rc == -EINVAL ? "not a regular file" : strerror(-rc));
			goto fail;
		}
		f->size = src->size = (uint64_t)st.st_size;
		f->mode = st.st_mode & 07777;
		f->mtime_ns =
		    (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
		*src = (struct xfer_source){.fd = -1,
					    .path = path,
					    .dirfd = x->dirfd,
					    .size = f->size,
					    .mtime_ns = f->mtime_ns,
					    .dev = (uint64_t)st.st_dev,
					    .ino = (uint64_t)st.st_ino};
	}
	x->n++;
	if (x->e)
		xfer_engine_tick(x->e, &x->rep);
	if ((x->n >= x->part_max || (clock_now_ns() - x->last_ns) / 1000000 >= XFER_PART_MS) &&
	    (rc = part_flush(x, 0, rep)))
		goto fail;
	return 0;
fail:
	x->failed = rc;
	return rc;
}

int xfer_send_end(struct xfer_sending *x, struct xfer_report *rep)
{
	int rc = x->failed;
	if (!rc)
		rc = part_flush(x, 1, rep);
	if (!rc) {
		rc = xfer_engine_finish(x->e, rep);
	} else if (x->e) {
		/* the transfer failed while listing: the engine's figures, the first error */
		char why[sizeof(rep->error)];
		snprintf(why, sizeof(why), "%s", rep->error);
		xfer_engine_abort(x->e, rc, why);
		xfer_engine_finish(x->e, rep);
		if (why[0])
			snprintf(rep->error, sizeof(rep->error), "%s", why);
	}
	if (rc && !rep->error[0])
		snprintf(rep->error, sizeof(rep->error), "%s", strerror(-rc));
	xfer_engine_free(x->e);
	for (size_t i = 0; i < x->nowned; i++)
		free(x->owned[i]);
	free(x->owned);
	free(x->files);
	free(x->src);
	free(x);
	return rc;
}

/* The walk's sink for xfer_send_paths: each file goes straight to the streamed sender. */
struct paths_sink {
	struct xfer_sending *x;
	struct xfer_report *rep;
};

static int paths_add(void *arg, const char *name, const char *path)
{
	struct paths_sink *ps = arg;
	struct xfer_item it = {.name = name, .path = path};
	return xfer_send_add(ps->x, &it, ps->rep);
}

int xfer_send_paths(const struct xfer_send_opts *o, const char *const *paths, unsigned n,
		    const char *to, struct xfer_report *rep)
{
	struct xfer_sending *x;
	char bad[4096];
	memset(rep, 0, sizeof(*rep));
	int rc = xfer_send_begin(o, &x);
	if (rc)
		return rc;
	struct paths_sink ps = {.x = x, .rep = rep};
	struct sink sink = {.add = paths_add, .arg = &ps};
	if ((rc = walk_paths(&sink, paths, n, to, bad, sizeof(bad))) && !x->failed) {
		/* the walk's own failure (not the transfer's): a path it could not read */
		snprintf(rep->error, sizeof(rep->error), "%.200s: %s", bad, strerror(-rc));
		x->failed = rc;
	}
	return xfer_send_end(x, rep);
}

int xfer_send_beneath(const struct xfer_send_opts *o, const struct xfer_adopt *ad, int dirfd,
		      const char *const *names, unsigned n, struct xfer_report *rep)
{
	struct xfer_sending *x;
	memset(rep, 0, sizeof(*rep));
	int *fds = calloc(n ? n : 1, sizeof(*fds));
	if (!fds)
		return -ENOMEM;
	int rc = names_open(dirfd, names, n, fds, rep->error, sizeof(rep->error));
	if (rc || (rc = xfer_send_begin(o, &x))) {
		if (!rc)
			for (unsigned i = 0; i < n; i++)
				if (fds[i] >= 0)
					close(fds[i]);
		free(fds);
		return rc;
	}
	x->ad = ad;
	x->dirfd = dirfd;
	struct paths_sink ps = {.x = x, .rep = rep};
	struct sink sink = {.add = paths_add, .arg = &ps};
	for (unsigned i = 0; i < n; i++) {
		const char *base = strrchr(names[i], '/') ? strrchr(names[i], '/') + 1 : names[i];
		int fd = fds[i];
		fds[i] = -1;
		if (rc || x->failed) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		rc = fd < 0 ? paths_add(&ps, base, names[i])
			    : walk_beneath(&sink, fd, names[i], base, 0); /* closes fd */
		if (rc && !x->failed) {
			/* the walk's own failure (not the transfer's) */
			snprintf(rep->error, sizeof(rep->error), "'%.200s': %s", names[i],
				 strerror(-rc));
			x->failed = rc;
		}
	}
	free(fds);
	return xfer_send_end(x, rep);
}
