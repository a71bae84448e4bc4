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

/* A response written as HTTP/1.1: an interim, the final head, two DATA, trailers. */
static void test_response_as_http1(void **state)
{
	(void)state;
	char out[256];
	size_t n = 0;
	struct h2resp r = {0};
#define W(call) n += (size_t)(call)
	W(h2resp_field(&r, out + n, sizeof(out) - n, ":status", 7, "103", 3));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "link", 4, "</a>", 4));
	W(h2resp_head_end(&r, out + n, sizeof(out) - n, 0));
	W(h2resp_field(&r, out + n, sizeof(out) - n, ":status", 7, "200", 3));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "x-a", 3, "1", 1));
	W(h2resp_head_end(&r, out + n, sizeof(out) - n, 0));
	W(h2resp_data_begin(&r, out + n, sizeof(out) - n, 2));
	memcpy(out + n, "hi", 2);
	n += 2;
	W(h2resp_data_end(&r, out + n, sizeof(out) - n, 2));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "grpc-status", 11, "0", 1));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "content-length", 14, "9", 1)); /* dropped */
	W(h2resp_end(&r, out + n, sizeof(out) - n));
#undef W
	const char *want = "HTTP/1.1 103 \r\nlink: </a>\r\n\r\n"
			   "HTTP/1.1 200 \r\nx-a: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
			   "2\r\nhi\r\n0\r\ngrpc-status: 0\r\n\r\n";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(out, want, n);
	/* a content-length body goes as it comes; a head that ends the stream says 0; no 101 */
	struct h2resp r2 = {0};
	n = (size_t)h2resp_field(&r2, out, sizeof(out), ":status", 7, "200", 3);
	assert_int_equal(h2resp_field(&r2, out + n, sizeof(out) - n, "content-length", 14, "2", 1),
			 19);
	n += 19;
	n += (size_t)h2resp_head_end(&r2, out + n, sizeof(out) - n, 0);
	assert_int_equal(h2resp_data_begin(&r2, out + n, sizeof(out) - n, 2), 0);
	assert_int_equal(h2resp_end(&r2, out + n, sizeof(out) - n), 0);
	struct h2resp r3 = {0};
	n = (size_t)h2resp_field(&r3, out, sizeof(out), ":status", 7, "404", 3);
	assert_int_equal(h2resp_head_end(&r3, out + n, sizeof(out) - n, 1), 21);
	assert_memory_equal(out + n, "Content-Length: 0\r\n\r\n", 21);
	assert_int_equal(h2resp_end(&r3, out + n, sizeof(out) - n), 0); /* no "0\r\n\r\n" after */
	struct h2resp r4 = {0};
	assert_int_equal(h2resp_field(&r4, out, sizeof(out), ":status", 7, "101", 3), -1);
	assert_int_equal(h2resp_field(&r4, out, 10, ":status", 7, "200", 3), -1); /* no room */
}

/* For a gRPC-Web client: content-type renamed, trailers as the body's last message (0x80). */
static void test_response_as_grpc_web(void **state)
{
	(void)state;
	char out[256];
	size_t n = 0;
	struct h2resp r = {.grpc_web = 1};
#define W(call) n += (size_t)(call)
	W(h2resp_field(&r, out + n, sizeof(out) - n, ":status", 7, "200", 3));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "content-type", 12, "application/grpc+proto",
		       22));
	W(h2resp_head_end(&r, out + n, sizeof(out) - n, 0));
	W(h2resp_data_begin(&r, out + n, sizeof(out) - n, 2));
	memcpy(out + n, "hi", 2);
	n += 2;
	W(h2resp_data_end(&r, out + n, sizeof(out) - n, 2));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "grpc-status", 11, "0", 1));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "content-type", 12, "x", 1)); /* dropped */
	W(h2resp_field(&r, out + n, sizeof(out) - n, "grpc-message", 12, "ok", 2));
	W(h2resp_end(&r, out + n, sizeof(out) - n));
