/*
 * test_cache_store.c - the response cache's store (cache/store.h), as its users rely on it:
 * an object filled is found whole under its key (compared whole, also when two keys share a
 * hash) and its Vary values; a fill is found while it fills; the byte budget holds after
 * every fill and evicts what the policy says (sieve keeps a reused object through a scan);
 * what is too large is refused; a reference keeps an evicted, purged or replaced object
 * readable until it is let go; failed fills, pass markers, replaced heads and purges; the
 * waits (notified once, unwait says whether it was); and two threaded runs: eight readers
 * following a 1 MiB fill byte by byte, and four threads looking up, filling, replacing and
 * purging many keys at once. Run under SAN=1 too: every object must be freed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache/fill.h"
#include "cache/store.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct cache_times times0 = {.lifetime = 60};

static struct cache_store *store_make(uint64_t memory, uint64_t max_object, unsigned shards,
				      const struct evict_ops *ops)
{
	struct cache_store_conf c = {
	    .memory = memory, .max_object = max_object, .shards = shards, .evict = ops};
	struct cache_store *s = NULL;
	assert_int_equal(cache_store_new(&c, &s), 0);
	assert_non_null(s);
	return s;
}

static struct cache_store_stats stats_of(struct cache_store *s)
{
	struct cache_store_stats st;
	cache_store_stats(s, &st);
	return st;
}

/* The body byte at <i> of an object made with <seed>. */
static char body_byte(uint64_t i, unsigned seed)
{
	return (char)(i * 131 + (i >> 9) * 7 + seed * 29 + 1);
}

static void body_make(char *p, size_t len, unsigned seed, uint64_t from)
{
	for (size_t i = 0; i < len; i++)
		p[i] = body_byte(from + i, seed);
}

/* A request's Vary values: what vary_of writes (NULL: they cannot be had). */
struct req {
	const char *values;
	unsigned calls;
};

static long vary_of(void *arg, const char *names, size_t nlen, char *out, size_t cap)
{
	struct req *r = arg;
	(void)names;
	(void)nlen;
	r->calls++;
	if (!r->values)
		return -1;
	size_t n = strlen(r->values);
	if (n > cap)
		return -1;
	memcpy(out, r->values, n);
	return (long)n;
}

/* Looked up as a request with <values> for the stored Vary names (NULL: none to give). */
static struct cache_obj *look_hash(struct cache_store *s, const char *key, size_t len,
				   uint64_t hash, const char *values)
{
	struct req r = {values, 0};
	return cache_lookup(s, key, len, hash, vary_of, &r, NULL);
}

static struct cache_obj *look(struct cache_store *s, const char *key, const char *values)
{
	return look_hash(s, key, strlen(key), cache_key_hash(key, strlen(key)), values);
}

/* Looked up for the stored copy and, apart, a fill under way (*filling). */
static struct cache_obj *look_both(struct cache_store *s, const char *key, const char *values,
				   struct cache_obj **filling)
{
	struct req r = {values, 0};
	size_t len = strlen(key);
	return cache_lookup(s, key, len, cache_key_hash(key, len), vary_of, &r, filling);
}

static const char HEAD[] = "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nLast-Modified: Tue, 01 Dec "
			   "2026 10:00:00 GMT\r\nContent-Type: text/plain\r\n";

/* Begin a fill of <key> filed under <hash>, and give it its head (Vary "accept-encoding"
 * with <values> when not NULL) and a body of length <total> (UINT64_MAX: unknown). */
static struct cache_obj *begin_hash(struct cache_store *s, const char *key, size_t len,
				    uint64_t hash, const char *values, uint64_t total)
{
	struct cache_obj *o = cache_fill_begin(s, key, len, hash);
	assert_non_null(o);
	assert_int_equal(cache_obj_state(o), CACHE_FILLING);
	const char *names = values ? "accept-encoding\n" : NULL;
	assert_int_equal(cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0, names,
					 names ? strlen(names) : 0, values,
					 values ? strlen(values) : 0, total),
			 0);
	return o;
}

/* The body of <len> bytes (<seed>) in pieces of at most <piece>. */
static void body_fill(struct cache_store *s, struct cache_obj *o, uint64_t len, unsigned seed,
		      size_t piece)
{
	char buf[8192];
	uint64_t at = 0;
	assert_true(piece <= sizeof(buf));
	while (at < len) {
		size_t k = len - at < piece ? (size_t)(len - at) : piece;
		body_make(buf, k, seed, at);
		assert_int_equal(cache_fill_body(s, o, buf, k), 0);
		at += k;
	}
}

/* Store <key> whole (its length known or not), the filler's reference let go. */
static void store_key(struct cache_store *s, const char *key, const char *values, uint64_t len,
		      unsigned seed, int known)
{
	size_t klen = strlen(key);
	struct cache_obj *o =
	    begin_hash(s, key, klen, cache_key_hash(key, klen), values, known ? len : UINT64_MAX);
	body_fill(s, o, len, seed, 1000);
	cache_fill_end(s, o, 1);
	assert_int_equal(cache_obj_state(o), CACHE_COMPLETE);
	cache_obj_put(s, o);
}

/* Bytes [from, to) of <o>'s body into <out>, read as hit.c does (segment by segment, up to
 * what body_len said). How many. */
static uint64_t body_read(const struct cache_obj *o, uint64_t from, uint64_t to, char *out)
{
	uint64_t at = 0, n = 0;
	for (const struct cache_seg *g = cache_obj_body(o); g && at < to; g = g->next) {
		uint64_t end = at + g->len;
		if (end > from) {
			uint64_t a = from > at ? from - at : 0;
			uint64_t b = (to < end ? to : end) - at;
			memcpy(out + n, g->data + a, (size_t)(b - a));
			n += b - a;
		}
		at = end;
	}
	return n;
}

/* 1 when <o>'s body is <len> bytes of <seed>. */
static int body_is(const struct cache_obj *o, uint64_t len, unsigned seed)
{
	if (cache_obj_body_len(o) != len)
		return 0;
	char *p = malloc(len ? len : 1);
	assert_non_null(p);
	int ok = body_read(o, 0, len, p) == len;
	for (uint64_t i = 0; ok && i < len; i++)
		ok = p[i] == body_byte(i, seed);
	free(p);
	return ok;
}

/* --- filled and found --------------------------------------------------------------------- */

static void round_trip(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 256 << 10, 1, &evict_sieve);
	const char *key = "GET example.com /a?x=1";
	size_t klen = strlen(key);
	uint64_t hash = cache_key_hash(key, klen);
	assert_int_equal(hash, cache_key_hash(key, klen));
	assert_null(look(s, key, NULL));

	struct cache_obj *o = cache_fill_begin(s, key, klen, hash);
	assert_non_null(o);
	struct cache_obj *f = look(s, key, NULL); /* found while it fills (coalescing) */
	assert_ptr_equal(f, o);
	assert_int_equal(cache_obj_state(f), CACHE_FILLING);
	assert_int_equal(atomic_load(&f->has_head), 0);
	cache_obj_put(s, f);

	const uint64_t len = 70000; /* past the first segment of an unknown length */
	assert_int_equal(cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0, NULL, 0, NULL,
					 0, UINT64_MAX),
			 0);
	body_fill(s, o, 30000, 3, 777);
	f = look(s, key, NULL);
	assert_ptr_equal(f, o);
	assert_int_equal(cache_obj_body_len(f), 30000);
	cache_obj_put(s, f);
	/* the rest, resumed where it was */
	char buf[4096];
	for (uint64_t at = 30000; at < len; at += 4000) {
		size_t k = len - at < 4000 ? (size_t)(len - at) : 4000;
		body_make(buf, k, 3, at);
		assert_int_equal(cache_fill_body(s, o, buf, k), 0);
	}
	cache_fill_end(s, o, 1);
	cache_obj_put(s, o);

	f = look(s, key, NULL);
	assert_non_null(f);
	assert_int_equal(cache_obj_state(f), CACHE_COMPLETE);
	assert_int_equal(f->status, 200);
	assert_int_equal(f->head_len, sizeof(HEAD) - 1);
	assert_memory_equal(f->head, HEAD, sizeof(HEAD) - 1);
	assert_int_equal(f->etag_len, 4);
	assert_memory_equal(f->head + f->etag_off, "\"v1\"", 4);
	assert_int_equal(f->lm_len, strlen("Tue, 01 Dec 2026 10:00:00 GMT"));
	assert_memory_equal(f->head + f->lm_off, "Tue, 01 Dec 2026 10:00:00 GMT", f->lm_len);
	assert_int_equal(f->times.lifetime, 60);
	assert_true(body_is(f, len, 3));
	/* a part of it, as a Range answer reads it */
	char part[100];
	assert_int_equal(body_read(f, 16380, 16480, part), 100);
	for (int i = 0; i < 100; i++)
		assert_int_equal(part[i], body_byte(16380 + (uint64_t)i, 3));
	cache_obj_put(s, f);

	struct cache_store_stats st = stats_of(s);
	assert_int_equal(st.objects, 1);
	assert_true(st.bytes >= len && st.bytes <= 1 << 20);

	/* a known length and an empty body */
	store_key(s, "k-known", NULL, 5000, 4, 1);
	store_key(s, "k-empty", NULL, 0, 5, 1);
	store_key(s, "k-empty-unknown", NULL, 0, 5, 0);
	assert_non_null(f = look(s, "k-known", NULL));
	assert_true(body_is(f, 5000, 4));
	cache_obj_put(s, f);
	assert_non_null(f = look(s, "k-empty", NULL));
	assert_true(body_is(f, 0, 5));
	assert_int_equal(cache_obj_state(f), CACHE_COMPLETE);
	cache_obj_put(s, f);
	assert_non_null(f = look(s, "k-empty-unknown", NULL));
	assert_true(body_is(f, 0, 5));
	cache_obj_put(s, f);
	assert_int_equal(stats_of(s).objects, 4);
	cache_store_free(s);
}

