/*
 * test_kvcache.c - the simulator's block cache (sim/kvcache.h): the cached prefix of a chain,
 * least-recently-used eviction with a chain's deepest block going first, the stores and
 * removals it reports, and a table that stays right through many evictions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "sim/kvcache.h"

/* What the sink heard, flattened: +hash for a store, -hash for a removal, 0 between calls. */
struct heard {
	int64_t ev[256];
	size_t n;
	uint64_t parent[16]; /* each store's parent, 0 for none */
	size_t nstores;
};

static void on_removed(void *arg, const uint64_t *hash, size_t n)
{
	struct heard *h = arg;
	for (size_t i = 0; i < n; i++)
		h->ev[h->n++] = -(int64_t)hash[i];
	h->ev[h->n++] = 0;
}

static void on_stored(void *arg, const uint64_t *hash, size_t n, const uint64_t *parent)
{
	struct heard *h = arg;
	for (size_t i = 0; i < n; i++)
		h->ev[h->n++] = (int64_t)hash[i];
	h->ev[h->n++] = 0;
	h->parent[h->nstores++] = parent ? *parent : 0;
}

/* Admit hash[0..n) as the simulator does: match, then admit; returns the match. */
static size_t admit(struct kvcache *c, const uint64_t *hash, size_t n, struct heard *h)
{
	struct kvcache_sink sink = {on_removed, on_stored, h};
	size_t k = kvcache_match(c, hash, n);
	if (h)
		memset(h, 0, sizeof(*h));
	kvcache_admit(c, hash, n, k, h ? &sink : NULL);
	return k;
}

static void expect_list(const struct kvcache *c, const uint64_t *want, size_t n)
{
	uint64_t got[64];
	size_t k = kvcache_list(c, got, 64);
	assert_int_equal(k, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(got[i], want[i]);
}

static void prefix_runs_and_reports(void **state)
{
	(void)state;
	struct kvcache *c;
	struct heard h;
	assert_int_equal(kvcache_create(8, 64, &c), 0);
	const uint64_t a[] = {11, 12, 13}, b[] = {11, 12, 23, 24};
	assert_int_equal(admit(c, a, 3, &h), 0);
	/* one store of the whole chain, no parent */
	assert_int_equal(h.n, 4);
	assert_int_equal(h.ev[0], 11);
	assert_int_equal(h.ev[2], 13);
	assert_int_equal(h.nstores, 1);
	assert_int_equal(h.parent[0], 0);
	expect_list(c, (uint64_t[]){11, 12, 13}, 3);
	/* a conversation that shares two blocks: those hit, the two new ones stored after 12 */
	assert_int_equal(admit(c, b, 4, &h), 2);
	assert_int_equal(h.nstores, 1);
	assert_int_equal(h.parent[0], 12);
	assert_int_equal(h.ev[0], 23);
	assert_int_equal(h.ev[1], 24);
	expect_list(c, (uint64_t[]){11, 12, 23, 24, 13}, 5);
	assert_int_equal(kvcache_used(c), 5);
	/* the same again: all hit, nothing to tell */
	assert_int_equal(admit(c, b, 4, &h), 4);
	assert_int_equal(h.n, 0);
	kvcache_destroy(c);
}

static void evicts_least_recent_deepest_first(void **state)
{
	(void)state;
	struct kvcache *c;
	struct heard h;
	assert_int_equal(kvcache_create(4, 64, &c), 0);
	const uint64_t a[] = {1, 2, 3}, b[] = {7, 8}, d[] = {1, 2};
	admit(c, a, 3, NULL);
	/* b needs 2 blocks, one is free: a's deepest block goes, then b is stored */
	assert_int_equal(admit(c, b, 2, &h), 0);
	assert_int_equal(h.ev[0], -3);
	assert_int_equal(h.ev[1], 0);
	assert_int_equal(h.ev[2], 7);
	assert_int_equal(h.ev[3], 8);
	expect_list(c, (uint64_t[]){7, 8, 1, 2}, 4);
	/* a's head survived: its first two blocks still hit, and become most recent */
	assert_int_equal(kvcache_match(c, a, 3), 2);
	assert_int_equal(admit(c, d, 2, &h), 2);
	expect_list(c, (uint64_t[]){1, 2, 7, 8}, 4);
	/* a again: its third block comes back in place of b's deepest */
	assert_int_equal(admit(c, a, 3, &h), 2);
	assert_int_equal(h.ev[0], -8);
	assert_int_equal(h.ev[2], 3);
	assert_int_equal(h.parent[0], 2);
	expect_list(c, (uint64_t[]){1, 2, 3, 7}, 4);
	kvcache_destroy(c);
}

static void longer_than_the_cache_keeps_its_head(void **state)
{
	(void)state;
	struct kvcache *c;
	struct heard h;
	assert_int_equal(kvcache_create(3, 64, &c), 0);
	const uint64_t x[] = {5, 6}, y[] = {31, 32, 33, 34, 35};
	admit(c, x, 2, NULL);
	assert_int_equal(admit(c, y, 5, &h), 0);
	/* only 3 fit: x goes, y's first three are stored */
	assert_int_equal(h.ev[0], -6);
	assert_int_equal(h.ev[1], -5);
	assert_int_equal(h.ev[3], 31);
	assert_int_equal(h.ev[5], 33);
	expect_list(c, (uint64_t[]){31, 32, 33}, 3);
	assert_int_equal(kvcache_match(c, y, 5), 3);
	kvcache_destroy(c);
}

static void table_survives_churn(void **state)
{
	(void)state;
	struct kvcache *c;
	assert_int_equal(kvcache_create(100, 64, &c), 0);
	uint64_t chain[10];
	/* 5000 chains of 10 blocks through 100 blocks: every lookup stays right */
	for (uint64_t r = 0; r < 5000; r++) {
		for (int i = 0; i < 10; i++)
			chain[i] = (r * 10 + (uint64_t)i) * 0x100000001b3ull + 1;
		assert_int_equal(admit(c, chain, 10, NULL), 0);
		assert_int_equal(kvcache_match(c, chain, 10), 10);
		assert_int_equal(kvcache_used(c), r < 9 ? (r + 1) * 10 : 100);
	}
	/* the last ten chains are all there, the one before not */
	for (uint64_t r = 4990; r < 5000; r++) {
		for (int i = 0; i < 10; i++)
			chain[i] = (r * 10 + (uint64_t)i) * 0x100000001b3ull + 1;
		assert_true(kvcache_contains(c, chain[0]) && kvcache_contains(c, chain[9]));
	}
	assert_false(kvcache_contains(c, (4989 * 10) * 0x100000001b3ull + 1));
	kvcache_destroy(c);
}

static void refuses_no_capacity(void **state)
{
	(void)state;
	struct kvcache *c;
	assert_int_equal(kvcache_create(0, 64, &c), -22);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(prefix_runs_and_reports),
	    cmocka_unit_test(evicts_least_recent_deepest_first),
	    cmocka_unit_test(longer_than_the_cache_keeps_its_head),
	    cmocka_unit_test(table_survives_churn),
	    cmocka_unit_test(refuses_no_capacity),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
