/*
 * stick.c - the session table, its feed and its copy across a reload (see stick.h).
 */
#include "policy/stick.h"

#include <errno.h>
#include <stdlib.h>
#include <xxhash.h>

#define TAG_SHIFT 48
#define BACKEND_SHIFT 32

int stick_table_new(size_t max_entries, unsigned ttl_s, struct stick_table **out)
{
	struct stick_table *t = calloc(1, sizeof(*t));
	size_t n = 1;
	while (n * STICK_WAYS < max_entries)
		n <<= 1;
	if (!t || !(t->place = calloc(n * STICK_WAYS, sizeof(*t->place)))) {
		free(t);
		*out = NULL;
		return -ENOMEM;
	}
	t->nbuckets = n;
	t->ttl_s = ttl_s;
	*out = t;
	return 0;
}

void stick_table_free(struct stick_table *t)
{
	if (!t)
		return;
	free(t->place);
	free(t);
}

uint64_t stick_key(enum stick_kind kind, const void *p, size_t len)
{
	uint64_t k = XXH3_64bits(p, len) & ~(1ull << STICK_KIND_BIT);
	k |= (uint64_t)kind << STICK_KIND_BIT;
	return k ? k : 1;
}

static struct stick_place *bucket_of(const struct stick_table *t, uint64_t key)
{
	return &t->place[(key & (t->nbuckets - 1)) * STICK_WAYS];
}

static uint64_t tag_of(uint64_t key)
{
	return key >> TAG_SHIFT;
}

int stick_get(const struct stick_table *t, uint64_t key, uint32_t now_s, uint32_t *expires_s)
{
	struct stick_place *b = bucket_of(t, key);
	for (size_t i = 0; i < STICK_WAYS; i++) {
		if (atomic_load_explicit(&b[i].key, memory_order_acquire) != key)
			continue;
		uint64_t v = atomic_load_explicit(&b[i].val, memory_order_acquire);
		uint32_t exp = (uint32_t)v;
		unsigned be = (unsigned)(v >> BACKEND_SHIFT) & 0xffff;
		if (v >> TAG_SHIFT != tag_of(key) || !be || exp <= now_s)
			return -1; /* being rewritten, or expired */
		if (expires_s)
			*expires_s = exp;
		return (int)be - 1;
	}
	return -1;
}

static void feed_push(struct stick_table *t, uint64_t key, unsigned backend)
{
	uint64_t i = atomic_fetch_add_explicit(&t->head, 1, memory_order_relaxed);
	struct stick_feed_slot *s = &t->feed[i % STICK_FEED_SLOTS];
	/* a seqlock without fences (ThreadSanitizer knows no fence): each release store of the
	 * entry comes after the odd stamp, each acquire load before the stamp read again */
	atomic_store_explicit(&s->stamp, 2 * i + 1, memory_order_relaxed);
	atomic_store_explicit(&s->key, key, memory_order_release);
	atomic_store_explicit(&s->backend, backend, memory_order_release);
	atomic_store_explicit(&s->stamp, 2 * i + 2, memory_order_release);
}

/* <key> to <backend> until <exp_s>, in its bucket's place or the one nearest its end. */
static void place(struct stick_table *t, uint64_t key, unsigned backend, uint32_t exp_s)
{
	struct stick_place *b = bucket_of(t, key), *at = NULL;
	uint32_t oldest = UINT32_MAX;
	for (size_t i = 0; i < STICK_WAYS; i++) {
		if (atomic_load_explicit(&b[i].key, memory_order_relaxed) == key) {
			at = &b[i];
			break;
		}
		uint32_t exp = (uint32_t)atomic_load_explicit(&b[i].val, memory_order_relaxed);
		if (exp < oldest) { /* empty (0) or expired first, else the soonest to expire */
			oldest = exp;
			at = &b[i];
		}
	}
	uint64_t v = tag_of(key) << TAG_SHIFT | (uint64_t)(backend + 1) << BACKEND_SHIFT | exp_s;
	/* a reader between these two stores sees the old value's tag disagree: a miss; the
	 * second is seq_cst against stick_follow(): a writer that then reads shared as 0 wrote
	 * it before stick_copy() reads it */
	atomic_store_explicit(&at->key, key, memory_order_release);
	atomic_store_explicit(&at->val, v, memory_order_seq_cst);
}

void stick_put(struct stick_table *t, uint64_t key, unsigned backend, uint32_t now_s, int feed)
{
	if (backend >= 0xffff)
		return;
	place(t, key, backend, now_s + t->ttl_s);
	if (feed && atomic_load_explicit(&t->shared, memory_order_seq_cst))
		feed_push(t, key, backend);
}

size_t stick_copy(struct stick_table *to, const struct stick_table *from, const int *map,
		  size_t nmap, uint32_t now_s)
{
	size_t copied = 0;
	for (size_t i = 0; i < from->nbuckets * STICK_WAYS; i++) {
		uint64_t key = atomic_load_explicit(&from->place[i].key, memory_order_seq_cst);
		uint64_t v = atomic_load_explicit(&from->place[i].val, memory_order_seq_cst);
		uint32_t exp = (uint32_t)v;
		unsigned be = (unsigned)(v >> BACKEND_SHIFT) & 0xffff;
		if (!key || v >> TAG_SHIFT != tag_of(key) || !be || exp <= now_s || be > nmap ||
		    map[be - 1] < 0 || map[be - 1] >= 0xffff)
			continue; /* empty, being rewritten, expired, or its backend is gone */
		place(to, key, (unsigned)map[be - 1],
		      exp - now_s > to->ttl_s ? now_s + to->ttl_s : exp);
		copied++;
	}
	return copied;
}

void stick_follow(struct stick_table *t)
{
	/* (the head before the flag: whoever sees the flag claims a slot at or after it) */
	t->follow = atomic_load_explicit(&t->head, memory_order_seq_cst);
	atomic_store_explicit(&t->shared, 1, memory_order_seq_cst);
	t->followed = 1;
}

int stick_feed_take(struct stick_table *t, uint64_t *cursor, uint64_t *key, unsigned *backend)
{
	uint64_t head = atomic_load_explicit(&t->head, memory_order_acquire);
	if (head - *cursor > STICK_FEED_SLOTS)
		*cursor = head - STICK_FEED_SLOTS; /* fallen a ring behind: skip the overwritten */
	while (*cursor < head) {
		uint64_t i = *cursor;
		struct stick_feed_slot *s = &t->feed[i % STICK_FEED_SLOTS];
		uint64_t st = atomic_load_explicit(&s->stamp, memory_order_acquire);
		if (st < 2 * i + 2)
			return 0; /* still being written: next time */
		(*cursor)++;
		if (st != 2 * i + 2)
			continue; /* overwritten by a later entry already */
		*key = atomic_load_explicit(&s->key, memory_order_acquire);
		*backend = atomic_load_explicit(&s->backend, memory_order_acquire);
		if (atomic_load_explicit(&s->stamp, memory_order_relaxed) != st)
			continue; /* overwritten while copied */
		return 1;
	}
	return 0;
}