/* A known length the body does not reach (or passes) is no complete object. */
static void known_length_must_be_met(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 256 << 10, 1, &evict_lru);
	struct cache_obj *o = begin_hash(s, "full", 4, cache_key_hash("full", 4), NULL, 1000);
	body_fill(s, o, 999, 1, 500);
	char c = body_byte(999, 1);
	assert_int_equal(cache_fill_body(s, o, &c, 1), 0);
	assert_int_equal(cache_fill_body(s, o, &c, 1), -EFBIG); /* past the length said */
	cache_fill_end(s, o, 1);
	assert_int_equal(cache_obj_state(o), CACHE_COMPLETE);
	cache_obj_put(s, o);
	o = begin_hash(s, "short", 5, cache_key_hash("short", 5), NULL, 1000);
	body_fill(s, o, 999, 1, 500);
	cache_fill_end(s, o, 1); /* one byte short */
	assert_int_equal(cache_obj_state(o), CACHE_FAILED);
	cache_obj_put(s, o);
	assert_null(look(s, "short", NULL));
	struct cache_obj *f = look(s, "full", NULL);
	assert_non_null(f);
	assert_true(body_is(f, 1000, 1));
	cache_obj_put(s, f);
	assert_int_equal(stats_of(s).objects, 1);
	cache_store_free(s);
}

/* Keys are compared whole: neither a prefix, nor a key one byte longer, nor another key
 * filed under the same hash is found for one. */
static void keys_compared_whole(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 64 << 10, 4, &evict_sieve);
	static const char *const keys[] = {"/a", "/ab", "/b", "/a/", "/A", "/aa"};
	const size_t n = sizeof(keys) / sizeof(keys[0]);
	for (size_t i = 0; i < n; i++)
		store_key(s, keys[i], NULL, 100 + i, (unsigned)i, 1);
	/* a key with a NUL inside, and its prefix before the NUL already stored ("/a") */
	const char nul[] = {'/', 'a', '\0', 'x'};
	struct cache_obj *o = begin_hash(s, nul, 4, cache_key_hash(nul, 4), NULL, 50);
	body_fill(s, o, 50, 40, 50);
	cache_fill_end(s, o, 1);
	cache_obj_put(s, o);
	for (size_t i = 0; i < n; i++) {
		struct cache_obj *f = look(s, keys[i], NULL);
		assert_non_null(f);
		assert_int_equal(f->key_len, strlen(keys[i]));
		assert_memory_equal(f->key, keys[i], f->key_len);
		assert_true(body_is(f, 100 + i, (unsigned)i));
		cache_obj_put(s, f);
	}
	struct cache_obj *f = look_hash(s, nul, 4, cache_key_hash(nul, 4), NULL);
	assert_non_null(f);
	assert_true(body_is(f, 50, 40));
	cache_obj_put(s, f);
	assert_null(look(s, "/", NULL));
	assert_null(look(s, "/abc", NULL));
	assert_null(look(s, "", NULL));
	assert_null(look_hash(s, nul, 3, cache_key_hash(nul, 3), NULL));
	/* the right key under a wrong hash is not found either */
	assert_null(look_hash(s, "/a", 2, cache_key_hash("/b", 2), NULL));

	/* two keys under one hash (what a collision would be): each finds its own */
	const uint64_t h = 0x1234567890abcdefull;
	o = begin_hash(s, "one", 3, h, NULL, 10);
	body_fill(s, o, 10, 1, 10);
	cache_fill_end(s, o, 1);
	cache_obj_put(s, o);
	o = begin_hash(s, "two", 3, h, NULL, 20);
	body_fill(s, o, 20, 2, 20);
	cache_fill_end(s, o, 1);
	cache_obj_put(s, o);
	assert_non_null(f = look_hash(s, "one", 3, h, NULL));
	assert_true(body_is(f, 10, 1));
	cache_obj_put(s, f);
	assert_non_null(f = look_hash(s, "two", 3, h, NULL));
	assert_true(body_is(f, 20, 2));
	cache_obj_put(s, f);
	assert_null(look_hash(s, "six", 3, h, NULL));
	/* "two" did not replace "one" (another key), and purging one leaves the other */
	assert_int_equal(stats_of(s).evicted_replaced, 0);
	assert_int_equal(cache_purge_key(s, "one", 3), 0); /* filed under its real hash: none */
	cache_store_free(s);
}

/* Two variants of one key side by side, each found only by its Vary values. */
static void vary_variants(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 64 << 10, 2, &evict_sieve);
	store_key(s, "/v", "gzip", 300, 1, 1);
	store_key(s, "/v", "br", 400, 2, 0);
	struct cache_obj *f = look(s, "/v", "gzip");
	assert_non_null(f);
	assert_true(body_is(f, 300, 1));
	assert_int_equal(f->vary_len, strlen("accept-encoding\n"));
	assert_memory_equal(f->vary, "accept-encoding\n", f->vary_len);
	assert_int_equal(f->vary_values_len, 4);
	assert_memory_equal(f->vary_values, "gzip", 4);
	cache_obj_put(s, f);
	assert_non_null(f = look(s, "/v", "br"));
	assert_true(body_is(f, 400, 2));
	cache_obj_put(s, f);
	assert_null(look(s, "/v", "identity"));
	assert_null(look(s, "/v", "gzi"));   /* a prefix of the values */
	assert_null(look(s, "/v", "gzipx")); /* longer */
	assert_null(look(s, "/v", ""));
	assert_null(look(s, "/v", NULL)); /* the request's values cannot be had */
	assert_int_equal(stats_of(s).objects, 2);

	/* the callback is given the stored names */
	struct req r = {"gzip", 0};
	f = cache_lookup(s, "/v", 2, cache_key_hash("/v", 2), vary_of, &r, NULL);
	assert_non_null(f);
	assert_true(r.calls >= 1);
	cache_obj_put(s, f);

	/* a new gzip fill replaces the gzip variant only */
	store_key(s, "/v", "gzip", 500, 3, 1);
	assert_int_equal(stats_of(s).evicted_replaced, 1);
	assert_int_equal(stats_of(s).objects, 2);
	assert_non_null(f = look(s, "/v", "gzip"));
	assert_true(body_is(f, 500, 3));
	cache_obj_put(s, f);
	assert_non_null(f = look(s, "/v", "br"));
	assert_true(body_is(f, 400, 2));
	cache_obj_put(s, f);

	/* an object without Vary is one variant, found for any request */
	store_key(s, "/plain", NULL, 10, 4, 1);
	assert_non_null(f = look(s, "/plain", "whatever"));
	cache_obj_put(s, f);
	assert_non_null(f = look(s, "/plain", NULL));
	cache_obj_put(s, f);

	/* purge takes every variant */
	assert_int_equal(cache_purge_key(s, "/v", 2), 2);
	assert_null(look(s, "/v", "gzip"));
	assert_null(look(s, "/v", "br"));
	assert_int_equal(stats_of(s).evicted_purge, 2);
	assert_int_equal(stats_of(s).objects, 1);
	cache_store_free(s);
}

/* A fill is found by any request until its head says what it varies on; then only by its
 * values. */
static void filling_found_before_its_head(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 64 << 10, 1, &evict_sieve);
	store_key(s, "/f", "br", 10, 1, 1);
	struct cache_obj *o = cache_fill_begin(s, "/f", 2, cache_key_hash("/f", 2));
	struct cache_obj *f;
	assert_ptr_equal(f = look(s, "/f", "gzip"), o);
	cache_obj_put(s, f);
	assert_ptr_equal(f = look(s, "/f", NULL), o);
	cache_obj_put(s, f);
	assert_int_equal(cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0,
					 "accept-encoding\n", 16, "gzip", 4, 20),
			 0);
	assert_ptr_equal(f = look(s, "/f", "gzip"), o); /* its variant, still filling */
	assert_int_equal(cache_obj_state(f), CACHE_FILLING);
	cache_obj_put(s, f);
	assert_non_null(f = look(s, "/f", "br")); /* the other variant, stored before */
	assert_ptr_not_equal(f, o);
	assert_true(body_is(f, 10, 1));
	cache_obj_put(s, f);
	assert_null(look(s, "/f", "zstd"));
	body_fill(s, o, 20, 2, 7);
	cache_fill_end(s, o, 1);
	cache_obj_put(s, o);
	assert_non_null(f = look(s, "/f", "gzip"));
	assert_true(body_is(f, 20, 2));
	cache_obj_put(s, f);
	assert_int_equal(stats_of(s).objects, 2);
	cache_store_free(s);
}

