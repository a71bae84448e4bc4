/*
 * test_prefix_feed.c - the ring of prompts' first blocks: entries come out in order and
 * whole, capped at PREFIX_FEED_BLOCKS; a reader a ring behind skips what was overwritten;
 * nothing is read twice or before it is written.
 */
#include "policy/prefix_feed.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

static void in_order_and_capped(void **state)
{
	(void)state;
	struct prefix_feed *f;
	uint64_t h[100], out[PREFIX_FEED_BLOCKS], cursor = 0;
	assert_int_equal(prefix_feed_new(&f), 0);
	for (int i = 0; i < 100; i++)
		h[i] = 1000 + (uint64_t)i;
	assert_int_equal(prefix_feed_take(f, &cursor, out), 0); /* empty */
	prefix_feed_push(f, h, 3);
	prefix_feed_push(f, h + 10, 100); /* capped */
	prefix_feed_push(f, h, 0);	  /* nothing */
	assert_int_equal(prefix_feed_take(f, &cursor, out), 3);
	assert_int_equal(out[0], 1000);
	assert_int_equal(out[2], 1002);
	assert_int_equal(prefix_feed_take(f, &cursor, out), PREFIX_FEED_BLOCKS);
	assert_int_equal(out[0], 1010);
	assert_int_equal(out[PREFIX_FEED_BLOCKS - 1], 1010 + PREFIX_FEED_BLOCKS - 1);
	assert_int_equal(prefix_feed_take(f, &cursor, out), 0);
	prefix_feed_free(f);
}

static void a_reader_a_ring_behind_skips(void **state)
{
	(void)state;
	struct prefix_feed *f;
	uint64_t out[PREFIX_FEED_BLOCKS], cursor = 0;
	assert_int_equal(prefix_feed_new(&f), 0);
	for (uint64_t i = 0; i < PREFIX_FEED_SLOTS + 10; i++)
		prefix_feed_push(f, &i, 1);
	/* the first ten are gone: the oldest left comes first, then the rest in order */
	for (uint64_t i = 10; i < PREFIX_FEED_SLOTS + 10; i++) {
		assert_int_equal(prefix_feed_take(f, &cursor, out), 1);
		assert_int_equal(out[0], i);
	}
	assert_int_equal(prefix_feed_take(f, &cursor, out), 0);
	prefix_feed_free(f);
}

static void an_entry_being_written_waits(void **state)
{
	(void)state;
	struct prefix_feed *f;
	uint64_t out[PREFIX_FEED_BLOCKS], cursor = 0, x = 5;
	assert_int_equal(prefix_feed_new(&f), 0);
	/* a writer that has claimed slot 0 and not finished: stamped odd */
	atomic_store(&f->head, 1);
	atomic_store(&f->slot[0].stamp, 1);
	assert_int_equal(prefix_feed_take(f, &cursor, out), 0);
	assert_int_equal(cursor, 0);
	atomic_store(&f->slot[0].n, 1);
	atomic_store(&f->slot[0].hash[0], x);
	atomic_store(&f->slot[0].stamp, 2);
	assert_int_equal(prefix_feed_take(f, &cursor, out), 1);
	assert_int_equal(out[0], 5);
	prefix_feed_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(in_order_and_capped),
	    cmocka_unit_test(a_reader_a_ring_behind_skips),
	    cmocka_unit_test(an_entry_being_written_waits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
