/*
 * test_body.c - where a message body ends (http/body.h), fed the way a relay feeds it: bytes
 * appended to a buffer in pieces of every size, the tracker scanning the buffer after each,
 * and (when relaying) the ready bytes passed on and dropped from the buffer's front. Checked:
 * the body ends at the same byte however it is split, the payload limit refuses a chunk at
 * its size line before a byte of it is ready, malformed framing is -400, and sent + ready
 * always counts the body bytes seen.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "http/body.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct feed {
	struct http_body b;
	char buf[8192];
	size_t len;   /* bytes in buf */
	size_t fed;   /* bytes of the wire appended so far */
	size_t ready; /* b.ready after the last scan, before any relaying */
};

/* Append wire[f->fed..f->fed + n) and scan; with <relay>, pass the ready bytes on. */
static int feed_more(struct feed *f, const char *wire, size_t n, uint64_t limit, int relay)
{
	memcpy(f->buf + f->len, wire + f->fed, n);
	f->len += n;
	f->fed += n;
	int rc = http_body_scan(&f->b, f->buf, f->len, limit);
	f->ready = f->b.ready;
	assert_true(f->b.ready <= f->len);
	if (rc == 0 && relay && f->b.ready) {
		size_t r = f->b.ready;
		memmove(f->buf, f->buf + r, f->len - r);
		f->len -= r;
		http_body_sent(&f->b, r);
	}
	return rc;
}

/*
 * Feed <wire> in pieces of <step> bytes until the body is done or refused. Returns 0 or the
 * scan's -status; f->b.sent + f->b.ready is then how many bytes belong to the body.
 */
static int feed_all(struct feed *f, enum http_framing framing, uint64_t cl, const char *wire,
		    size_t len, size_t step, uint64_t limit, int relay)
{
	memset(f, 0, sizeof(*f));
	http_body_init(&f->b, framing, cl);
	while (f->fed < len && !f->b.done) {
		size_t n = len - f->fed < step ? len - f->fed : step;
		int rc = feed_more(f, wire, n, limit, relay);
		if (rc)
			return rc;
	}
	return 0;
}

static uint64_t body_bytes(const struct feed *f)
{
	return f->b.sent + f->b.ready;
}

static void content_length_split_anywhere(void **state)
{
	(void)state;
	static const char wire[] = "0123456789GET /next HTTP/1.1\r\n\r\n";
	struct feed f;
	for (size_t step = 1; step < sizeof(wire); step++) {
		for (int relay = 0; relay <= 1; relay++) {
			assert_int_equal(feed_all(&f, HTTP_BODY_LENGTH, 10, wire, sizeof(wire) - 1,
						  step, 0, relay),
					 0);
			assert_true(f.b.done);
			assert_int_equal(body_bytes(&f), 10);
			assert_int_equal(f.b.left, 0);
		}
	}
	/* two pieces, split at every byte */
	for (size_t cut = 0; cut <= 10; cut++) {
		memset(&f, 0, sizeof(f));
		http_body_init(&f.b, HTTP_BODY_LENGTH, 10);
		assert_int_equal(feed_more(&f, wire, cut, 0, 1), 0);
		assert_int_equal(f.b.done, cut == 10);
		assert_int_equal(f.b.left, 10 - cut);
		assert_int_equal(feed_more(&f, wire, sizeof(wire) - 1 - cut, 0, 1), 0);
		assert_true(f.b.done);
		assert_int_equal(f.b.sent, 10);
	}
}

static void content_length_incomplete_and_empty(void **state)
{
	(void)state;
	struct feed f;
	assert_int_equal(feed_all(&f, HTTP_BODY_LENGTH, 10, "012345", 6, 6, 0, 0), 0);
	assert_false(f.b.done);
	assert_int_equal(f.b.ready, 6);
	assert_int_equal(f.b.left, 4);
	/* scanning again with nothing new changes nothing */
	assert_int_equal(http_body_scan(&f.b, f.buf, f.len, 0), 0);
	assert_int_equal(f.b.ready, 6);

	struct http_body b;
	http_body_init(&b, HTTP_BODY_LENGTH, 0);
	assert_true(b.done);
	assert_int_equal(http_body_scan(&b, "GET", 3, 0), 0);
	assert_int_equal(b.ready, 0);
	http_body_init(&b, HTTP_BODY_NONE, 0);
	assert_true(b.done);
	assert_int_equal(http_body_scan(&b, "GET", 3, 0), 0);
	assert_int_equal(b.ready, 0);
}