/* Two misses at once make one fill: the second cache_fill_begin_once joins the first's;
 * one whose head came with a Vary is not joined (another variant's, maybe); once it ends,
 * a new fill begins. */
static void fill_begun_once(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 64 << 10, 1, &evict_sieve);
	uint64_t h = cache_key_hash("/o", 2);
	struct cache_obj *f = NULL, *o = cache_fill_begin_once(s, "/o", 2, h, &f);
	assert_non_null(o);
	assert_null(f);
	assert_null(cache_fill_begin_once(s, "/o", 2, h, &f));
	assert_ptr_equal(f, o);
	cache_obj_put(s, f);
	assert_int_equal(stats_of(s).objects, 1);
	assert_int_equal(cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0,
					 "accept-encoding\n", 16, "gzip", 4, 4),
			 0);
	struct cache_obj *v = cache_fill_begin_once(s, "/o", 2, h, &f); /* Vary: not joined */
	assert_non_null(v);
	assert_null(f);
	cache_fill_end(s, v, 0);
	cache_obj_put(s, v);
	body_fill(s, o, 4, 3, 4);
	cache_fill_end(s, o, 1);
	cache_obj_put(s, o);
	struct cache_obj *n = cache_fill_begin_once(s, "/o", 2, h, &f); /* none under way */
	assert_non_null(n);
	assert_null(f);
	cache_fill_end(s, n, 0);
	cache_obj_put(s, n);
	cache_store_free(s);
}

/* A fill that ended between a request's lookup and its own fill (on another worker): the
 * request is given that copy to look up again, never a second fill; a copy of another
 * variant, or the one its lookup saw (to be revalidated), does not stop its fill. */
static void fill_begun_unless_stored_since(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 64 << 10, 1, &evict_sieve);
	uint64_t h = cache_key_hash("/u", 2);
	struct req gzip = {"gzip", 0}, br = {"br", 0};
	struct cache_obj *f = NULL;
	assert_null(look_both(s, "/u", "gzip", &f)); /* the request looks: nothing */
	assert_null(f);
	struct cache_obj *o = begin_hash(s, "/u", 2, h, "gzip", 4); /* another's fill, done */
	body_fill(s, o, 4, 3, 4);
	cache_fill_end(s, o, 1);
	assert_null(cache_fill_begin_unless(s, "/u", 2, h, vary_of, &gzip, NULL, &f));
	assert_ptr_equal(f, o);
	assert_int_equal(cache_obj_state(f), CACHE_COMPLETE);
	cache_obj_put(s, f);
	struct cache_obj *seen = look(s, "/u", "gzip");
	assert_ptr_equal(seen, o);
	struct cache_obj *n = cache_fill_begin_unless(s, "/u", 2, h, vary_of, &gzip, seen, &f);
	assert_non_null(n); /* the copy it saw: revalidated by a fill of its own */
	assert_null(f);
	cache_fill_end(s, n, 0);
	cache_obj_put(s, n);
	n = cache_fill_begin_unless(s, "/u", 2, h, vary_of, &br, NULL, &f);
	assert_non_null(n); /* another variant */
	assert_null(f);
	cache_fill_end(s, n, 0);
	cache_obj_put(s, n);
	cache_obj_put(s, seen);
	cache_obj_put(s, o);
	cache_store_free(s);
}

/* The stored copy and a fill under way, apart: each referenced, each of its own variant. */
static void lookup_apart(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 64 << 10, 1, &evict_sieve);
	struct cache_obj *fill = (struct cache_obj *)1, *f;
	assert_null(look_both(s, "/l", NULL, &fill));
	assert_null(fill);
	struct cache_obj *o = cache_fill_begin(s, "/l", 2, cache_key_hash("/l", 2));
	assert_null(look_both(s, "/l", NULL, &fill)); /* nothing stored; a fill */
	assert_ptr_equal(fill, o);
	cache_obj_put(s, fill);
	assert_ptr_equal(f = look(s, "/l", NULL), o); /* without <filling>: the fill */
	cache_obj_put(s, f);
	cache_fill_end(s, o, 0);
	cache_obj_put(s, o);

	store_key(s, "/l", "br", 10, 1, 1);
	o = begin_hash(s, "/l", 2, cache_key_hash("/l", 2), "gzip", 20);
	f = look_both(s, "/l", "gzip", &fill);
	assert_null(f); /* "br" is not for this request */
	assert_ptr_equal(fill, o);
	cache_obj_put(s, fill);
	f = look_both(s, "/l", "br", &fill);
	assert_non_null(f);
	assert_true(body_is(f, 10, 1));
	assert_null(fill); /* the gzip fill is not for this request */
	cache_obj_put(s, f);
	body_fill(s, o, 20, 2, 20);
	cache_fill_end(s, o, 1);
	cache_obj_put(s, o);

	/* a stored copy of the variant and a new fill of it: both, the stored one found first */
	o = cache_fill_begin(s, "/l", 2, cache_key_hash("/l", 2));
	f = look_both(s, "/l", "gzip", &fill);
	assert_non_null(f);
	assert_int_equal(cache_obj_state(f), CACHE_COMPLETE);
	assert_true(body_is(f, 20, 2));
	assert_ptr_equal(fill, o);
	cache_obj_put(s, fill);
	cache_obj_put(s, f);
	assert_ptr_equal(f = look(s, "/l", "gzip"), look(s, "/l", "gzip"));
	assert_int_equal(cache_obj_state(f), CACHE_COMPLETE);
	cache_obj_put(s, f);
	cache_obj_put(s, f);
	/* a pass marker is the stored answer too */
	cache_fill_pass(s, o, 5);
	cache_obj_put(s, o);
	o = cache_fill_begin(s, "/l", 2, cache_key_hash("/l", 2));
	f = look_both(s, "/l", "zstd", &fill);
	assert_ptr_equal(fill, o);
	assert_non_null(f);
	assert_int_equal(cache_obj_state(f), CACHE_PASS);
	cache_obj_put(s, f);
	cache_obj_put(s, fill);
	cache_fill_end(s, o, 0);
	cache_obj_put(s, o);
	cache_store_free(s);
}

/* --- the budget ------------------------------------------------------------------------- */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Fill far past the budget, objects of many sizes: after every fill the bytes are within
 * it, space was made by evicting, and what is found is whole. */
static void budget_holds_after_every_fill(void **state)
{
	(void)state;
	const struct evict_ops *ops[] = {&evict_sieve, &evict_lru};
	const unsigned shards[] = {1, 4};
	for (int p = 0; p < 2; p++)
		for (int q = 0; q < 2; q++) {
			const uint64_t memory = 256 << 10;
			rng_state = 0x2545f4914f6cdd1dull;
			struct cache_store *s = store_make(memory, 48 << 10, shards[q], ops[p]);
			char key[32];
			uint64_t stored = 0;
			for (unsigned i = 0; i < 300; i++) {
				snprintf(key, sizeof(key), "/obj/%u", i);
				uint64_t len = rnd() % (40 << 10);
				store_key(s, key, NULL, len, i, (int)(i % 2));
				stored += len;
				struct cache_store_stats st = stats_of(s);
				assert_true(st.bytes <= memory);
				assert_true(st.bytes >= len); /* this one, at least */
				struct cache_obj *f = look(s, key, NULL);
				assert_non_null(f); /* the last one stays */
				assert_true(body_is(f, len, i));
				cache_obj_put(s, f);
			}
			assert_true(stored > 4 * memory);
			struct cache_store_stats st = stats_of(s);
			assert_true(st.evicted_space > 0);
			assert_int_equal(st.evicted_purge + st.evicted_replaced, 0);
			/* what is counted is what is found, and each of them whole */
			uint64_t found = 0;
			rng_state = 0x2545f4914f6cdd1dull;
			for (unsigned i = 0; i < 300; i++) {
				snprintf(key, sizeof(key), "/obj/%u", i);
				uint64_t len = rnd() % (40 << 10);
				struct cache_obj *f = look(s, key, NULL);
				if (!f)
					continue;
				found++;
				assert_true(body_is(f, len, i));
				cache_obj_put(s, f);
			}
			assert_int_equal(found, st.objects);
			assert_int_equal(found + st.evicted_space, 300);
			cache_store_free(s);
		}
}

static int match_all(void *arg, const struct cache_obj *o)
{
	(void)o;
	++*(unsigned *)arg;
	return 1;
}

