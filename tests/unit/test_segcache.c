/*
 * test_segcache.c - the segment cache (tok/segcache.h) on its own: a put found again, a miss
 * for other bytes, another length or the other place under the same key (a forced collision
 * of the key gives a miss, never the other segment's ids), the oldest records evicted once the
 * ring has gone round, a record hit in the older half kept past that, segments too short or
 * too long not kept, and a budget of 0 keeping nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "tok/segcache.h"

#define LEN 1024 /* a segment's bytes: a record of 1,056 */

/* A segment of LEN bytes told apart by <i>, and its 8 ids. */
static void segment(unsigned i, uint8_t *p, uint32_t *ids)
{
	memset(p, 'a' + (int)(i % 26), LEN);
	memcpy(p, &i, sizeof(i));
	for (uint32_t k = 0; k < 8; k++)
		ids[k] = i * 100 + k;
}

static int found(struct segcache *c, uint64_t key, int first, const uint8_t *p, size_t n,
		 uint32_t want0, size_t want_n)
{
	const uint32_t *ids;
	size_t k;
	if (!segcache_find(c, key, first, p, n, &ids, &k))
		return 0;
	assert_int_equal(k, want_n);
	assert_int_equal(ids[0], want0);
	return 1;
}

static void test_hit_and_misses(void **state)
{
	(void)state;
	struct segcache c;
	uint8_t p[LEN], q[LEN];
	uint32_t ids[8];
	segcache_init(&c, 1 << 16);
	segment(1, p, ids);
	assert_false(found(&c, 7, 0, p, LEN, 0, 0)); /* empty */
	assert_int_equal(segcache_put(&c, 7, 0, p, LEN, ids, 8), 0);
	assert_true(found(&c, 7, 0, p, LEN, 100, 8));
	assert_false(found(&c, 8, 0, p, LEN, 0, 0));	 /* another key */
	assert_false(found(&c, 7, 1, p, LEN, 0, 0));	 /* at the start, where it was not */
	assert_false(found(&c, 7, 0, p, LEN - 1, 0, 0)); /* another length */
	memcpy(q, p, LEN);
	q[40] ^= 1;
	assert_false(found(&c, 7, 0, q, LEN, 0, 0)); /* the same key, other bytes */
	assert_int_equal(c.hits, 1);
	assert_int_equal(c.misses, 5);
	/* too short to be kept, and no ids (a segment of spaces can encode to one) */
	assert_int_equal(segcache_put(&c, 9, 0, p, SEGCACHE_MIN - 1, ids, 1), 0);
	assert_false(found(&c, 9, 0, p, SEGCACHE_MIN - 1, 0, 0));
	assert_int_equal(segcache_put(&c, 10, 0, p, 20, ids, 0), 0);
	const uint32_t *got;
	size_t k = 9;
	assert_true(segcache_find(&c, 10, 0, p, 20, &got, &k));
	assert_int_equal(k, 0);
	segcache_free(&c);
}

/* Every key the same (the key_mask a test sets): each segment still gives its own ids. */
static void test_forced_collision(void **state)
{
	(void)state;
	struct segcache c;
	uint8_t p[4][LEN];
	uint32_t ids[4][8];
	segcache_init(&c, 1 << 16);
	c.key_mask = 0;
	for (unsigned i = 0; i < 4; i++) {
		segment(i, p[i], ids[i]);
		assert_int_equal(segcache_put(&c, 1000 + i, 0, p[i], LEN, ids[i], 8), 0);
	}
	for (unsigned i = 0; i < 4; i++)
		assert_true(found(&c, 5000 + i, 0, p[i], LEN, i * 100, 8));
	uint8_t other[LEN];
	uint32_t oids[8];
	segment(9, other, oids);
	assert_false(found(&c, 1000, 0, other, LEN, 0, 0));
	/* a fifth in the bucket of 4 evicts the oldest */
	assert_int_equal(segcache_put(&c, 1, 0, other, LEN, oids, 8), 0);
	assert_false(found(&c, 0, 0, p[0], LEN, 0, 0));
	assert_true(found(&c, 0, 0, other, LEN, 900, 8));
	segcache_free(&c);
}

/* Records past what the ring holds evict the oldest; one hit in the older half moves to the
 * front and outlives the records written with it. (64 KiB: 64 slots, 16 buckets of 4 ways
 * for keys 0-3, 4-7...; a ring of about 60 records.) */
static void test_eviction(void **state)
{
	(void)state;
	struct segcache c;
	uint8_t p[LEN];
	uint32_t ids[8];
	unsigned i = 0;
	segcache_init(&c, 1 << 16);
	for (; i < 2 || c.head < c.cap * 3 / 4; i++) {
		segment(i, p, ids);
		assert_int_equal(segcache_put(&c, i, i == 1, p, LEN, ids, 8), 0);
	}
	segment(1, p, ids);
	assert_true(found(&c, 1, 1, p, LEN, 100, 8)); /* moved to the front */
	for (; c.head < c.cap + 3 * 1056; i++) {      /* over where 0-2 were */
		segment(i, p, ids);
		assert_int_equal(segcache_put(&c, i, 0, p, LEN, ids, 8), 0);
	}
	segment(0, p, ids);
	assert_false(found(&c, 0, 0, p, LEN, 0, 0)); /* overwritten */
	segment(2, p, ids);
	assert_false(found(&c, 2, 0, p, LEN, 0, 0));
	segment(1, p, ids);
	assert_true(found(&c, 1, 1, p, LEN, 100, 8)); /* moved: still there */
	segment(i - 1, p, ids);
	assert_true(found(&c, i - 1, 0, p, LEN, (i - 1) * 100, 8)); /* the newest */
	for (; c.head < c.cap * 3; i++) {
		segment(i, p, ids);
		assert_int_equal(segcache_put(&c, i, 0, p, LEN, ids, 8), 0);
	}
	segment(1, p, ids);
	assert_false(found(&c, 1, 1, p, LEN, 0, 0)); /* not hit again: gone in its turn */
	/* a segment past a quarter of the ring is not kept */
	static uint8_t big[1 << 14];
	assert_int_equal(segcache_put(&c, 77, 0, big, sizeof(big), ids, 1), -E2BIG);
	assert_false(found(&c, 77, 0, big, sizeof(big), 0, 0));
	segcache_free(&c);
}

static void test_off(void **state)
{
	(void)state;
	struct segcache c;
	uint8_t p[LEN];
	uint32_t ids[8];
	segcache_init(&c, 0);
	segment(1, p, ids);
	assert_int_equal(segcache_put(&c, 7, 0, p, LEN, ids, 8), 0);
	assert_false(found(&c, 7, 0, p, LEN, 0, 0));
	assert_null(c.ring);
	segcache_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hit_and_misses),
	    cmocka_unit_test(test_forced_collision),
	    cmocka_unit_test(test_eviction),
	    cmocka_unit_test(test_off),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
