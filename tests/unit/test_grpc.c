/*
 * test_grpc.c - gRPC's content types, the status codes of the proxy's own answers, messages
 * and timeouts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "http/grpc.h"

static int is(const char *v)
{
	return http_grpc_is(v, strlen(v));
}

static void test_content_types(void **state)
{
	(void)state;
	assert_true(is("application/grpc"));
	assert_true(is("application/grpc+proto"));
	assert_true(is("application/grpc;charset=utf-8"));
	assert_false(is("application/grpc-web"));
	assert_false(is("application/json"));
	assert_false(is("application/grp"));
	assert_true(is("Application/GRPC+proto"));
	assert_true(is("application/grpc ; charset=utf-8"));
	assert_false(is("application/grpc x"));
}

static enum http_grpc_web web(const char *v, size_t *rest)
{
	return http_grpc_web_kind(v, strlen(v), rest);
}

static void test_grpc_web_content_types(void **state)
{
	(void)state;
	size_t rest = 0;
	assert_int_equal(web("application/grpc-web", &rest), HTTP_GRPC_WEB_BINARY);
	assert_int_equal(rest, 20);
	assert_int_equal(web("application/grpc-web+proto", &rest), HTTP_GRPC_WEB_BINARY);
	assert_int_equal(web("application/grpc-web-text", &rest), HTTP_GRPC_WEB_TEXT);
	assert_int_equal(rest, 25);
	/* any case, with a suffix and parameters (whitespace before ';' allowed) */
	assert_int_equal(web("Application/gRPC-Web-Text+proto; charset=utf-8", &rest),
			 HTTP_GRPC_WEB_TEXT);
	assert_int_equal(rest, 25);
	assert_int_equal(web("APPLICATION/GRPC-WEB+proto ;charset=x", &rest), HTTP_GRPC_WEB_BINARY);
	assert_int_equal(web("application/grpc-web\t; a=b", &rest), HTTP_GRPC_WEB_BINARY);
	/* not gRPC-Web */
	assert_int_equal(web("application/grpc", &rest), HTTP_GRPC_WEB_NONE);
	assert_int_equal(web("application/grpc-webx", &rest), HTTP_GRPC_WEB_NONE);
	assert_int_equal(web("application/grpc-web-textx", &rest), HTTP_GRPC_WEB_NONE);
	assert_int_equal(web("application/grpc-web x", &rest), HTTP_GRPC_WEB_NONE);
	assert_int_equal(web("application/grpc-web-text-base64", &rest), HTTP_GRPC_WEB_NONE);
}

static void test_status_codes(void **state)
{
	(void)state;
	static const int map[][2] = {{503, 14}, {502, 14}, {504, 4},  {408, 4}, {429, 8},
				     {413, 8},	{431, 8},  {401, 16}, {403, 7}, {404, 12},
				     {400, 13}, {500, 13}, {418, 2}};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		assert_int_equal(http_grpc_status(map[i][0]), map[i][1]);
}

static void test_messages(void **state)
{
	(void)state;
	char out[16];
	size_t n = http_grpc_message(out, sizeof(out), "a b%\n");
	assert_int_equal(n, 9);
	assert_memory_equal(out, "a b%25%0A", 9);
	/* cut at a whole character */
	assert_int_equal(http_grpc_message(out, 4, "ab\n"), 2);
}

static void test_timeouts(void **state)
{
	(void)state;
	uint64_t ms = 0;
	assert_int_equal(http_grpc_timeout_ms("250m", 4, &ms), 0);
	assert_true(ms == 250);
	assert_int_equal(http_grpc_timeout_ms("2S", 2, &ms), 0);
	assert_true(ms == 2000);
	assert_int_equal(http_grpc_timeout_ms("1H", 2, &ms), 0);
	assert_true(ms == 3600000);
	assert_int_equal(http_grpc_timeout_ms("1500u", 5, &ms), 0);
	assert_true(ms == 2);
	assert_int_equal(http_grpc_timeout_ms("1n", 2, &ms), 0);
	assert_true(ms == 1);
	assert_int_equal(http_grpc_timeout_ms("99999999S", 9, &ms), 0);
	assert_int_equal(http_grpc_timeout_ms("123456789S", 10, &ms), -1); /* 9 digits */
	assert_int_equal(http_grpc_timeout_ms("S", 1, &ms), -1);
	assert_int_equal(http_grpc_timeout_ms("10x", 3, &ms), -1);
	assert_int_equal(http_grpc_timeout_ms("-1S", 3, &ms), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_content_types), cmocka_unit_test(test_grpc_web_content_types),
	    cmocka_unit_test(test_status_codes),  cmocka_unit_test(test_messages),
	    cmocka_unit_test(test_timeouts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
