/*
 * test_traceparent.c - the W3C traceparent reader: what it takes, what it refuses (every
 * way a value can be off: version, length, case, zeros, separators, injected bytes), and
 * that what it writes reads back the same.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "http/traceparent.h"

#define GOOD "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static int parse(const char *s, struct traceparent *t)
{
	return traceparent_parse(s, strlen(s), t);
}

static void takes_version_00(void **state)
{
	(void)state;
	struct traceparent t;
	assert_int_equal(parse(GOOD, &t), 0);
	assert_memory_equal(t.trace_id, "0af7651916cd43dd8448eb211c80319c", 32);
	assert_memory_equal(t.parent_id, "b7ad6b7169203331", 16);
	assert_int_equal(t.flags, 1);
	assert_int_equal(parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-ff", &t), 0);
	assert_int_equal(t.flags, 0xff);
	/* one digit of an id not zero is enough */
	assert_int_equal(parse("00-00000000000000000000000000000001-0000000000000001-00", &t), 0);
	char back[TRACEPARENT_LEN + 1];
	assert_int_equal(parse(GOOD, &t), 0);
	traceparent_format(&t, back);
	assert_string_equal(back, GOOD);
}

static void refuses_the_rest(void **state)
{
	(void)state;
	const char *bad[] = {
	    "",
	    "00",
	    "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", /* a later version */
	    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", /* forbidden version */
	    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", /* upper case */
	    "00-0af7651916cd43dd8448eb211c80319c-B7AD6B7169203331-01",
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0A",
	    "00-00000000000000000000000000000000-b7ad6b7169203331-01",	/* zero trace id */
	    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",	/* zero parent id */
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-", /* too long */
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
	    "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01", /* too short */
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
	    "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", /* separators */
	    "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331_01",
	    " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
	    "00-0af7651916cd43dd8448eb211c8031 c-b7ad6b7169203331-01",
	    "00-0af7651916cd43dd8448eb211c8031\r\n-b7ad6b7169203331-01",
	    "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01", /* not hex */
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333\xff-01",
	    "0x-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	};
	struct traceparent t = {.flags = 0x5a};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i], &t), -22);
		assert_int_equal(t.flags, 0x5a); /* untouched */
	}
	/* a NUL inside is a byte like any other */
	char nul[] = GOOD;
	nul[10] = 0;
	assert_int_equal(traceparent_parse(nul, TRACEPARENT_LEN, &t), -22);
}

static void hex_digits(void **state)
{
	(void)state;
	char out[17] = {0};
	trace_hex(0x0123456789abcdefu, out, 16);
	assert_string_equal(out, "0123456789abcdef");
	trace_hex(0xfedcba9876543210u, out, 16);
	assert_string_equal(out, "fedcba9876543210");
	for (uint64_t v = 1, i = 0; i < 1000;
	     i++, v = v * 6364136223846793005u + 1442695040888963407u) {
		char want[17];
		snprintf(want, sizeof(want), "%016llx", (unsigned long long)v);
		trace_hex(v, out, 16);
		assert_string_equal(out, want);
	}
	trace_hex(0x1f, out, 2);
	out[2] = 0;
	assert_string_equal(out, "1f");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(takes_version_00),
	    cmocka_unit_test(refuses_the_rest),
	    cmocka_unit_test(hex_digits),
	};
	return cmocka_run_group_tests_name("traceparent", tests, NULL, NULL);
}
