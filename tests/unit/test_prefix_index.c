/*
 * test_prefix_index.c - the per-backend KV-cache estimate: the longest held prefix, LRU
 * aging at the engine's capacity (used blocks stay, unused ones go), removal and clearing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>

#include "policy/prefix_index.h"

/* A chain of <n> block hashes for conversation <seed> (distinct seeds never collide). */
static void chain(uint64_t *h, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		h[i] = (seed * 1000003u + i + 1) * 0x9e3779b97f4a7c15u;
}

static void longest_prefix(void **state)
{
	(void)state;
	struct prefix_index *ix;
	assert_int_equal(prefix_index_new(1024, &ix), 0);
	uint64_t a[40], b[40];
	chain(a, 40, 1);
	assert_int_equal(prefix_index_match(ix, a, 40), 0);
	prefix_index_insert(ix, a, 30);
	assert_int_equal(prefix_index_match(ix, a, 40), 30);
	assert_int_equal(prefix_index_match(ix, a, 12), 12);
	/* another prompt sharing the first 8 blocks */
	memcpy(b, a, 8 * sizeof(*b));
	chain(b + 8, 32, 2);
	assert_int_equal(prefix_index_match(ix, b, 40), 8);
	assert_int_equal(prefix_index_count(ix), 30);
	prefix_index_remove(ix, a + 20, 10);
	assert_int_equal(prefix_index_match(ix, a, 40), 20);
	prefix_index_clear(ix);
	assert_int_equal(prefix_index_match(ix, a, 40), 0);
	assert_int_equal(prefix_index_count(ix), 0);
	prefix_index_clear(ix); /* twice: still nothing, and no sweep needed */
	assert_int_equal(prefix_index_match(ix, b, 40), 0);
	prefix_index_insert(ix, a, 10); /* stored again after the clear */
	assert_int_equal(prefix_index_match(ix, a, 40), 10);
	assert_int_equal(prefix_index_count(ix), 10);
	prefix_index_free(ix);
}

/* A reload's new index learns the old one's: the same prefixes held, the same aging clock
 * (so what was about to age out still does); indexes of other sizes are refused whole. */
static void copy_carries_blocks_and_age(void **state)
{
	(void)state;
	struct prefix_index *from, *to, *other;
	assert_int_equal(prefix_index_new(64, &from), 0);
	assert_int_equal(prefix_index_new(64, &to), 0);
	assert_int_equal(prefix_index_new(128, &other), 0);
	uint64_t a[16], b[60];
	chain(a, 16, 1);
	chain(b, 60, 2);
	prefix_index_insert(from, a, 16);
	assert_int_equal(prefix_index_copy(to, from), 0);
	assert_int_equal(prefix_index_match(to, a, 16), 16);
	assert_int_equal(prefix_index_count(to), 16);
	/* 60 newer blocks: <a> is beyond the capacity of 64 in both, its first 12 gone */
	prefix_index_insert(from, b, 60);
	prefix_index_insert(to, b, 60);
	assert_int_equal(prefix_index_match(to, a, 16), prefix_index_match(from, a, 16));
	assert_int_equal(prefix_index_copy(other, from), -EINVAL);
	assert_int_equal(prefix_index_count(other), 0);
	prefix_index_free(from);
	prefix_index_free(to);
	prefix_index_free(other);
}

static void ages_like_lru(void **state)
{
	(void)state;
	struct prefix_index *ix;
	assert_int_equal(prefix_index_new(64, &ix), 0);
	uint64_t hot[16], cold[16], other[16];
	chain(hot, 16, 10);
	chain(cold, 16, 11);
	prefix_index_insert(ix, hot, 16);
	prefix_index_insert(ix, cold, 16);
	/* 8 rounds of 16 new blocks each (twice the capacity), the hot prompt used between */
	for (uint64_t r = 0; r < 8; r++) {
		chain(other, 16, 100 + r);
		prefix_index_insert(ix, other, 16);
		prefix_index_insert(ix, hot, 16);
	}
	assert_int_equal(prefix_index_match(ix, hot, 16), 16);
	assert_int_equal(prefix_index_match(ix, cold, 16), 0); /* the engine dropped it */
	/* it may believe a few more than the engine holds (a lower bound on age), never
	 * more than its table */
	assert_true(prefix_index_count(ix) <= 2 * 64);
	prefix_index_free(ix);
}

static void bounded_memory_many_prompts(void **state)
{
	(void)state;
	struct prefix_index *ix;
	assert_int_equal(prefix_index_new(100, &ix), 0);
	uint64_t h[8];
	for (uint64_t r = 0; r < 10000; r++) {
		chain(h, 8, r);
		prefix_index_insert(ix, h, 8);
	}
	assert_true(prefix_index_count(ix) <= 100);	   /* nothing re-used: exact */
	assert_int_equal(prefix_index_match(ix, h, 8), 8); /* the last one is there */
	prefix_index_free(ix);
	assert_int_equal(prefix_index_new(0, &ix), -ENOMEM);
	prefix_index_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(longest_prefix),
	    cmocka_unit_test(copy_carries_blocks_and_age),
	    cmocka_unit_test(ages_like_lru),
	    cmocka_unit_test(bounded_memory_many_prompts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
