/*
 * source.c - the sender's open files: a bounded set, opened as chunks are sent (see source.h).
 *
 * Opening, checking and mapping a file runs outside the set's lock, so streams open different
 * files in parallel; a slot being opened holds a descriptor of -2, and a stream that wants that
 * very file waits for the opener.
 */
#include "xfer/source.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OPENING (-2)

int xfer_source_open(int dirfd, const char *path)
{
	if (dirfd < 0)
		return open(path, O_RDONLY | O_CLOEXEC);
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
			       .resolve =
				   RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

static struct xfer_source *src_of(const struct xfer_sources *s, uint32_t f)
{
	return xfer_table_at(&s->src, f);
}

static int32_t *slot_of(const struct xfer_sources *s, uint32_t f)
{
	return xfer_table_at(&s->slot_of, f);
}

int xfer_sources_add(struct xfer_sources *s, const struct xfer_source *src, uint32_t n)
{
	if (xfer_table_grow(&s->src, (uint64_t)s->nfiles + n) ||
	    xfer_table_grow(&s->slot_of, (uint64_t)s->nfiles + n))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		*src_of(s, s->nfiles + i) = src[i];
	s->nfiles += n;
	return 0;
}

int xfer_sources_init(struct xfer_sources *s, const struct xfer_source *src, uint32_t nfiles,
		      unsigned nslots)
{
	memset(s, 0, sizeof(*s));
	xfer_table_init(&s->src, sizeof(struct xfer_source));
	xfer_table_init(&s->slot_of, sizeof(int32_t));
	s->nslots = nslots ? nslots : 1;
	s->slot = calloc(s->nslots, sizeof(*s->slot));
	if (!s->slot || xfer_sources_add(s, src, nfiles)) {
		xfer_table_free(&s->src);
		xfer_table_free(&s->slot_of);
		free(s->slot);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < s->nslots; i++)
		s->slot[i] = (struct xfer_open){.file = UINT32_MAX, .fd = -1};
	for (unsigned i = 0; i < s->nslots; i++)
		if (!(s->slot[i].small = malloc(XFER_SOURCE_SMALL))) {
			for (unsigned j = 0; j < i; j++)
				free(s->slot[j].small);
			xfer_table_free(&s->src);
			xfer_table_free(&s->slot_of);
			free(s->slot);
			return -ENOMEM;
		}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->init = 1;
	return 0;
}

/* Empty a slot (its small buffer stays). */
static void slot_close(struct xfer_open *o)
{
	if (o->buf && o->buf != o->small)
		munmap((void *)o->buf, o->size);
	if (o->fd >= 0)
		close(o->fd);
	*o = (struct xfer_open){.file = UINT32_MAX, .fd = -1, .small = o->small};
}

void xfer_sources_free(struct xfer_sources *s)
{
	if (!s->init)
		return;
	for (unsigned i = 0; i < s->nslots; i++) {
		slot_close(&s->slot[i]);
		free(s->slot[i].small);
	}
	free(s->slot);
	xfer_table_free(&s->src);
	xfer_table_free(&s->slot_of);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	s->init = 0;
}

/* Open, check and map <src> into <o> (a small file: read into o->small and closed). 0, or
 * -errno with the reason in <err>. */
static int source_load(const struct xfer_source *src, struct xfer_open *o, char *err, size_t errlen)
{
	struct stat st;
	int rc = 0;
	o->fd = xfer_source_open(src->dirfd, src->path);
	if (o->fd < 0 || fstat(o->fd, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", src->path, strerror(errno));
		goto fail;
	}
	if ((uint64_t)st.st_dev != src->dev || (uint64_t)st.st_ino != src->ino ||
	    (uint64_t)st.st_size != src->size ||
	    (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec !=
		src->mtime_ns) {
		rc = -ESTALE;
		snprintf(err, errlen,
			 "%s: changed since the transfer started (replaced, or its size or time)",
			 src->path);
		goto fail;
	}
	o->size = src->size;
	if (o->size && o->size <= XFER_SOURCE_SMALL) {
		ssize_t n = pread(o->fd, o->small, o->size, 0);
		if (n != (ssize_t)o->size) {
			rc = n < 0 ? -errno : -ESTALE;
			snprintf(err, errlen, "%s: %s", src->path,
				 n < 0 ? strerror(errno) : "changed since the transfer started");
			goto fail;
		}
		o->buf = o->small;
		close(o->fd);
		o->fd = -1;
	} else if (o->size) {
		void *map = mmap(NULL, o->size, PROT_READ, MAP_SHARED, o->fd, 0);
		if (map == MAP_FAILED) {
			rc = -errno;
			snprintf(err, errlen, "%s: %s", src->path, strerror(errno));
			goto fail;
		}
		madvise(map, o->size, MADV_SEQUENTIAL);
		o->buf = map;
	}
	return 0;
fail:
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
	return rc;
}

/* A slot for a file not in the set (under s->mu): an empty one, or the least recently used
 * of those nobody holds (closed here); -1 when every one is held. */
static int slot_free(struct xfer_sources *s)
{
	int best = -1;
	for (unsigned i = 0; i < s->nslots; i++) {
		struct xfer_open *o = &s->slot[i];
		if (o->file == UINT32_MAX)
			return (int)i;
		if (!o->refs && (best < 0 || o->used < s->slot[best].used))
			best = (int)i;
	}
	if (best >= 0) {
		*slot_of(s, s->slot[best].file) = 0;
		slot_close(&s->slot[best]);
	}
	return best;
}

int xfer_sources_get(struct xfer_sources *s, uint32_t f, struct xfer_open *out, char *err,
		     size_t errlen)
{
	const struct xfer_source *src = src_of(s, f);
	if (!src->path) {
		*out = (struct xfer_open){
		    .file = f, .fd = src->fd, .buf = src->buf, .size = src->size};
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	int i;
	for (;;) {
		i = *slot_of(s, f) - 1;
		if (i >= 0 && s->slot[i].fd != OPENING)
			break;
		if (i < 0 && (i = slot_free(s)) >= 0)
			break;
		pthread_cond_wait(&s->cv, &s->mu); /* being opened, or every slot held */
	}
	struct xfer_open *o = &s->slot[i];
	o->refs++;
	o->used = ++s->tick;
	if (o->file == f) {
		*out = *o;
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	o->file = f;
	o->fd = OPENING;
	*slot_of(s, f) = i + 1;
	pthread_mutex_unlock(&s->mu);
	struct xfer_open got = {.file = f, .fd = -1, .small = o->small};
	int rc = source_load(src, &got, err, errlen);
	pthread_mutex_lock(&s->mu);
	if (rc) {
		*slot_of(s, f) = 0;
		*o = (struct xfer_open){.file = UINT32_MAX, .fd = -1, .small = got.small};
	} else {
		got.refs = o->refs;
		got.used = o->used;
		*o = got;
		*out = got;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void xfer_sources_put(struct xfer_sources *s, uint32_t f)
{
	if (!src_of(s, f)->path)
		return;
	pthread_mutex_lock(&s->mu);
	int i = *slot_of(s, f) - 1;
	if (i >= 0 && s->slot[i].refs && --s->slot[i].refs == 0)
		pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}