static void purge_gives_every_byte_back(void **state)
{
	(void)state;
	struct cache_store *s = store_make(2 << 20, 64 << 10, 4, &evict_sieve);
	char key[32];
	for (unsigned i = 0; i < 100; i++) {
		snprintf(key, sizeof(key), "/p/%u", i);
		store_key(s, key, NULL, i * 100, i, 1);
	}
	struct cache_store_stats st = stats_of(s);
	assert_int_equal(st.objects, 100);
	unsigned calls = 0;
	assert_int_equal(cache_purge_match(s, match_all, &calls), 100);
	assert_true(calls >= 100);
	st = stats_of(s);
	assert_int_equal(st.objects, 0);
	assert_int_equal(st.bytes, 0);
	assert_int_equal(st.evicted_purge, 100);
	cache_store_free(s);
}

/* sieve: an object hit between the fills of a long scan of one-time objects stays. */
static void sieve_keeps_a_reused_object_through_a_scan(void **state)
{
	(void)state;
	struct cache_store *s = store_make(128 << 10, 16 << 10, 1, &evict_sieve);
	store_key(s, "/hot", NULL, 4000, 7, 1);
	store_key(s, "/cold", NULL, 4000, 8, 1);
	char key[32];
	for (unsigned i = 0; i < 500; i++) {
		struct cache_obj *f = look(s, "/hot", NULL);
		assert_non_null(f);
		assert_true(body_is(f, 4000, 7));
		cache_obj_put(s, f);
		snprintf(key, sizeof(key), "/scan/%u", i);
		store_key(s, key, NULL, 4000, i, 1);
	}
	struct cache_store_stats st = stats_of(s);
	assert_true(st.evicted_space > 400);
	assert_null(look(s, "/cold", NULL)); /* never hit: gone with the scan */
	assert_null(look(s, "/scan/0", NULL));
	struct cache_obj *f = look(s, "/hot", NULL);
	assert_non_null(f);
	cache_obj_put(s, f);
	cache_store_free(s);
}

/* --- too large ---------------------------------------------------------------------------- */

static void too_large_refused(void **state)
{
	(void)state;
	struct cache_store *s = store_make(256 << 10, 10000, 1, &evict_sieve);
	/* a known length past max_object: refused at the head */
	struct cache_obj *o = cache_fill_begin(s, "/big", 4, cache_key_hash("/big", 4));
	assert_int_equal(
	    cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0, NULL, 0, NULL, 0, 10001),
	    -EFBIG);
	cache_fill_end(s, o, 0);
	assert_int_equal(cache_obj_state(o), CACHE_FAILED);
	cache_obj_put(s, o);
	assert_null(look(s, "/big", NULL));
	assert_int_equal(stats_of(s).bytes, 0);
	assert_int_equal(stats_of(s).objects, 0);
	/* exactly max_object is stored */
	store_key(s, "/max", NULL, 10000, 1, 1);
	store_key(s, "/max2", NULL, 10000, 1, 0);
	/* an unknown length: refused when the body passes max_object */
	o = begin_hash(s, "/big2", 5, cache_key_hash("/big2", 5), NULL, UINT64_MAX);
	body_fill(s, o, 6000, 2, 3000);
	char buf[4001];
	body_make(buf, sizeof(buf), 2, 6000);
	assert_int_equal(cache_fill_body(s, o, buf, sizeof(buf)), -EFBIG);
	assert_int_equal(cache_obj_body_len(o), 6000);	       /* nothing of the refused piece */
	assert_int_equal(cache_fill_body(s, o, buf, 4000), 0); /* up to max_object still goes */
	cache_fill_end(s, o, 0);
	cache_obj_put(s, o);
	assert_null(look(s, "/big2", NULL));
	struct cache_obj *f;
	assert_non_null(f = look(s, "/max", NULL));
	assert_true(body_is(f, 10000, 1));
	cache_obj_put(s, f);
	assert_int_equal(stats_of(s).objects, 2);
	cache_store_free(s);

	/* larger than a shard's budget (max_object set past it): refused when charged */
	s = store_make(64 << 10, 1 << 20, 1, &evict_sieve);
	o = cache_fill_begin(s, "/huge", 5, cache_key_hash("/huge", 5));
	assert_int_equal(
	    cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0, NULL, 0, NULL, 0, 100000),
	    -EFBIG);
	cache_fill_end(s, o, 0);
	cache_obj_put(s, o);
	assert_int_equal(stats_of(s).bytes, 0);
	o = cache_fill_begin(s, "/huge", 5, cache_key_hash("/huge", 5));
	assert_int_equal(cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0, NULL, 0, NULL,
					 0, UINT64_MAX),
			 0);
	int err = 0;
	uint64_t at = 0;
	while (!err && at < 200000) {
		body_make(buf, 4000, 3, at);
		if (!(err = cache_fill_body(s, o, buf, 4000)))
			at += 4000;
	}
	assert_int_equal(err, -EFBIG);
	assert_true(at < 64 << 10);
	assert_true(stats_of(s).too_big >= 1);
	assert_true(stats_of(s).bytes <= 64 << 10);
	cache_fill_end(s, o, 0);
	cache_obj_put(s, o);
	assert_int_equal(stats_of(s).bytes, 0);
	cache_store_free(s);
}

/* max_object may be 4 GiB (the config's most): a body said to be that long is taken in
 * growing segments, not one (whose 32-bit cap could not say its length); and a piece whose
 * length would wrap the count is refused, not copied. */
/* A fill that stops mid-body says where (cache_fill_ctx.took, .at): the bytes before the
 * payload run it refused, and the chunked scanner as it was there, so that whoever relays the
 * rest goes on from that byte (proxy/relay.c) and loses none. */
static void fill_bytes_say_where_they_stop(void **state)
{
	(void)state;
	struct cache_store *s = store_make(256 << 10, 100, 1, &evict_sieve);
	struct cache_obj *o = begin_hash(s, "/c", 2, cache_key_hash("/c", 2), NULL, UINT64_MAX);
	struct cache_fill_ctx c = {.store = s, .framing = HTTP_BODY_CHUNKED};
	http_chunked_init(&c.ch);
	char raw[256];
	size_t n = 0;
	n += (size_t)sprintf(raw + n, "3c\r\n");
	memset(raw + n, 'a', 60), n += 60;
	n += (size_t)sprintf(raw + n, "\r\n32\r\n");
	memset(raw + n, 'b', 50), n += 50;
	n += (size_t)sprintf(raw + n, "\r\n0\r\n\r\n");
	/* a first part whole: taken whole */
	assert_int_equal(cache_fill_bytes(&c, o, raw, 30), 0);
	assert_int_equal(c.took, 30);
	/* the rest passes max_object (100) in the second chunk's payload */
	assert_int_equal(cache_fill_bytes(&c, o, raw + 30, n - 30), -EFBIG);
	assert_int_equal(c.took, 4 + 60 + 2 + 4 - 30); /* up to the refused run */
	assert_int_equal(cache_obj_body_len(o), 60);
	assert_int_equal(http_chunked_pending(&c.at), 50); /* inside the second chunk */
	/* from there, the scanner as it was reads the rest: the 50 bytes, then the end */
	struct http_chunked ch = c.at;
	const char *p = raw + 30 + c.took;
	size_t left = n - 30 - c.took, payload = 0;
	while (left) {
		int data;
		ssize_t k = http_chunked_scan(&ch, p, left, &data);
		assert_true(k > 0);
		if (data)
			payload += (size_t)k, assert_int_equal(p[0], 'b');
		p += k, left -= (size_t)k;
	}
	assert_int_equal(payload, 50);
	assert_true(http_chunked_done(&ch));
	cache_fill_end(s, o, 0);
	cache_obj_put(s, o);
	cache_store_free(s);
}

static void four_gib_and_wrapping_lengths(void **state)
{
	(void)state;
	struct cache_store *s = store_make(8ull << 30, 4ull << 30, 1, &evict_sieve);
	struct cache_obj *o = begin_hash(s, "/4g", 3, cache_key_hash("/4g", 3), NULL, 4ull << 30);
	body_fill(s, o, 100000, 1, 8192);
	assert_true(body_is(o, 100000, 1));
	assert_true(stats_of(s).bytes < 1 << 20);
	char c = 0;
	assert_int_equal(cache_fill_body(s, o, &c, SIZE_MAX - 50000), -EFBIG);
	assert_int_equal(cache_obj_body_len(o), 100000);
	cache_fill_end(s, o, 1); /* short of its length */
	assert_int_equal(cache_obj_state(o), CACHE_FAILED);
	cache_obj_put(s, o);
	o = begin_hash(s, "/u", 2, cache_key_hash("/u", 2), NULL, UINT64_MAX);
	body_fill(s, o, 10, 1, 10);
	assert_int_equal(cache_fill_body(s, o, &c, SIZE_MAX - 5), -EFBIG);
	cache_fill_end(s, o, 1);
	assert_true(body_is(o, 10, 1));
	cache_obj_put(s, o);
	cache_store_free(s);
}

