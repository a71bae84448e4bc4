/*
 * test_prefix_pending.c - the blocks a pick sent, beside an exact index: found with the
 * index's blocks as one prefix, confirmed or dropped by what the engine says, expired when
 * it says nothing in time, voided by a clear, and bounded in memory whatever is sent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>

#include "policy/prefix_pending.h"

#define TTL 5000
#define T0 1000000 /* a monotonic clock's ms */

static void chain(uint64_t *h, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		h[i] = (seed * 1000003u + i + 1) * 0x9e3779b97f4a7c15u;
}

static void pending_extends_the_index(void **state)
{
	(void)state;
	struct prefix_index *ix;
	struct prefix_pending *p;
	assert_int_equal(prefix_index_new(1024, &ix), 0);
	assert_int_equal(prefix_pending_new(256, TTL, &p), 0);
	uint64_t a[40];
	chain(a, 40, 1);
	assert_int_equal(prefix_pending_match(ix, p, a, 40, T0), 0);
	prefix_index_insert(ix, a, 10); /* confirmed: 10 */
	prefix_pending_add(p, a + 10, 20, T0);
	assert_int_equal(prefix_index_match(ix, a, 40), 10);
	assert_int_equal(prefix_pending_match(ix, p, a, 40, T0), 30);
	assert_int_equal(prefix_pending_match(ix, p, a, 25, T0 + 1), 25);
	assert_int_equal(prefix_pending_count(p, T0), 20);
	/* pending alone (the engine has nothing yet): a prefix too */
	uint64_t b[12];
	chain(b, 12, 2);
	prefix_pending_add(p, b, 12, T0);
	assert_int_equal(prefix_pending_match(ix, p, b, 12, T0), 12);
	/* BlockStored for 10..19: confirmed, out of the table, still held */
	prefix_index_insert(ix, a + 10, 10);
	prefix_pending_remove(p, a + 10, 10);
	assert_int_equal(prefix_pending_count(p, T0), 22);
	assert_int_equal(prefix_pending_match(ix, p, a, 40, T0), 30);
	/* BlockRemoved for 15..29, the chain's tail (an engine evicts from there): gone from
	 * both, pending or stored, the prefix ends there */
	prefix_index_remove(ix, a + 15, 15);
	prefix_pending_remove(p, a + 15, 15);
	assert_int_equal(prefix_pending_match(ix, p, a, 40, T0), 15);
	assert_int_equal(prefix_pending_count(p, T0), 12);
	prefix_pending_free(p);
	prefix_index_free(ix);
}

static void unconfirmed_blocks_expire(void **state)
{
	(void)state;
	struct prefix_index *ix;
	struct prefix_pending *p;
	assert_int_equal(prefix_index_new(1024, &ix), 0);
	assert_int_equal(prefix_pending_new(256, TTL, &p), 0);
	uint64_t a[20];
	chain(a, 20, 3);
	prefix_pending_add(p, a, 20, T0);
	assert_int_equal(prefix_pending_match(ix, p, a, 20, T0 + TTL - 1), 20);
	assert_int_equal(prefix_pending_match(ix, p, a, 20, T0 + TTL), 0); /* never stored */
	assert_int_equal(prefix_pending_count(p, T0 + TTL), 0);
	/* sent again: pending from the new pick */
	prefix_pending_add(p, a, 8, T0 + TTL);
	assert_int_equal(prefix_pending_match(ix, p, a, 20, T0 + TTL + 10), 8);
	/* a clear voids what was sent until then, not what is sent after */
	prefix_pending_clear(p, T0 + TTL + 20);
	assert_int_equal(prefix_pending_match(ix, p, a, 20, T0 + TTL + 20), 0);
	prefix_pending_add(p, a, 4, T0 + TTL + 21);
	assert_int_equal(prefix_pending_match(ix, p, a, 20, T0 + TTL + 21), 4);
	prefix_pending_free(p);
	prefix_index_free(ix);
}

static void bounded_memory(void **state)
{
	(void)state;
	struct prefix_index *ix;
	struct prefix_pending *p;
	assert_int_equal(prefix_index_new(64, &ix), 0);
	assert_int_equal(prefix_pending_new(64, TTL, &p), 0);
	uint64_t h[16];
	for (uint64_t k = 0; k < 10000; k++) {
		chain(h, 16, 100 + k);
		prefix_pending_add(p, h, 16, T0 + k / 100);
	}
	assert_true(prefix_pending_count(p, T0 + 100) <= 64);
	assert_int_equal(prefix_pending_match(ix, p, h, 16, T0 + 100), 16); /* the latest kept */
	prefix_pending_free(p);
	prefix_index_free(ix);
	assert_int_equal(prefix_pending_new(0, TTL, &p), -ENOMEM);
	assert_int_equal(prefix_pending_new(16, 0, &p), -ENOMEM);
	prefix_pending_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(pending_extends_the_index),
	    cmocka_unit_test(unconfirmed_blocks_expire),
	    cmocka_unit_test(bounded_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
