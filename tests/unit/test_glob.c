/*
 * test_glob.c - '*' and '?' patterns: runs of any length (none included), one byte, case
 * counts, the whole name must match, and a pattern with many stars stays linear.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/glob.h"

static int m(const char *pat, const char *s)
{
	return glob_match(pat, s, strlen(s));
}

static void exact_and_case(void **state)
{
	(void)state;
	assert_true(m("llama-3", "llama-3"));
	assert_false(m("llama-3", "llama-3-8b"));
	assert_false(m("llama-3", "llama-"));
	assert_false(m("llama-3", "Llama-3"));
	assert_false(m("x", ""));
	assert_true(m("", ""));
}

static void stars_and_marks(void **state)
{
	(void)state;
	assert_true(m("llama-3-*", "llama-3-8b"));
	assert_true(m("llama-3-*", "llama-3-"));
	assert_false(m("llama-3-*", "llama-2-7b"));
	assert_true(m("*", ""));
	assert_true(m("*", "anything"));
	assert_true(m("*-instruct", "qwen-2-instruct"));
	assert_false(m("*-instruct", "qwen-2-instruct-v2"));
	assert_true(m("a*b*c", "a-b-b-c"));
	assert_true(m("a*b*c", "abc"));
	assert_false(m("a*b*c", "acb"));
	assert_true(m("llama-?-8b", "llama-3-8b"));
	assert_false(m("llama-?-8b", "llama-31-8b"));
	assert_false(m("?", ""));
	assert_true(m("**", "x"));
	assert_true(m("*a", "aaaa"));
	assert_true(m("meta-llama/*", "meta-llama/Llama-3-8B"));
}

static void many_stars_stay_linear(void **state)
{
	(void)state;
	char name[4097];
	memset(name, 'a', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	assert_false(m("*a*a*a*a*a*a*a*a*a*a*b", name));
	assert_true(m("*a*a*a*a*a*a*a*a*a*a*", name));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(exact_and_case),
	    cmocka_unit_test(stars_and_marks),
	    cmocka_unit_test(many_stars_stay_linear),
	};
	return cmocka_run_group_tests_name("glob", tests, NULL, NULL);
}
