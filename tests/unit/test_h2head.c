/*
 * test_h2head.c - trailers across the protocols: which fields may cross, and the field line
 * one is written as.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "http/h2head.h"

static int ok(const char *name)
{
	return h2head_trailer_ok(name, strlen(name));
}

static void test_trailer_names(void **state)
{
	(void)state;
	static const char *const crossing[] = {"grpc-status", "grpc-message", "x-checksum",
					       "Server-Timing", "a-very-long-trailer-field-name"};
	static const char *const refused[] = {"content-length",
					      "Transfer-Encoding",
					      "host",
					      "authorization",
					      "cookie",
					      "x-forwarded-for",
					      "X-Forwarded-Proto",
					      "x-request-id",
					      "traceparent",
					      "trailer",
					      "te",
					      "connection",
					      "content-type",
					      "set-cookie",
					      ":status",
					      ""};
	for (size_t i = 0; i < sizeof(crossing) / sizeof(crossing[0]); i++)
		assert_true(ok(crossing[i]));
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		assert_false(ok(refused[i]));
}

static void test_trailer_line(void **state)
{
	(void)state;
	char out[32];
	assert_int_equal(h2head_trailer_line(out, sizeof(out), "x-sum", 5, "42", 2), 11);
	assert_memory_equal(out, "x-sum: 42\r\n", 11);
	/* a byte that would end the line, a name that is no token, no room: refused */
	assert_int_equal(h2head_trailer_line(out, sizeof(out), "x", 1, "a\r\nb", 4), -1);
	assert_int_equal(h2head_trailer_line(out, sizeof(out), "x y", 3, "a", 1), -1);
	assert_int_equal(h2head_trailer_line(out, sizeof(out), "x:y", 3, "a", 1), -1);
	assert_int_equal(h2head_trailer_line(out, 8, "x-sum", 5, "42", 2), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_trailer_names),
	    cmocka_unit_test(test_trailer_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
