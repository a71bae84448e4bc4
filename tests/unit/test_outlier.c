/*
 * test_outlier.c - outlier ejection happens once per episode: answers to requests that were
 * in flight when a backend was ejected neither eject it again nor start a run of 5xx, and
 * a new episode after it came back may eject it again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "policy/outlier.h"

static void never_ejected_may_be(void **state)
{
	(void)state;
	assert_true(outlier_answer_is_news(1000, 0));
	assert_true(outlier_may_eject(1000, 500, 0, 0));
	/* out already (a passive mark): not now */
	assert_false(outlier_may_eject(1000, 500, 0, 2000));
	assert_true(outlier_may_eject(2000, 500, 0, 2000));
}

static void in_flight_answers_do_not_eject_again(void **state)
{
	(void)state;
	/* ejected at 10000 for 3000 ms; four slow answers sent at 9500 arrive 10000..10250 */
	for (uint64_t now = 10000; now <= 10250; now += 50) {
		assert_false(outlier_answer_is_news(9500, 10000));
		assert_false(outlier_may_eject(now, 9500, 10000, 13000));
	}
	/* one still in flight after the ejection ended says nothing new either */
	assert_false(outlier_may_eject(14000, 9000, 10000, 13000));
	/* sent in the same millisecond it was ejected: in flight then */
	assert_false(outlier_answer_is_news(10000, 10000));
}

static void a_new_episode_may_eject(void **state)
{
	(void)state;
	/* back at 13000, a request sent at 13100 answers slowly at 13600 */
	assert_true(outlier_answer_is_news(13100, 10000));
	assert_true(outlier_may_eject(13600, 13100, 10000, 13000));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(never_ejected_may_be),
	    cmocka_unit_test(in_flight_answers_do_not_eject_again),
	    cmocka_unit_test(a_new_episode_may_eject),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