/* --- references --------------------------------------------------------------------------- */

/* An object evicted, purged or replaced while a reader holds it stays whole for the reader;
 * it is freed when let go (SAN=1 says whether it was). */
static void references_outlive_the_store(void **state)
{
	(void)state;
	struct cache_store *s = store_make(64 << 10, 32 << 10, 1, &evict_lru);
	store_key(s, "/held", NULL, 20000, 1, 1);
	struct cache_obj *held = look(s, "/held", NULL);
	assert_non_null(held);
	char key[32];
	for (unsigned i = 0; i < 20; i++) { /* evicts it */
		snprintf(key, sizeof(key), "/x/%u", i);
		store_key(s, key, NULL, 20000, 100 + i, 1);
	}
	assert_null(look(s, "/held", NULL));
	assert_int_equal(cache_obj_state(held), CACHE_COMPLETE);
	assert_true(body_is(held, 20000, 1));
	assert_true(stats_of(s).bytes <= 64 << 10);

	store_key(s, "/purged", NULL, 10000, 2, 0);
	struct cache_obj *purged = look(s, "/purged", NULL);
	assert_int_equal(cache_purge_key(s, "/purged", 7), 1);
	assert_null(look(s, "/purged", NULL));
	assert_true(body_is(purged, 10000, 2));

	store_key(s, "/repl", NULL, 10000, 3, 1);
	struct cache_obj *old = look(s, "/repl", NULL);
	store_key(s, "/repl", NULL, 5000, 4, 1);
	struct cache_obj *now = look(s, "/repl", NULL);
	assert_ptr_not_equal(old, now);
	assert_true(body_is(old, 10000, 3));
	assert_true(body_is(now, 5000, 4));
	assert_int_equal(stats_of(s).evicted_replaced, 1);
	cache_obj_put(s, now);

	cache_obj_put(s, held);
	cache_obj_put(s, purged);
	cache_obj_put(s, old);
	cache_store_free(s);
}

/* A fill purged while it fills goes on for its readers, uncounted, and is freed after. */
static void purged_while_filling(void **state)
{
	(void)state;
	struct cache_store *s = store_make(64 << 10, 32 << 10, 1, &evict_sieve);
	struct cache_obj *o = cache_fill_begin(s, "/pf", 3, cache_key_hash("/pf", 3));
	struct cache_obj *r = look(s, "/pf", NULL);
	assert_int_equal(cache_purge_key(s, "/pf", 3), 1);
	assert_null(look(s, "/pf", NULL));
	assert_int_equal(cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0, NULL, 0, NULL,
					 0, UINT64_MAX),
			 0);
	body_fill(s, o, 30000, 5, 4000);
	assert_int_equal(stats_of(s).bytes, 0);
	cache_fill_end(s, o, 1);
	assert_int_equal(cache_obj_state(r), CACHE_COMPLETE);
	assert_true(body_is(r, 30000, 5));
	assert_null(look(s, "/pf", NULL));
	assert_int_equal(stats_of(s).objects, 0);
	cache_obj_put(s, o);
	cache_obj_put(s, r);
	cache_store_free(s);
}

/* --- failed fills, pass markers, replacement ------------------------------------------------ */

static void failed_fill_unlinked(void **state)
{
	(void)state;
	struct cache_store *s = store_make(256 << 10, 64 << 10, 1, &evict_sieve);
	store_key(s, "/ok", NULL, 1000, 1, 1);
	uint64_t before = stats_of(s).bytes;
	struct cache_obj *o = begin_hash(s, "/ok", 3, cache_key_hash("/ok", 3), NULL, UINT64_MAX);
	body_fill(s, o, 40000, 2, 4096);
	struct cache_obj *r, *old = look_both(s, "/ok", NULL, &r); /* the stored copy, the fill */
	assert_ptr_equal(r, o);
	assert_non_null(old);
	assert_ptr_not_equal(old, o);
	assert_true(body_is(old, 1000, 1));
	cache_obj_put(s, old);
	old = look(s, "/ok", NULL); /* without <filling>: the stored copy first */
	assert_ptr_not_equal(old, o);
	assert_true(body_is(old, 1000, 1));
	cache_obj_put(s, old);
	assert_true(stats_of(s).bytes > before);
	cache_fill_end(s, o, 0);
	assert_int_equal(cache_obj_state(r), CACHE_FAILED);
	assert_true(body_is(r, 40000, 2)); /* a reader that started keeps what came */
	cache_obj_put(s, r);
	cache_obj_put(s, o);
	assert_int_equal(stats_of(s).bytes, before);
	assert_int_equal(stats_of(s).objects, 1);
	struct cache_obj *f = look(s, "/ok", NULL); /* the old copy is still there */
	assert_non_null(f);
	assert_true(body_is(f, 1000, 1));
	cache_obj_put(s, f);
	/* a failure before the head */
	o = cache_fill_begin(s, "/nohead", 7, cache_key_hash("/nohead", 7));
	cache_fill_end(s, o, 0);
	assert_int_equal(cache_obj_state(o), CACHE_FAILED);
	cache_obj_put(s, o);
	assert_null(look(s, "/nohead", NULL));
	assert_int_equal(stats_of(s).bytes, before);
	assert_int_equal(stats_of(s).evicted_replaced, 0);
	cache_store_free(s);
}

static void pass_marker(void **state)
{
	(void)state;
	struct cache_store *s = store_make(256 << 10, 64 << 10, 1, &evict_sieve);
	struct cache_obj *o = cache_fill_begin(s, "/pass", 5, cache_key_hash("/pass", 5));
	struct cache_wait cw = {.notify = NULL};
	cache_fill_pass(s, o, 12345);
	assert_int_equal(cache_obj_state(o), CACHE_PASS);
	cache_obj_put(s, o);
	struct cache_obj *f = look(s, "/pass", "any");
	assert_non_null(f);
	assert_int_equal(cache_obj_state(f), CACHE_PASS);
	assert_int_equal(f->pass_until, 12345);
	assert_int_equal(cache_obj_wait(f, &cw, 0), 1); /* nothing to wait for */
	cache_obj_put(s, f);
	assert_true(stats_of(s).bytes <= 256 << 10);
	assert_int_equal(stats_of(s).objects, 1);
	/* a storable response later replaces it */
	store_key(s, "/pass", NULL, 100, 1, 1);
	assert_int_equal(stats_of(s).evicted_replaced, 1);
	assert_int_equal(stats_of(s).objects, 1);
	assert_non_null(f = look(s, "/pass", NULL));
	assert_int_equal(cache_obj_state(f), CACHE_COMPLETE);
	cache_obj_put(s, f);
	cache_store_free(s);
}

/* Markers of keys never asked again count like any object, and go when room is needed: a
 * stream of distinct responses that may not be stored does not grow the store without end;
 * nor does one key passed again and again. */
static void pass_markers_bounded(void **state)
{
	(void)state;
	const uint64_t memory = 64 << 10;
	struct cache_store *s = store_make(memory, 16 << 10, 1, &evict_sieve);
	char key[32];
	for (unsigned i = 0; i < 5000; i++) {
		snprintf(key, sizeof(key), "/nostore/%u", i);
		struct cache_obj *o =
		    cache_fill_begin(s, key, strlen(key), cache_key_hash(key, strlen(key)));
		assert_non_null(o);
		cache_fill_pass(s, o, 10);
		cache_obj_put(s, o);
		assert_true(stats_of(s).bytes <= memory);
	}
	struct cache_store_stats st = stats_of(s);
	assert_true(st.objects * sizeof(struct cache_obj) <= memory);
	assert_true(st.evicted_space > 0);
	assert_int_equal(cache_purge_match(s, match_all, &(unsigned){0}), st.objects);
	assert_int_equal(stats_of(s).bytes, 0);
	/* one key passed again and again: one marker */
	for (unsigned i = 0; i < 100; i++) {
		struct cache_obj *o = cache_fill_begin(s, "/again", 6, cache_key_hash("/again", 6));
		cache_fill_pass(s, o, i);
		cache_obj_put(s, o);
	}
	assert_int_equal(stats_of(s).objects, 1);
	struct cache_obj *f = look(s, "/again", NULL);
	assert_int_equal(f->pass_until, 99);
	cache_obj_put(s, f);
	cache_store_free(s);
}

/* --- a revalidated head ------------------------------------------------------------------- */

static const char HEAD2[] = "HTTP/1.1 200 OK\r\nETag: \"v2long\"\r\nContent-Type: text/plain\r\n";

