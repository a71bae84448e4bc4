/*
 * test_log.c - the per-call-site rate limit of log.h, driven with a made-up clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/log.h"

static void first_line_passes_then_the_rest_wait(void **state)
{
	(void)state;
	struct log_rate r = {0};
	unsigned dropped = 99;
	assert_int_equal(log_rate_pass(&r, 1000, 5000, &dropped), 1);
	assert_int_equal(dropped, 0);
	for (uint64_t t = 5000; t < 6000; t += 100)
		assert_int_equal(log_rate_pass(&r, 1000, t, &dropped), 0);
	assert_int_equal(log_rate_pass(&r, 1000, 6000, &dropped), 1);
	assert_int_equal(dropped, 10);
	assert_int_equal(log_rate_pass(&r, 1000, 7000, &dropped), 1);
	assert_int_equal(dropped, 0);
}

static void sites_are_independent(void **state)
{
	(void)state;
	struct log_rate a = {0}, b = {0};
	unsigned dropped;
	assert_int_equal(log_rate_pass(&a, 10000, 100, &dropped), 1);
	assert_int_equal(log_rate_pass(&b, 10000, 100, &dropped), 1);
	assert_int_equal(log_rate_pass(&a, 10000, 200, &dropped), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(first_line_passes_then_the_rest_wait),
	    cmocka_unit_test(sites_are_independent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
