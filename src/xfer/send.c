/*
 * send.c - xfer_send(): items to a manifest and sources, then one engine run; and the
 * expansion of paths (files and directory trees) into items: a sender's own paths as given,
 * or, for a server answering GET, names resolved beneath its directory and never outside.
 */
#include "xfer/send.h"
#include "accelnet/xfer.h"
#include "xfer/engine.h"

#include <dirent.h>
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

static int list_push(struct list *l, const char *name, const char *path)
{
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
static int walk(struct list *l, const char *path, const char *name, int top, char *bad,
		size_t badlen)
{
	struct stat st;
	if ((top ? stat(path, &st) : lstat(path, &st)) < 0) {
		snprintf(bad, badlen, "%s", path);
		return -errno;
	}
	if (S_ISREG(st.st_mode))
		return list_push(l, name, path);
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
		else if (de->d_type == DT_REG)
			rc = list_push(l, n, p);
		else
			rc = walk(l, p, n, 0, bad, badlen);
		free(p);
		free(n);
	}
	closedir(d);
	return rc;
}

int xfer_items_from_paths(const char *const *paths, unsigned n, const char *to,
			  struct xfer_item **items, unsigned *nitems, char *bad, size_t badlen)
{
	struct list l = {0};
	int rc = 0;
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
		rc = walk(&l, buf, name, 1, bad, badlen);
		free(name);
	}
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
static int walk_beneath(struct list *l, int dfd, const char *path, const char *name, unsigned depth)
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
			rc = list_push(l, n, p);
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

int xfer_items_beneath(int dirfd, const char *const *names, unsigned n, struct xfer_item **items,
		       unsigned *nitems, char *err, size_t errlen)
{
	struct list l = {0};
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		const char *base = strrchr(names[i], '/') ? strrchr(names[i], '/') + 1 : names[i];
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
		} else if (S_ISREG(st.st_mode)) {
			close(fd);
			rc = list_push(&l, base, names[i]);
		} else if (S_ISDIR(st.st_mode)) {
			rc = walk_beneath(&l, fd, names[i], base, 0);
			if (rc)
				snprintf(err, errlen, "'%s': %s", names[i], strerror(-rc));
		} else {
			close(fd);
			rc = -EINVAL;
			snprintf(err, errlen, "'%s': neither a file nor a directory", names[i]);
		}
	}
	if (rc) {
		if (!err[0])
			snprintf(err, errlen, "%s", strerror(-rc));
		xfer_items_free(l.v, l.n);
		return rc;
	}
	*items = l.v;
	*nitems = l.n;
	return 0;
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
	if ((rc = xfer_engine_start(o, ad, NULL, 0, &m, src, &e, rep)))
		goto out;
	for (uint32_t f = 0; f < m.nfiles; f++)
		for (uint32_t k = 0; k < m.files[f].nchunks; k++)
			xfer_engine_feed(e, f, k, 0, 0);
	rc = xfer_engine_finish(e, rep);
out:
	xfer_engine_free(e);
	free(src);
	free(m.files);
	if (rc && !rep->error[0])
		snprintf(rep->error, sizeof(rep->error), "%s", strerror(-rc));
	return rc;
}