#undef W
	static const char want[] = "HTTP/1.1 200 \r\ncontent-type: application/grpc-web+proto\r\n"
				   "Transfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n"
				   /* a 37-byte chunk: 0x80, length 32 (a space), the fields */
				   "25\r\n\x80\0\0\0 grpc-status:0\r\ngrpc-message:ok\r\n\r\n"
				   "0\r\n\r\n";
	assert_int_equal(n, sizeof(want) - 1);
	assert_memory_equal(out, want, n);
}

/* For a gRPC-Web text client: its content-type, and the trailer message in base64 (the body's
 * messages are the caller's to encode). A backend's content-type that is not gRPC's keeps its
 * name, and the body then goes as it is. */
static void test_response_as_grpc_web_text(void **state)
{
	(void)state;
	char out[256];
	size_t n = 0;
	struct h2resp r = {.grpc_web = 1, .grpc_web_text = 1};
#define W(call) n += (size_t)(call)
	W(h2resp_field(&r, out + n, sizeof(out) - n, ":status", 7, "200", 3));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "content-type", 12, "Application/GRPC+proto",
		       22));
	W(h2resp_head_end(&r, out + n, sizeof(out) - n, 0));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "grpc-status", 11, "0", 1));
	W(h2resp_end(&r, out + n, sizeof(out) - n));
#undef W
	assert_true(r.web_text_body);
	static const char want[] = "HTTP/1.1 200 \r\ncontent-type: application/grpc-web-text+proto"
				   "\r\nTransfer-Encoding: chunked\r\n\r\n"
				   "1c\r\ngAAAAA9ncnBjLXN0YXR1czowDQo=\r\n0\r\n\r\n";
	assert_int_equal(n, sizeof(want) - 1);
	assert_memory_equal(out, want, n);
	struct h2resp r2 = {.grpc_web = 1, .grpc_web_text = 1};
	n = (size_t)h2resp_field(&r2, out, sizeof(out), ":status", 7, "503", 3);
	assert_int_equal(h2resp_field(&r2, out, sizeof(out), "content-type", 12, "text/html", 9),
			 25);
	assert_false(r2.web_text_body);
}

/* A backend's trailers longer than gRPC-Web's message holds: the fields past it are dropped,
 * but never grpc-status, however late it comes. */
static void test_grpc_web_long_trailers_keep_the_status(void **state)
{
	(void)state;
	static char out[4096];
	char value[121];
	memset(value, 'v', sizeof(value));
	size_t n = 0;
	struct h2resp r = {.grpc_web = 1};
#define W(call) n += (size_t)(call)
	W(h2resp_field(&r, out + n, sizeof(out) - n, ":status", 7, "200", 3));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "content-type", 12, "application/grpc", 16));
	W(h2resp_head_end(&r, out + n, sizeof(out) - n, 0));
	for (int i = 0; i < 20; i++) /* 7 x 128 bytes and one of 127 leave 1 of 1024 */
		W(h2resp_field(&r, out + n, sizeof(out) - n, "x-md", 4, value,
			       sizeof(value) - (i == 7)));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "grpc-status", 11, "13", 2));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "x-late", 6, "y", 1)); /* fits: kept */
	size_t end = n;
	W(h2resp_end(&r, out + n, sizeof(out) - n));
#undef W
	out[n] = 0;
	const char *msg = strstr(out + end, "\r\n") + 2;
	assert_int_equal((unsigned char)msg[0], 0x80);
	size_t len = (size_t)(unsigned char)msg[3] << 8 | (unsigned char)msg[4];
	assert_true(len <= H2RESP_WEB_TRAILERS);
	assert_memory_equal(msg + 5 + len - 26, "grpc-status:13\r\nx-late:y\r\n", 26);
}

/* A gRPC backend's content-length does not hold once the trailers join the body: dropped,
 * the body chunked, the trailers its last message. */
