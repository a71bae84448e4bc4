/*
 * names.c - the bounded table of run-time label values (see names.h).
 *
 * The names sit in one array of fixed-size slots, filled in order under the mutex; the index
 * is a power-of-two array of 32-bit words, twice the table's size or more, each 0 (empty) or
 * a slot's number plus one, probed linearly from the name's hash. A writer fills the slot
 * first and publishes the index word after it (release), then raises the count (release):
 * a reader that sees either sees the name whole. A lookup reads the count before it probes:
 * a count at the cap then means every name was published before it, so a miss folds; a count
 * read after the probe could be the last name's, added between the two, and fold a name the
 * table holds. The fold's use is a flag raised once, read before written so that folded
 * requests write no shared line after the first.
 */
#include "obs/names.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct name_table {
	pthread_mutex_t lock;
	size_t max, maxlen;
	size_t mask; /* index words - 1 */
	char *text;  /* max slots of maxlen + 1 bytes */
	_Atomic uint32_t *index;
	atomic_size_t count; /* slots filled */
	atomic_int folded;   /* the fold has been used */
	const char *fold;
};

static uint64_t hash_name(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3u;
	return h;
}

int names_create(size_t max, size_t maxlen, const char *fold, struct name_table **out)
{
	struct name_table *t = calloc(1, sizeof(*t));
	if (!t || max < 1 || max > UINT32_MAX / 4)
		goto fail;
	size_t words = 4;
	while (words < 2 * max)
		words *= 2;
	t->max = max;
	t->maxlen = maxlen;
	t->mask = words - 1;
	t->fold = fold;
	t->text = calloc(max, maxlen + 1);
	t->index = calloc(words, sizeof(*t->index));
	if (!t->text || !t->index)
		goto fail;
	for (size_t i = 0; i < words; i++)
		atomic_init(&t->index[i], 0);
	atomic_init(&t->count, 0);
	atomic_init(&t->folded, 0);
	pthread_mutex_init(&t->lock, NULL);
	*out = t;
	return 0;
fail:
	if (t) {
		free(t->text);
		free(t->index);
	}
	free(t);
	return -ENOMEM;
}

void names_destroy(struct name_table *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->lock);
	free(t->text);
	free(t->index);
	free(t);
}

static const char *slot_text(const struct name_table *t, size_t i)
{
	return t->text + i * (t->maxlen + 1);
}

static int same(const char *name, const char *s, size_t len)
{
	return strnlen(name, len + 1) == len && memcmp(name, s, len) == 0;
}

/* Probe for the name: its series, or max with *at the empty word where it would go. */
static size_t probe(const struct name_table *t, const char *s, size_t len, size_t *at)
{
	size_t i = (size_t)hash_name(s, len) & t->mask;
	for (;; i = (i + 1) & t->mask) {
		uint32_t v = atomic_load_explicit(&t->index[i], memory_order_acquire);
		if (!v) {
			*at = i;
			return t->max;
		}
		const char *name = slot_text(t, v - 1);
		if (same(name, s, len))
			return v - 1;
	}
}

static size_t fold(struct name_table *t)
{
	if (!atomic_load_explicit(&t->folded, memory_order_relaxed))
		atomic_store_explicit(&t->folded, 1, memory_order_release);
	return t->max;
}

size_t names_intern(struct name_table *t, const char *s, size_t len)
{
	size_t at;
	if (!len || len > t->maxlen || memchr(s, '\0', len) || same(t->fold, s, len))
		return fold(t);
	/* read before the probe, not after (see above) */
	int full = atomic_load_explicit(&t->count, memory_order_acquire) >= t->max;
	size_t i = probe(t, s, len, &at);
	if (i < t->max)
		return i;
	if (full)
		return fold(t); /* nothing more is ever added */
	pthread_mutex_lock(&t->lock);
	i = probe(t, s, len, &at); /* another thread may have added it since */
	size_t n = atomic_load_explicit(&t->count, memory_order_relaxed);
	if (i == t->max && n < t->max) {
		char *slot = t->text + n * (t->maxlen + 1);
		memcpy(slot, s, len);
		slot[len] = '\0';
		atomic_store_explicit(&t->index[at], (uint32_t)n + 1, memory_order_release);
		atomic_store_explicit(&t->count, n + 1, memory_order_release);
		i = n;
	}
	pthread_mutex_unlock(&t->lock);
	return i < t->max ? i : fold(t);
}

const char *names_at(const struct name_table *t, size_t i)
{
	if (i == t->max)
		return atomic_load_explicit(&t->folded, memory_order_acquire) ? t->fold : NULL;
	if (i > t->max || i >= atomic_load_explicit(&t->count, memory_order_acquire))
		return NULL;
	return slot_text(t, i);
}

size_t names_max(const struct name_table *t)
{
	return t->max;
}
