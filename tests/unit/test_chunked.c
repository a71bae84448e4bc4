/*
 * test_chunked.c - the chunked-coding scanner: any split of the input gives the same
 * answer, payload is reported exactly, and malformed framing is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "http/chunked.h"

/* Feed <text> in pieces of <step> bytes. Returns consumed bytes at the end of the body (or
 * -1 on error, -2 if the body never ended) and collects the payload into <payload>. */
static long feed(const char *text, size_t step, char *payload, size_t *plen)
{
	struct http_chunked c;
	http_chunked_init(&c);
	size_t len = strlen(text), pos = 0;
	*plen = 0;
	while (pos < len && !http_chunked_done(&c)) {
		size_t n = len - pos < step ? len - pos : step;
		while (n && !http_chunked_done(&c)) {
			int is_data;
			ssize_t k = http_chunked_scan(&c, text + pos, n, &is_data);
			if (k < 0)
				return -1;
			if (is_data) {
				memcpy(payload + *plen, text + pos, (size_t)k);
				*plen += (size_t)k;
			}
			pos += (size_t)k;
			n -= (size_t)k;
			if (k == 0)
				break;
		}
	}
	return http_chunked_done(&c) ? (long)pos : -2;
}

static void valid_bodies_any_split(void **state)
{
	(void)state;
	static const struct {
		const char *wire, *payload;
	} cases[] = {
	    {"5\r\nhello\r\n0\r\n\r\n", "hello"},
	    {"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world"},
	    {"A\r\n0123456789\r\n0\r\n\r\n", "0123456789"},
	    {"5;ext=1;q=\"x\"\r\nhello\r\n0\r\n\r\n", "hello"},
	    {"5 ;ext\r\nhello\r\n0\r\n\r\n", "hello"},
	    {"5\r\nhello\r\n0\r\nTrailer-A: 1\r\nB: 2\r\n\r\n", "hello"},
	    {"0\r\n\r\n", ""},
	    {"0000000000000005\r\nhello\r\n0\r\n\r\n", "hello"},
	};
	char payload[64];
	size_t plen;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (size_t step = 1; step <= strlen(cases[i].wire); step++) {
			long r = feed(cases[i].wire, step, payload, &plen);
			assert_int_equal(r, (long)strlen(cases[i].wire));
			assert_int_equal(plen, strlen(cases[i].payload));
			assert_memory_equal(payload, cases[i].payload, plen);
		}
	}
}

static void stops_at_end_of_body(void **state)
{
	(void)state;
	char payload[64];
	size_t plen;
	/* bytes after the body (a pipelined request) are not consumed */
	assert_int_equal(feed("3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n", 64, payload, &plen), 13);
}

static void rejects_malformed(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "\r\nhello\r\n0\r\n\r\n",			  /* no size */
	    "x\r\nhello\r\n0\r\n\r\n",			  /* not hex */
	    "0x5\r\nhello\r\n0\r\n\r\n",		  /* 0x prefix */
	    "-5\r\nhello\r\n0\r\n\r\n",			  /* sign */
	    "10000000000000000\r\n",			  /* 17 digits: overflow */
	    "5\nhello\r\n0\r\n\r\n",			  /* bare LF after size */
	    "5\r\nhelloX\r\n0\r\n\r\n",			  /* data longer than size */
	    "5\r\nhello\n0\r\n\r\n",			  /* bare LF after data */
	    "5;a\001b\r\nhello\r\n0\r\n\r\n",		  /* control char in extension */
	    "5 x\r\nhello\r\n0\r\n\r\n",		  /* junk after size */
	    "0\r\nBad\001Trailer: 1\r\n\r\n",		  /* control char in trailer */
	    "0\r\n folded: 1\r\n\r\n",			  /* obs-fold trailer */
	    "0\r\n\n",					  /* bare LF at the end */
	    "5;\x80\x80=\"a\r\nhello\r\n0\r\n\r\n",	  /* non-ASCII in extension */
	    "5\r\nhello\r\n0\r\nGET /x HTTP/1.1\r\n\r\n", /* a request line as a trailer */
	    "0\r\nNoColon\r\n\r\n",			  /* a trailer that is not a field */
	    "0\r\nBad Name: 1\r\n\r\n",			  /* space in a trailer name */
	};
	char payload[64];
	size_t plen;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		long r = feed(bad[i], 64, payload, &plen);
		if (r != -1)
			fail_msg("accepted malformed chunked body #%zu", i);
	}
}

static void pending_is_the_declared_chunk(void **state)
{
	(void)state;
	struct http_chunked c;
	int is_data;
	http_chunked_init(&c);
	assert_int_equal(http_chunked_pending(&c), 0);
	assert_int_equal(http_chunked_scan(&c, "100000005\r\nhe", 14, &is_data), 11);
	assert_true(http_chunked_pending(&c) == 0x100000005ull);
	assert_int_equal(http_chunked_scan(&c, "he", 2, &is_data), 2);
	assert_true(is_data && http_chunked_pending(&c) == 0x100000003ull);
}

static void incomplete_is_not_done(void **state)
{
	(void)state;
	char payload[64];
	size_t plen;
	assert_int_equal(feed("5\r\nhel", 64, payload, &plen), -2);
	assert_int_equal(feed("5\r\nhello\r\n0\r\n", 64, payload, &plen), -2);
}

static void stops_where_the_trailers_begin(void **state)
{
	(void)state;
	struct http_chunked c;
	int is_data;
	const char *t = "2\r\nhi\r\n0\r\nX-Sum: 1\r\n\r\n";
	http_chunked_init(&c);
	assert_int_equal(http_chunked_scan(&c, t, strlen(t), &is_data), 3);
	assert_int_equal(http_chunked_scan(&c, t + 3, strlen(t) - 3, &is_data), 2);
	assert_false(http_chunked_in_trailers(&c));
	/* the CRLF after the payload and the last chunk's line, then the section alone */
	assert_int_equal(http_chunked_scan(&c, t + 5, strlen(t) - 5, &is_data), 5);
	assert_true(http_chunked_in_trailers(&c) && !is_data);
	assert_int_equal(http_chunked_scan(&c, t + 10, strlen(t) - 10, &is_data), 12);
	assert_false(http_chunked_in_trailers(&c));
	assert_true(http_chunked_done(&c));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(valid_bodies_any_split),
	    cmocka_unit_test(stops_at_end_of_body),
	    cmocka_unit_test(rejects_malformed),
	    cmocka_unit_test(incomplete_is_not_done),
	    cmocka_unit_test(pending_is_the_declared_chunk),
	    cmocka_unit_test(stops_where_the_trailers_begin),
	};
	return cmocka_run_group_tests_name("chunked coding", tests, NULL, NULL);
}