static void test_grpc_web_content_length_goes_chunked(void **state)
{
	(void)state;
	char out[256];
	size_t n = 0;
	struct h2resp r = {.grpc_web = 1};
#define W(call) n += (size_t)(call)
	W(h2resp_field(&r, out + n, sizeof(out) - n, ":status", 7, "200", 3));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "content-length", 14, "2", 1));
	W(h2resp_head_end(&r, out + n, sizeof(out) - n, 0));
	W(h2resp_data_begin(&r, out + n, sizeof(out) - n, 2));
	memcpy(out + n, "hi", 2);
	n += 2;
	W(h2resp_data_end(&r, out + n, sizeof(out) - n, 2));
	W(h2resp_field(&r, out + n, sizeof(out) - n, "grpc-status", 11, "0", 1));
	W(h2resp_end(&r, out + n, sizeof(out) - n));
#undef W
	static const char want[] = "HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n"
				   "14\r\n\x80\0\0\0\x0fgrpc-status:0\r\n\r\n0\r\n\r\n";
	assert_int_equal(n, sizeof(want) - 1);
	assert_memory_equal(out, want, n);
}

/* DATA joined to the chunk before it: the size line rewritten, grown by a digit. */
static void test_data_join(void **state)
{
	(void)state;
	char out[64] = "f\r\n0123456789abcde\r\n";
	size_t total = strlen(out);
	assert_int_equal(h2resp_data_join(out, &total, 15, "f", 1, sizeof(out)), 0);
	assert_int_equal(total, 4 + 16 + 2);
	assert_memory_equal(out, "10\r\n0123456789abcdef\r\n", total);
	assert_int_equal(h2resp_data_join(out, &total, 16, "gh", 2, sizeof(out)), 0);
	assert_memory_equal(out, "12\r\n0123456789abcdefgh\r\n", total);
	/* no room: nothing changes */
	assert_int_equal(h2resp_data_join(out, &total, 18, "x", 1, total), -1);
	assert_memory_equal(out, "12\r\n0123456789abcdefgh\r\n", total);
}

/* The fields written anew for each message are never indexed by HPACK; the rest may be. */
static void test_unique_fields_are_the_ids(void **state)
{
	(void)state;
	assert_true(h2head_unique_field("x-request-id", 12));
	assert_true(h2head_unique_field("traceparent", 11));
	assert_false(h2head_unique_field("x-request-i", 11));
	assert_false(h2head_unique_field("tracestate", 10));
	assert_false(h2head_unique_field("content-type", 12));
	assert_false(h2head_unique_field("server", 6));
}

/* Names lowered eight bytes at a time (the tail as a last, overlapping word): every byte
 * value, at every length and alignment, as the one-byte rule has it (ASCII letters lowered, all
 * else as it is). */
static void test_lower_every_byte(void **state)
{
	(void)state;
	char src[300], dst[300], want[300];
	for (int i = 0; i < 256; i++)
		src[i] = (char)i;
	for (int i = 256; i < 300; i++)
		src[i] = (char)("Content-TYPE-X"[i % 14]);
	for (size_t off = 0; off < 9; off++)
		for (size_t n = 0; n + off < sizeof(src); n += n < 40 ? 1 : 1 + n / 8) {
			for (size_t k = 0; k < n; k++) {
				char c = src[off + k];
				want[k] = c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
			}
			dst[n] = '#';
			h2head_lower(dst, src + off, n);
			assert_memory_equal(dst, want, n);
			assert_int_equal(dst[n], '#'); /* nothing written past the name */
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_trailer_names),
	    cmocka_unit_test(test_trailer_line),
	    cmocka_unit_test(test_response_as_http1),
	    cmocka_unit_test(test_data_join),
	    cmocka_unit_test(test_response_as_grpc_web),
	    cmocka_unit_test(test_response_as_grpc_web_text),
	    cmocka_unit_test(test_grpc_web_long_trailers_keep_the_status),
	    cmocka_unit_test(test_grpc_web_content_length_goes_chunked),
	    cmocka_unit_test(test_unique_fields_are_the_ids),
	    cmocka_unit_test(test_lower_every_byte),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