static void replaced_head_shares_the_body(void **state)
{
	(void)state;
	struct cache_store *s = store_make(256 << 10, 64 << 10, 1, &evict_sieve);
	store_key(s, "/r", "gzip", 30000, 1, 1);
	store_key(s, "/r", "br", 100, 2, 1);
	struct cache_obj *old = look(s, "/r", "gzip");
	struct cache_times t = {.lifetime = 600};
	struct cache_obj *o = cache_replace_head(s, old, HEAD2, sizeof(HEAD2) - 1, &t);
	assert_non_null(o);
	assert_int_equal(cache_obj_state(o), CACHE_COMPLETE);
	assert_int_equal(o->status, 200);
	assert_int_equal(o->times.lifetime, 600);
	assert_int_equal(o->etag_len, 8);
	assert_memory_equal(o->head + o->etag_off, "\"v2long\"", 8);
	assert_int_equal(o->lm_len, 0);
	assert_true(body_is(o, 30000, 1));
	assert_ptr_equal(cache_obj_body(o), cache_obj_body(old)); /* shared, not copied */
	struct cache_wait cw = {.notify = NULL};
	assert_int_equal(cache_obj_wait(o, &cw, 30000), 1);
	struct cache_obj *f = look(s, "/r", "gzip");
	assert_ptr_equal(f, o);
	cache_obj_put(s, f);
	assert_non_null(f = look(s, "/r", "br")); /* the other variant stays */
	assert_true(body_is(f, 100, 2));
	cache_obj_put(s, f);
	assert_int_equal(stats_of(s).evicted_replaced, 1);
	assert_int_equal(stats_of(s).objects, 2);
	/* the old one is let go: the body lives on in the new one */
	cache_obj_put(s, old);
	assert_true(body_is(o, 30000, 1));
	/* and revalidated again: the body is still the first object's */
	struct cache_obj *o2 = cache_replace_head(s, o, HEAD, sizeof(HEAD) - 1, &times0);
	assert_non_null(o2);
	cache_obj_put(s, o);
	assert_true(body_is(o2, 30000, 1));
	assert_int_equal(o2->etag_len, 4);
	cache_obj_put(s, o2);
	assert_non_null(f = look(s, "/r", "gzip"));
	assert_true(body_is(f, 30000, 1));
	cache_obj_put(s, f);
	assert_int_equal(stats_of(s).objects, 2);
	assert_true(stats_of(s).bytes <= 256 << 10);
	assert_int_equal(cache_purge_key(s, "/r", 2), 2);
	assert_int_equal(stats_of(s).bytes, 0);
	cache_store_free(s);
}

/* A replaced head with no room to be kept is served to its caller, not stored, and freed
 * when let go (SAN=1: nothing leaks). */
static void replaced_head_without_room(void **state)
{
	(void)state;
	struct cache_store *s = store_make(64 << 10, 32 << 10, 1, &evict_sieve);
	store_key(s, "/r", NULL, 1000, 1, 1);
	struct cache_obj *old = look(s, "/r", NULL);
	size_t hlen = 70 << 10; /* larger than the budget */
	char *head = malloc(hlen);
	memset(head, 'h', hlen);
	memcpy(head, "HTTP/1.1 200 OK\r\nX: ", 20);
	struct cache_obj *o = cache_replace_head(s, old, head, hlen, &times0);
	assert_non_null(o);
	assert_true(body_is(o, 1000, 1));
	assert_int_equal(o->head_len, hlen);
	assert_null(look(s, "/r", NULL));
	assert_int_equal(stats_of(s).objects, 0);
	assert_int_equal(stats_of(s).bytes, 0);
	cache_obj_put(s, old);
	cache_obj_put(s, o);
	free(head);
	cache_store_free(s);
}

/* A replaced head that needs many small objects evicted to fit. */
static void replaced_head_evicts_many(void **state)
{
	(void)state;
	const uint64_t memory = 256 << 10;
	struct cache_store *s = store_make(memory, 64 << 10, 1, &evict_lru);
	store_key(s, "/r", NULL, 100, 1, 1);
	struct cache_obj *old = look(s, "/r", NULL);
	char key[32];
	for (unsigned i = 0; stats_of(s).evicted_space == 0; i++) {
		snprintf(key, sizeof(key), "/small/%u", i);
		store_key(s, key, NULL, 10, i, 1);
	}
	size_t hlen = 200 << 10; /* fits once some hundred objects go */
	char *head = malloc(hlen);
	memset(head, 'h', hlen);
	memcpy(head, "HTTP/1.1 200 OK\r\nX: ", 20);
	uint64_t evicted = stats_of(s).evicted_space;
	struct cache_obj *o = cache_replace_head(s, old, head, hlen, &times0);
	assert_non_null(o);
	struct cache_store_stats st = stats_of(s);
	assert_true(st.bytes <= memory);
	assert_true(st.evicted_space - evicted > 100);
	struct cache_obj *f = look(s, "/r", NULL);
	assert_ptr_equal(f, o); /* stored */
	cache_obj_put(s, f);
	assert_true(body_is(o, 100, 1));
	cache_obj_put(s, old);
	cache_obj_put(s, o);
	free(head);
	cache_store_free(s);
}

/* --- waiting ------------------------------------------------------------------------------ */

struct counted_wait {
	struct cache_wait cw;
	unsigned notified;
};

static void count_notify(struct cache_wait *cw)
{
	struct counted_wait *c = container_of(cw, struct counted_wait, cw);
	assert_int_equal(cw->waiting, CACHE_WAIT_NOTIFIED);
	c->notified++;
}

static void waits_notified_once(void **state)
{
	(void)state;
	struct cache_store *s = store_make(256 << 10, 64 << 10, 1, &evict_sieve);
	struct cache_obj *o = cache_fill_begin(s, "/w", 2, cache_key_hash("/w", 2));
	struct counted_wait a = {.cw.notify = count_notify}, b = {.cw.notify = count_notify};

	/* the head: a waits for it, b for body bytes past 0 */
	assert_int_equal(cache_obj_wait(o, &a.cw, UINT64_MAX), 0);
	assert_int_equal(cache_obj_wait(o, &b.cw, 0), 0);
	assert_int_equal(a.cw.waiting, CACHE_WAIT_LISTED);
	assert_int_equal(cache_fill_head(s, o, HEAD, sizeof(HEAD) - 1, 200, &times0, NULL, 0, NULL,
					 0, UINT64_MAX),
			 0);
	assert_int_equal(a.notified, 1);
	assert_int_equal(b.notified, 1); /* woken by the head too: it looks again */
	assert_int_equal(cache_obj_unwait(o, &a.cw), 0);
	assert_int_equal(cache_obj_wait(o, &a.cw, UINT64_MAX), 1); /* the head is here */

	/* body: past <have> or not */
	assert_int_equal(cache_obj_wait(o, &a.cw, 0), 0);
	body_fill(s, o, 10, 1, 10);
	assert_int_equal(a.notified, 2);
	body_fill(s, o, 10, 1, 10); /* a second piece: no second notify */
	assert_int_equal(a.notified, 2);
	/* notified, its wake not yet taken: a wait says a wake is coming, and lists it no more */
	assert_int_equal(a.cw.waiting, CACHE_WAIT_NOTIFIED);
	assert_int_equal(cache_obj_wait(o, &a.cw, 0), 0);
	assert_int_equal(cache_obj_wait(o, &a.cw, 100), 0);
	body_fill(s, o, 10, 1, 10);
	assert_int_equal(a.notified, 2);
	a.cw.waiting = CACHE_WAIT_IDLE; /* the owner took its wake */
	assert_int_equal(cache_obj_wait(o, &a.cw, 0), 1);
	assert_int_equal(cache_obj_wait(o, &a.cw, 9), 1);
	assert_int_equal(cache_obj_wait(o, &a.cw, 29), 1);
	assert_int_equal(cache_obj_wait(o, &a.cw, 30), 0);
	/* unwait while registered: 1, and nothing comes after */
	assert_int_equal(cache_obj_unwait(o, &a.cw), 1);
	assert_int_equal(cache_obj_unwait(o, &a.cw), 0);
	char c = 'z';
	assert_int_equal(cache_fill_body(s, o, &c, 1), 0);
	assert_int_equal(a.notified, 2);

	/* several waiters, one fill_end wakes all, each once */
	struct counted_wait w[5];
	for (int i = 0; i < 5; i++) {
		w[i] = (struct counted_wait){.cw.notify = count_notify};
		assert_int_equal(cache_obj_wait(o, &w[i].cw, 31), 0);
	}
	assert_int_equal(cache_obj_unwait(o, &w[2].cw), 1);
	cache_fill_end(s, o, 1);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(w[i].notified, i == 2 ? 0 : 1);
		assert_int_equal(cache_obj_unwait(o, &w[i].cw), 0);
		assert_int_equal(w[i].cw.waiting, CACHE_WAIT_IDLE);
	}
	/* an ended fill: ready at once, whatever <have> */
	assert_int_equal(cache_obj_wait(o, &a.cw, 31), 1);
	assert_int_equal(cache_obj_wait(o, &a.cw, UINT64_MAX), 1);
	assert_int_equal(cache_obj_wait(o, &a.cw, 1000), 1);
	cache_obj_put(s, o);

	/* a failed fill and a pass wake their waiters too */
	o = cache_fill_begin(s, "/w2", 3, cache_key_hash("/w2", 3));
	assert_int_equal(cache_obj_wait(o, &a.cw, UINT64_MAX), 0);
	cache_fill_end(s, o, 0);
	assert_int_equal(a.notified, 3);
	a.cw.waiting = CACHE_WAIT_IDLE;
	cache_obj_put(s, o);
	o = cache_fill_begin(s, "/w3", 3, cache_key_hash("/w3", 3));
	assert_int_equal(cache_obj_wait(o, &a.cw, UINT64_MAX), 0);
	cache_fill_pass(s, o, 1);
	assert_int_equal(a.notified, 4);
	cache_obj_put(s, o);
	cache_store_free(s);
}

