/*
 * test_slotwant.c - what an instance says its queue waits for, backend by backend: a request
 * waiting for no backend in particular is counted once over the capped backends, not once on
 * each (which asked every backend's deal for a slot for it, and woke every holder).
 */
#include "control/slotwant.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

/* the sum over the backends of what is said for <loose> loose waiters and no own */
static unsigned said(unsigned loose, size_t ncapped, size_t turn)
{
	unsigned sum = 0;
	for (size_t k = 0; k < ncapped; k++)
		sum += slotwant_waiting(0, loose, k, ncapped, turn);
	return sum;
}

static void one_loose_waiter_is_counted_once(void **state)
{
	(void)state;
	/* one request waiting for any of 8 backends asks one of them, not all 8 */
	assert_int_equal(said(1, 8, 0), 1);
	assert_int_equal(said(1, 8, 5), 1);
	for (unsigned loose = 0; loose < 40; loose++)
		for (size_t n = 1; n <= 9; n++)
			for (size_t turn = 0; turn < 2 * n; turn++)
				assert_int_equal(said(loose, n, turn), loose);
}

static void loose_waiters_are_spread_evenly(void **state)
{
	(void)state;
	/* 19 over 8: 2 each, the 3 left over one each from the turn on (turn 5: 5, 6, 7) */
	for (size_t k = 0; k < 8; k++)
		assert_int_equal(slotwant_waiting(0, 19, k, 8, 5), k >= 5 ? 3 : 2);
	assert_int_equal(slotwant_waiting(0, 19, 4, 8, 5), 2);
	assert_int_equal(slotwant_waiting(0, 19, 5, 8, 5), 3);
	assert_int_equal(slotwant_waiting(0, 19, 7, 8, 5), 3);
	assert_int_equal(slotwant_waiting(0, 19, 0, 8, 5), 2);
	/* the remainder wraps round: turn 7 gives backends 7, 0, 1 the three */
	assert_int_equal(slotwant_waiting(0, 19, 7, 8, 7), 3);
	assert_int_equal(slotwant_waiting(0, 19, 1, 8, 7), 3);
	assert_int_equal(slotwant_waiting(0, 19, 2, 8, 7), 2);
}

static void the_remainder_moves_with_the_turn(void **state)
{
	(void)state;
	/* one loose waiter over 3 backends: each backend is the one asked one turn in three */
	for (size_t k = 0; k < 3; k++) {
		unsigned asked = 0;
		for (size_t turn = 0; turn < 3; turn++)
			asked += slotwant_waiting(0, 1, k, 3, turn);
		assert_int_equal(asked, 1);
	}
	assert_int_equal(slotwant_waiting(0, 1, 2, 3, 2), 1);
	assert_int_equal(slotwant_waiting(0, 1, 2, 3, 5), 1); /* (the turn taken mod ncapped) */
}

static void a_backends_own_waiters_are_all_said(void **state)
{
	(void)state;
	assert_int_equal(slotwant_waiting(4, 0, 3, 8, 0), 4);
	assert_int_equal(slotwant_waiting(4, 1, 3, 8, 3), 5);
	assert_int_equal(slotwant_waiting(4, 1, 3, 8, 4), 4);
	assert_int_equal(slotwant_waiting(7, 5, 0, 0, 0), 7); /* no capped backend: its own */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(one_loose_waiter_is_counted_once),
	    cmocka_unit_test(loose_waiters_are_spread_evenly),
	    cmocka_unit_test(the_remainder_moves_with_the_turn),
	    cmocka_unit_test(a_backends_own_waiters_are_all_said),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
