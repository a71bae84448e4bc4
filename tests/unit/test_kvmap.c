/*
 * test_kvmap.c - engine block hash -> own hash: put, get, take, a full map refusing a new
 * hash (but taking a known one), and many takes in one probe run leaving every other entry
 * findable (deletion by shifting back), clears that leave nothing behind however many come,
 * and hashes that differ only in their high bits (an engine's choice) kept apart.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "control/kvmap.h"

#include <errno.h>

static void put_get_take(void **state)
{
	(void)state;
	struct kvmap *m;
	uint64_t own = 0;
	assert_int_equal(kvmap_new(4, &m), 0);
	assert_int_equal(kvmap_put(m, 10, 100), 0);
	assert_int_equal(kvmap_put(m, 0, 7), 0); /* 0 is a hash like another */
	assert_true(kvmap_get(m, 10, &own) && own == 100);
	assert_true(kvmap_get(m, 0, &own) && own == 7);
	assert_false(kvmap_get(m, 11, &own));
	assert_int_equal(kvmap_put(m, 10, 101), 0); /* replaced, not added */
	assert_int_equal(kvmap_count(m), 2);
	assert_int_equal(kvmap_put(m, 20, 1), 0);
	assert_int_equal(kvmap_put(m, 30, 1), 0);
	assert_int_equal(kvmap_put(m, 40, 1), -ENOSPC); /* full */
	assert_int_equal(kvmap_put(m, 30, 2), 0);	/* a known one still */
	assert_true(kvmap_take(m, 10, &own) && own == 101);
	assert_false(kvmap_take(m, 10, &own));
	assert_int_equal(kvmap_put(m, 40, 1), 0);
	kvmap_clear(m);
	assert_int_equal(kvmap_count(m), 0);
	assert_false(kvmap_get(m, 0, &own));
	kvmap_free(m);
}

static void takes_keep_the_rest_findable(void **state)
{
	(void)state;
	struct kvmap *m;
	uint64_t own;
	assert_int_equal(kvmap_new(1000, &m), 0);
	for (uint64_t i = 0; i < 1000; i++)
		assert_int_equal(kvmap_put(m, i * 0x10000, i), 0);
	for (uint64_t i = 0; i < 1000; i += 3)
		assert_true(kvmap_take(m, i * 0x10000, &own) && own == i);
	for (uint64_t i = 0; i < 1000; i++)
		assert_int_equal(kvmap_get(m, i * 0x10000, &own), i % 3 != 0);
	kvmap_free(m);
}

static void clears_leave_nothing(void **state)
{
	(void)state;
	struct kvmap *m;
	uint64_t own;
	assert_int_equal(kvmap_new(8, &m), 0);
	for (uint64_t round = 0; round < 100000; round++) {
		assert_int_equal(kvmap_put(m, round, round + 1), 0);
		assert_int_equal(kvmap_put(m, round + 1000000, 1), 0);
		assert_true(kvmap_take(m, round + 1000000, &own) && own == 1);
		assert_int_equal(kvmap_count(m), 1);
		kvmap_clear(m);
		assert_int_equal(kvmap_count(m), 0);
		assert_false(kvmap_get(m, round, &own));
		assert_false(kvmap_take(m, round, &own));
	}
	for (uint64_t i = 0; i < 8; i++) /* the whole capacity again, every one findable */
		assert_int_equal(kvmap_put(m, i << 50, i), 0);
	assert_int_equal(kvmap_put(m, 9ull << 50, 9), -ENOSPC);
	for (uint64_t i = 0; i < 8; i++)
		assert_true(kvmap_get(m, i << 50, &own) && own == i);
	kvmap_free(m);
}

static void high_bit_hashes_kept_apart(void **state)
{
	(void)state;
	struct kvmap *m;
	uint64_t own;
	size_t n = 1 << 16;
	assert_int_equal(kvmap_new(n, &m), 0);
	for (uint64_t i = 1; i <= n; i++)
		assert_int_equal(kvmap_put(m, i << 40, i), 0);
	/* spread over the table, not lined up in one run (which put all 65,536 in a run of
	 * 65,536: each put walked it): a table half full whose homes are random has runs of a
	 * few dozen at most (the bound is loose on purpose, not a timing) */
	assert_true(kvmap_longest_probe(m) < 256);
	assert_int_equal(kvmap_put(m, (n + 1) << 40, 0), -ENOSPC);
	for (uint64_t i = 1; i <= n; i += 2)
		assert_true(kvmap_take(m, i << 40, &own) && own == i);
	for (uint64_t i = 1; i <= n; i++)
		assert_int_equal(kvmap_get(m, i << 40, &own), i % 2 == 0);
	kvmap_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(put_get_take),
	    cmocka_unit_test(takes_keep_the_rest_findable),
	    cmocka_unit_test(clears_leave_nothing),
	    cmocka_unit_test(high_bit_hashes_kept_apart),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