/* --- purge ------------------------------------------------------------------------------- */

static int match_prefix(void *arg, const struct cache_obj *o)
{
	const char *p = arg;
	size_t n = strlen(p);
	return o->key_len >= n && memcmp(o->key, p, n) == 0;
}

static void purges(void **state)
{
	(void)state;
	struct cache_store *s = store_make(1 << 20, 64 << 10, 4, &evict_sieve);
	char key[32], values[32];
	/* many variants of one key: all of them go */
	for (unsigned i = 0; i < 70; i++) {
		snprintf(values, sizeof(values), "lang-%u", i);
		store_key(s, "/many", values, 10, i, 1);
	}
	for (unsigned i = 0; i < 50; i++) {
		snprintf(key, sizeof(key), "/api/%u", i);
		store_key(s, key, NULL, 100, i, 1);
		snprintf(key, sizeof(key), "/static/%u", i);
		store_key(s, key, NULL, 100, i, 1);
	}
	struct cache_obj *filling = cache_fill_begin(s, "/many", 5, cache_key_hash("/many", 5));
	assert_int_equal(stats_of(s).objects, 171);
	assert_int_equal(cache_purge_key(s, "/many", 5), 71); /* the fill too */
	assert_null(look(s, "/many", "lang-3"));
	assert_null(look(s, "/many", NULL));
	cache_fill_end(s, filling, 1); /* ends unlinked: not found after */
	cache_obj_put(s, filling);
	assert_null(look(s, "/many", NULL));
	assert_int_equal(stats_of(s).objects, 100);
	assert_int_equal(cache_purge_key(s, "/many", 5), 0);
	assert_int_equal(cache_purge_key(s, "/api/1", 5), 0); /* "/api/" is not a key */

	static char api[] = "/api/", nothing[] = "/nothing";
	assert_int_equal(cache_purge_match(s, match_prefix, api), 50);
	assert_int_equal(stats_of(s).objects, 50);
	assert_int_equal(stats_of(s).evicted_purge, 71 + 50);
	for (unsigned i = 0; i < 50; i++) {
		snprintf(key, sizeof(key), "/api/%u", i);
		assert_null(look(s, key, NULL));
		snprintf(key, sizeof(key), "/static/%u", i);
		struct cache_obj *f = look(s, key, NULL);
		assert_non_null(f);
		assert_true(body_is(f, 100, i));
		cache_obj_put(s, f);
	}
	assert_int_equal(cache_purge_match(s, match_prefix, nothing), 0);
	assert_int_equal(cache_invalidate(s, "/static/7", 9), 1);
	assert_int_equal(stats_of(s).objects, 49);
	cache_store_free(s);
}

/* --- threads: readers following a fill ------------------------------------------------------ */

#define STREAM_LEN (1u << 20)
#define READERS 8

struct reader {
	struct cache_store *s;
	struct cache_obj *o;
	struct cache_wait cw;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned notified, waits, wakes;
	uint64_t read;
	unsigned bad;
	char *buf;
};

static void reader_notify(struct cache_wait *cw)
{
	struct reader *r = container_of(cw, struct reader, cw);
	pthread_mutex_lock(&r->mu);
	if (cw->waiting != CACHE_WAIT_NOTIFIED)
		r->bad++;
	r->notified++;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* Wait on <have> (UINT64_MAX: the head) until notified or ready at once. */
static void reader_wait(struct reader *r, uint64_t have)
{
	if (cache_obj_wait(r->o, &r->cw, have))
		return;
	r->waits++;
	pthread_mutex_lock(&r->mu);
	while (r->notified < r->waits)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	r->cw.waiting = CACHE_WAIT_IDLE; /* the wake is taken: it may wait again */
	r->wakes++;
}

static void *reader_run(void *arg)
{
	struct reader *r = arg;
	while (!atomic_load(&r->o->has_head) && cache_obj_state(r->o) == CACHE_FILLING)
		reader_wait(r, UINT64_MAX);
	for (;;) {
		uint64_t len = cache_obj_body_len(r->o);
		if (len > r->read) {
			uint64_t n = body_read(r->o, r->read, len, r->buf);
			if (n != len - r->read)
				r->bad++;
			for (uint64_t i = 0; i < n; i++)
				if (r->buf[i] != body_byte(r->read + i, 9))
					r->bad++;
			r->read = len;
			continue;
		}
		if (cache_obj_state(r->o) != CACHE_FILLING)
			break;
		reader_wait(r, r->read);
	}
	return NULL;
}

struct filler {
	struct cache_store *s;
	struct cache_obj *o;
	uint64_t total;
	uint64_t seed;
};

static void *filler_run(void *arg)
{
	struct filler *f = arg;
	static char buf[20000];
	uint64_t x = f->seed;
	if (cache_fill_head(f->s, f->o, HEAD, sizeof(HEAD) - 1, 200, &times0, NULL, 0, NULL, 0,
			    f->total) != 0)
		return (void *)1;
	for (uint64_t at = 0; at < STREAM_LEN;) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		size_t k = 1 + (size_t)(x % (x & 64 ? 20000 : 300));
		if (k > STREAM_LEN - at)
			k = STREAM_LEN - at;
		body_make(buf, k, 9, at);
		if (cache_fill_body(f->s, f->o, buf, k) != 0)
			return (void *)1;
		at += k;
		sched_yield(); /* let the readers catch up, and wait */
	}
	cache_fill_end(f->s, f->o, 1);
	return NULL;
}

static void readers_follow_a_fill(void **state)
{
	(void)state;
	for (int known = 0; known < 2; known++) {
		struct cache_store *s = store_make(8 << 20, 2 << 20, 2, &evict_sieve);
		struct cache_obj *o =
		    cache_fill_begin(s, "/stream", 7, cache_key_hash("/stream", 7));
		struct reader r[READERS];
		pthread_t rt[READERS], ft;
		for (int i = 0; i < READERS; i++) {
			r[i] = (struct reader){.s = s, .cw.notify = reader_notify};
			r[i].o = look(s, "/stream", NULL);
			assert_ptr_equal(r[i].o, o);
			pthread_mutex_init(&r[i].mu, NULL);
			pthread_cond_init(&r[i].cv, NULL);
			r[i].buf = malloc(STREAM_LEN);
			assert_non_null(r[i].buf);
			assert_int_equal(pthread_create(&rt[i], NULL, reader_run, &r[i]), 0);
		}
		struct filler f = {s, o, known ? STREAM_LEN : UINT64_MAX, 0x9e3779b97f4a7c15ull};
		assert_int_equal(pthread_create(&ft, NULL, filler_run, &f), 0);
		void *fret;
		pthread_join(ft, &fret);
		assert_null(fret);
		unsigned waits = 0;
		for (int i = 0; i < READERS; i++) {
			pthread_join(rt[i], NULL);
			assert_int_equal(r[i].bad, 0);
			assert_int_equal(r[i].read, STREAM_LEN);
			assert_int_equal(r[i].notified, r[i].waits); /* each wait woken once */
			assert_int_equal(r[i].cw.waiting, CACHE_WAIT_IDLE);
			assert_int_equal(cache_obj_state(r[i].o), CACHE_COMPLETE);
			waits += r[i].waits;
			cache_obj_put(s, r[i].o);
			pthread_mutex_destroy(&r[i].mu);
			pthread_cond_destroy(&r[i].cv);
			free(r[i].buf);
		}
		print_message("readers waited %u times in all (%s length)\n", waits,
			      known ? "known" : "unknown");
		cache_obj_put(s, o);
		struct cache_obj *g = look(s, "/stream", NULL);
		assert_non_null(g);
		assert_true(body_is(g, STREAM_LEN, 9));
		cache_obj_put(s, g);
		cache_store_free(s);
	}
}

/* --- threads: many keys, every operation at once -------------------------------------------- */

#define CHURN_THREADS 4
#define CHURN_ITERS 6000
#define CHURN_KEYS 97
#define CHURN_MEMORY (256u << 10)

struct churn {
	struct cache_store *s;
	uint64_t x;
	unsigned bad, hits, fills, purged, replaced, over, followed;
};

static unsigned churn_rand(struct churn *c, unsigned n)
{
	c->x ^= c->x << 13;
	c->x ^= c->x >> 7;
	c->x ^= c->x << 17;
	return (unsigned)(c->x % n);
}