static const struct {
	const char *wire; /* a whole chunked body */
	uint64_t payload;
} chunked_cases[] = {
    {"5\r\nhello\r\n0\r\n\r\n", 5},
    {"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 11},
    {"A;ext=1\r\n0123456789\r\n0\r\n\r\n", 10},
    {"5 ;x\r\nhello\r\n0\r\nTrailer-A: 1\r\nB: 2\r\n\r\n", 5},
    {"0\r\n\r\n", 0},
    {"0000000000000003\r\nabc\r\n0\r\n\r\n", 3},
};

/* Every case, followed by a pipelined request, in pieces of every size and relayed or not. */
static void chunked_split_at_every_byte(void **state)
{
	(void)state;
	struct feed f;
	char wire[256];
	for (size_t i = 0; i < ARRAY_LEN(chunked_cases); i++) {
		size_t blen = strlen(chunked_cases[i].wire);
		int n =
		    snprintf(wire, sizeof(wire), "%sGET / HTTP/1.1\r\n\r\n", chunked_cases[i].wire);
		for (size_t step = 1; step <= (size_t)n; step++) {
			for (int relay = 0; relay <= 1; relay++) {
				assert_int_equal(feed_all(&f, HTTP_BODY_CHUNKED, 0, wire, (size_t)n,
							  step, 1 << 20, relay),
						 0);
				assert_true(f.b.done);
				assert_int_equal(body_bytes(&f), blen);
				assert_int_equal(f.b.payload, chunked_cases[i].payload);
			}
		}
		/* two pieces, cut at every byte of the body */
		for (size_t cut = 0; cut <= blen; cut++) {
			memset(&f, 0, sizeof(f));
			http_body_init(&f.b, HTTP_BODY_CHUNKED, 0);
			assert_int_equal(feed_more(&f, wire, cut, 1 << 20, 1), 0);
			assert_int_equal(f.b.done, cut == blen);
			assert_int_equal(feed_more(&f, wire, (size_t)n - cut, 1 << 20, 1), 0);
			assert_true(f.b.done);
			assert_int_equal(f.b.sent, blen);
		}
	}
}

static void chunked_limit_on_payload(void **state)
{
	(void)state;
	static const char wire[] = "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";
	struct feed f;
	/* exactly the limit is accepted; one byte under it is not */
	for (size_t step = 1; step < sizeof(wire); step++) {
		assert_int_equal(
		    feed_all(&f, HTTP_BODY_CHUNKED, 0, wire, sizeof(wire) - 1, step, 6, 1), 0);
		assert_true(f.b.done);
		assert_int_equal(
		    feed_all(&f, HTTP_BODY_CHUNKED, 0, wire, sizeof(wire) - 1, step, 5, 0), -413);
		/* refused at the end of the second size line: neither that line's LF nor a byte
		 * of "def" ever ready */
		assert_true(f.ready >= strlen("3\r\nabc"));
		assert_true(f.ready < strlen("3\r\nabc\r\n3\r\n"));
		assert_true(f.fed <= strlen("3\r\nabc\r\n3\r\n") + step - 1);
	}
	/* many small chunks whose sum passes the limit */
	static const char many[] = "1\r\na\r\n1\r\nb\r\n1\r\nc\r\n1\r\nd\r\n0\r\n\r\n";
	assert_int_equal(feed_all(&f, HTTP_BODY_CHUNKED, 0, many, sizeof(many) - 1, 1, 3, 1), -413);
	assert_int_equal(f.b.payload, 3);
	assert_int_equal(feed_all(&f, HTTP_BODY_CHUNKED, 0, many, sizeof(many) - 1, 1, 4, 1), 0);
	/* 0: no limit */
	assert_int_equal(feed_all(&f, HTTP_BODY_CHUNKED, 0, wire, sizeof(wire) - 1, 1, 0, 1), 0);
	assert_true(f.b.done);
}

static void chunked_limit_at_size_line(void **state)
{
	(void)state;
	struct feed f;
	/* a chunk declaring more than the limit is refused once its size line ends, before any
	 * of its payload arrives (the buffer holds the size line alone); the bytes of the line
	 * before its LF may have been ready, the LF never is */
	static const char *lines[] = {"6\r\n", "6;ext\r\n", "ffffffffffffffff\r\n",
				      "100000000\r\n"};
	for (size_t i = 0; i < ARRAY_LEN(lines); i++) {
		size_t len = strlen(lines[i]);
		memset(&f, 0, sizeof(f));
		http_body_init(&f.b, HTTP_BODY_CHUNKED, 0);
		assert_int_equal(feed_more(&f, lines[i], len - 1, 5, 1), 0);
		assert_int_equal(feed_more(&f, lines[i], 1, 5, 1), -413);
		assert_int_equal(f.b.sent + f.b.ready, len - 1);
	}
	/* a huge declared size with no limit is only tracked */
	memset(&f, 0, sizeof(f));
	http_body_init(&f.b, HTTP_BODY_CHUNKED, 0);
	assert_int_equal(feed_more(&f, "100000000\r\nab", 13, 0, 1), 0);
	assert_false(f.b.done);
	assert_int_equal(f.b.sent, 13);
}

static void chunked_malformed_is_400(void **state)
{
	(void)state;
	static const char *bad[] = {
	    "x\r\n",
	    "\r\n",
	    "5\nhello\r\n0\r\n\r\n",
	    "5\r\nhelloX\r\n0\r\n\r\n",
	    "5\r\nhello\n0\r\n\r\n",
	    "5\r\nhello\r\n0\r\nbad trailer\r\n\r\n",
	    "5\r\nhello\r\n0\r\n\r\r",
	    "00000000000000005\r\nhello\r\n0\r\n\r\n",
	    "5;\x01\r\nhello\r\n0\r\n\r\n",
	    "-5\r\nhello\r\n0\r\n\r\n",
	};
	struct feed f;
	for (size_t i = 0; i < ARRAY_LEN(bad); i++)
		for (size_t step = 1; step <= strlen(bad[i]); step++)
			for (int relay = 0; relay <= 1; relay++)
				assert_int_equal(feed_all(&f, HTTP_BODY_CHUNKED, 0, bad[i],
							  strlen(bad[i]), step, 1 << 20, relay),
						 -400);
}

static void close_delimited_takes_everything(void **state)
{
	(void)state;
	static const char wire[] = "any bytes at all\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
	struct feed f;
	for (size_t step = 1; step < sizeof(wire); step++) {
		for (int relay = 0; relay <= 1; relay++) {
			assert_int_equal(feed_all(&f, HTTP_BODY_CLOSE, 0, wire, sizeof(wire) - 1,
						  step, 4, relay),
					 0);
			assert_false(f.b.done); /* only the server's close ends it */
			assert_int_equal(body_bytes(&f), sizeof(wire) - 1);
		}
	}
}

static void sent_accounting(void **state)
{
	(void)state;
	struct feed f;
	memset(&f, 0, sizeof(f));
	http_body_init(&f.b, HTTP_BODY_LENGTH, 10);
	static const char wire[] = "0123456789";
	assert_int_equal(feed_more(&f, wire, 4, 0, 0), 0);
	assert_int_equal(f.b.ready, 4);
	/* part of what is ready goes on; the rest stays at the buffer's front */
	memmove(f.buf, f.buf + 3, f.len - 3);
	f.len -= 3;
	http_body_sent(&f.b, 3);
	assert_int_equal(f.b.ready, 1);
	assert_int_equal(f.b.sent, 3);
	assert_int_equal(feed_more(&f, wire, 6, 0, 0), 0);
	assert_int_equal(f.b.ready, 7);
	assert_true(f.b.done);
	http_body_sent(&f.b, 7);
	assert_int_equal(f.b.ready, 0);
	assert_int_equal(f.b.sent, 10);

	/* chunked: the framing is relayed with the payload, so sent counts it too */
	static const char ch[] = "5\r\nhello\r\n0\r\n\r\n";
	assert_int_equal(feed_all(&f, HTTP_BODY_CHUNKED, 0, ch, sizeof(ch) - 1, 3, 100, 1), 0);
	assert_int_equal(f.b.sent, sizeof(ch) - 1);
	assert_int_equal(f.b.ready, 0);
	assert_int_equal(f.b.payload, 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(content_length_split_anywhere),
	    cmocka_unit_test(content_length_incomplete_and_empty),
	    cmocka_unit_test(chunked_split_at_every_byte),
	    cmocka_unit_test(chunked_limit_on_payload),
	    cmocka_unit_test(chunked_limit_at_size_line),
	    cmocka_unit_test(chunked_malformed_is_400),
	    cmocka_unit_test(close_delimited_takes_everything),
	    cmocka_unit_test(sent_accounting),
	};
	return cmocka_run_group_tests_name("body framing", tests, NULL, NULL);
}