static int match_odd(void *arg, const struct cache_obj *o)
{
	(void)arg;
	return o->key_len && (o->key[o->key_len - 1] & 1);
}

/* The object's body is what its key and Vary values say: seed the key's number, length the
 * values' number. */
static void churn_check(struct churn *c, const struct cache_obj *o, unsigned k)
{
	enum cache_fill_state st = cache_obj_state(o);
	if (st == CACHE_PASS || !atomic_load(&o->has_head))
		return;
	char v[16];
	if (o->vary_values_len >= sizeof(v)) {
		c->bad++;
		return;
	}
	memcpy(v, o->vary_values, o->vary_values_len);
	v[o->vary_values_len] = 0;
	uint64_t want = strtoull(v, NULL, 10), len = cache_obj_body_len(o);
	if (len > want || (st == CACHE_COMPLETE && len != want)) {
		c->bad++;
		return;
	}
	static _Thread_local char buf[40000];
	if (body_read(o, 0, len, buf) != len)
		c->bad++;
	for (uint64_t i = 0; i < len; i++)
		if (buf[i] != body_byte(i, k)) {
			c->bad++;
			break;
		}
}

struct follower {
	struct cache_wait cw;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned notified, waits;
};

static void follower_notify(struct cache_wait *cw)
{
	struct follower *f = container_of(cw, struct follower, cw);
	pthread_mutex_lock(&f->mu);
	f->notified++;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

/* Follow the fill <o> to its end, waiting for its head, then for each new byte. */
static void churn_follow(struct churn *c, struct cache_obj *o, unsigned k)
{
	struct follower f = {.cw.notify = follower_notify};
	pthread_mutex_init(&f.mu, NULL);
	pthread_cond_init(&f.cv, NULL);
	while (cache_obj_state(o) == CACHE_FILLING) {
		uint64_t have = atomic_load(&o->has_head) ? cache_obj_body_len(o) : UINT64_MAX;
		if (cache_obj_wait(o, &f.cw, have))
			continue;
		f.waits++;
		pthread_mutex_lock(&f.mu);
		while (f.notified < f.waits)
			pthread_cond_wait(&f.cv, &f.mu);
		pthread_mutex_unlock(&f.mu);
		f.cw.waiting = CACHE_WAIT_IDLE;
	}
	if (f.cw.waiting || f.notified != f.waits)
		c->bad++;
	c->followed++;
	churn_check(c, o, k);
	pthread_mutex_destroy(&f.mu);
	pthread_cond_destroy(&f.cv);
}

static long churn_vary(void *arg, const char *names, size_t nlen, char *out, size_t cap)
{
	(void)names;
	(void)nlen;
	int n = snprintf(out, cap, "%u", *(unsigned *)arg);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

static void *churn_run(void *arg)
{
	struct churn *c = arg;
	static _Thread_local char buf[40000];
	char key[32], values[16];
	for (unsigned it = 0; it < CHURN_ITERS; it++) {
		unsigned k = churn_rand(c, CHURN_KEYS), op = churn_rand(c, 100);
		int klen = snprintf(key, sizeof(key), "/churn/%u", k);
		uint64_t hash = cache_key_hash(key, (size_t)klen);
		unsigned variant = 9000 * (k % 3) + k; /* the length, and the Vary values */
		if (op < 50) {
			struct cache_obj *o =
			    cache_lookup(c->s, key, (size_t)klen, hash, churn_vary, &variant, NULL);
			if (o) {
				c->hits++;
				if (cache_obj_state(o) == CACHE_FILLING && op % 2)
					churn_follow(c, o, k);
				else
					churn_check(c, o, k);
				if (op < 5 && cache_obj_state(o) == CACHE_COMPLETE &&
				    atomic_load(&o->has_head)) {
					struct cache_obj *n = cache_replace_head(
					    c->s, o, HEAD2, sizeof(HEAD2) - 1, &times0);
					if (n) {
						c->replaced++;
						churn_check(c, n, k);
						cache_obj_put(c->s, n);
					}
				}
				cache_obj_put(c->s, o);
			}
		} else if (op < 90) {
			struct cache_obj *o = cache_fill_begin(c->s, key, (size_t)klen, hash);
			if (!o) {
				c->bad++;
				continue;
			}
			c->fills++;
			int vlen = snprintf(values, sizeof(values), "%u", variant);
			int known = op & 1, how = churn_rand(c, 20);
			if (how == 0) {
				cache_fill_pass(c->s, o, 1);
				cache_obj_put(c->s, o);
				continue;
			}
			int err =
			    cache_fill_head(c->s, o, HEAD, sizeof(HEAD) - 1, 200, &times0, "x\n", 2,
					    values, (size_t)vlen, known ? variant : UINT64_MAX);
			for (uint64_t at = 0; !err && at < variant;) {
				size_t n = 1 + churn_rand(c, 3000);
				if (n > variant - at)
					n = variant - at;
				body_make(buf, n, k, at);
				err = cache_fill_body(c->s, o, buf, n);
				at += n;
			}
			if (err && err != -EFBIG)
				c->bad++;
			cache_fill_end(c->s, o, !err && how != 1);
			cache_obj_put(c->s, o);
		} else if (op < 98) {
			c->purged += (unsigned)cache_purge_key(c->s, key, (size_t)klen);
		} else {
			c->purged += (unsigned)cache_purge_match(c->s, match_odd, NULL);
		}
		struct cache_store_stats st;
		cache_store_stats(c->s, &st);
		if (st.bytes > CHURN_MEMORY)
			c->over++;
	}
	return NULL;
}

static void churn_many_keys_from_threads(void **state)
{
	(void)state;
	struct cache_store *s = store_make(CHURN_MEMORY, 32 << 10, 4, &evict_sieve);
	struct churn c[CHURN_THREADS];
	pthread_t t[CHURN_THREADS];
	for (int i = 0; i < CHURN_THREADS; i++) {
		c[i] = (struct churn){.s = s, .x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)};
		assert_int_equal(pthread_create(&t[i], NULL, churn_run, &c[i]), 0);
	}
	unsigned hits = 0, fills = 0, purged = 0, replaced = 0, followed = 0;
	for (int i = 0; i < CHURN_THREADS; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(c[i].bad, 0);
		assert_int_equal(c[i].over, 0);
		hits += c[i].hits;
		fills += c[i].fills;
		purged += c[i].purged;
		replaced += c[i].replaced;
		followed += c[i].followed;
	}
	struct cache_store_stats st = stats_of(s);
	print_message("churn: %u hits (%u fills followed), %u fills, %u purged, %u heads "
		      "replaced; %llu objects, %llu bytes, evicted %llu space %llu replaced %llu "
		      "purged\n",
		      hits, followed, fills, purged, replaced, (unsigned long long)st.objects,
		      (unsigned long long)st.bytes, (unsigned long long)st.evicted_space,
		      (unsigned long long)st.evicted_replaced,
		      (unsigned long long)st.evicted_purge);
	assert_true(hits > 0 && fills > 0 && purged > 0 && replaced > 0);
	assert_int_equal(st.evicted_purge, purged);
	assert_true(st.bytes <= CHURN_MEMORY);
	/* what is counted is what a purge of everything finds, and gives every byte back */
	unsigned calls = 0;
	assert_int_equal(cache_purge_match(s, match_all, &calls), st.objects);
	st = stats_of(s);
	assert_int_equal(st.objects, 0);
	assert_int_equal(st.bytes, 0);
	cache_store_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(round_trip),
	    cmocka_unit_test(known_length_must_be_met),
	    cmocka_unit_test(keys_compared_whole),
	    cmocka_unit_test(vary_variants),
	    cmocka_unit_test(filling_found_before_its_head),
	    cmocka_unit_test(fill_begun_once),
	    cmocka_unit_test(fill_begun_unless_stored_since),
	    cmocka_unit_test(lookup_apart),
	    cmocka_unit_test(budget_holds_after_every_fill),
	    cmocka_unit_test(purge_gives_every_byte_back),
	    cmocka_unit_test(sieve_keeps_a_reused_object_through_a_scan),
	    cmocka_unit_test(too_large_refused),
	    cmocka_unit_test(fill_bytes_say_where_they_stop),
	    cmocka_unit_test(four_gib_and_wrapping_lengths),
	    cmocka_unit_test(references_outlive_the_store),
	    cmocka_unit_test(purged_while_filling),
	    cmocka_unit_test(failed_fill_unlinked),
	    cmocka_unit_test(pass_marker),
	    cmocka_unit_test(pass_markers_bounded),
	    cmocka_unit_test(replaced_head_shares_the_body),
	    cmocka_unit_test(replaced_head_without_room),
	    cmocka_unit_test(replaced_head_evicts_many),
	    cmocka_unit_test(waits_notified_once),
	    cmocka_unit_test(purges),
	    cmocka_unit_test(readers_follow_a_fill),
	    cmocka_unit_test(churn_many_keys_from_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
