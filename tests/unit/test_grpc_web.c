/*
 * test_grpc_web.c - gRPC-Web's text mode: the streamed base64 decoder (pieces of any size,
 * padding between runs, what it refuses) and the encoder (padding at each message's end).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "http/grpc_web.h"

/* Decode <in> fed <piece> characters at a time with room <room> each call: the bytes into
 * out, their count; -1 when refused (*why). */
static long decode_all(const char *in, size_t piece, size_t room, char *out, const char **why)
{
	struct grpc_web_dec d = {0};
	size_t len = strlen(in), at = 0, o = 0;
	while (at < len) {
		size_t k = len - at < piece ? len - at : piece, used;
		long n = grpc_web_decode(&d, in + at, k, &used, out + o, room);
		if (n < 0) {
			*why = d.why;
			return -1;
		}
		o += (size_t)n;
		at += used;
	}
	if (grpc_web_decode_end(&d) < 0) {
		*why = d.why;
		return -1;
	}
	assert_int_equal(d.decoded, o);
	return (long)o;
}

static void test_decode_in_pieces(void **state)
{
	(void)state;
	/* "\0\0\0\0\x02hi" in one run, and as two runs each padded ("AAAAAAI=" "aGk=") */
	static const char *const forms[] = {"AAAAAAJoaQ==", "AAAAAAI=aGk="};
	for (size_t f = 0; f < 2; f++)
		for (size_t piece = 1; piece <= 12; piece++)
			for (size_t room = 3; room <= 8; room++) {
				char out[16];
				const char *why = NULL;
				long n = decode_all(forms[f], piece, room, out, &why);
				assert_int_equal(n, 7);
				assert_memory_equal(out, "\0\0\0\0\x02hi", 7);
			}
}

static void test_decode_refuses(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "AAAA AAAA", /* whitespace */
	    "AAAA\r\n",	 /* a line break */
	    "AA-_",	 /* base64url's alphabet */
	    "A===",	 /* padding in a quantum's second place */
	    "====",	 /* ... first */
	    "AA=A",	 /* data after padding within a quantum */
	    "AAAAA",	 /* ends inside a quantum */
	    "AAAAAA",	 /* ditto */
	    "AAA\x80"
	    "AAA", /* a byte past ASCII */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char out[16];
		const char *why = NULL;
		assert_int_equal(decode_all(bad[i], 3, sizeof(out), out, &why), -1);
		assert_non_null(why);
	}
	/* refused stays refused */
	struct grpc_web_dec d = {0};
	char out[8];
	size_t used;
	assert_int_equal(grpc_web_decode(&d, "A=AA", 4, &used, out, sizeof(out)), -1);
	assert_int_equal(grpc_web_decode(&d, "AAAA", 4, &used, out, sizeof(out)), -1);
	assert_int_equal(used, 0);
	assert_int_equal(grpc_web_decode_end(&d), -1);
}

/* Encode msgs[0..len) fed <piece> bytes at a time, then flush: into out, its length. */
static size_t encode_all(const unsigned char *msgs, size_t len, size_t piece, char *out)
{
	struct grpc_web_enc e = {0};
	size_t o = 0;
	for (size_t at = 0; at < len; at += piece) {
		size_t k = len - at < piece ? len - at : piece;
		size_t n = grpc_web_encode(&e, msgs + at, k, out + o);
		assert_true(n <= GRPC_WEB_ENCODE_ROOM(k));
		o += n;
	}
	return o + grpc_web_encode_flush(&e, out + o);
}

static void test_encode_pads_at_each_message_end(void **state)
{
	(void)state;
	/* two messages: "hi" (7 bytes) and "abcd" (9 bytes) */
	static const unsigned char m[] = "\0\0\0\0\x02hi\0\0\0\0\x04"
					 "abcd";
	char want[64], out[64];
	size_t w = grpc_web_b64(m, 7, want);
	w += grpc_web_b64(m + 7, 9, want + w);
	for (size_t piece = 1; piece <= sizeof(m) - 1; piece++) {
		size_t n = encode_all(m, sizeof(m) - 1, piece, out);
		assert_int_equal(n, w);
		assert_memory_equal(out, want, w);
		/* a client decodes it back, runs and all */
		char back[32];
		const char *why = NULL;
		out[n] = 0;
		assert_int_equal(decode_all(out, 5, sizeof(back), back, &why), 16);
		assert_memory_equal(back, m, 16);
	}
	/* a message whose end has not come: its bytes wait, none is lost at the flush */
	struct grpc_web_enc e = {0};
	size_t n = grpc_web_encode(&e, (const unsigned char *)"\0\0\0\0\x09xy", 7, out);
	assert_int_equal(n, 8); /* six bytes: two whole quanta; one carried */
	n += grpc_web_encode_flush(&e, out + n);
	assert_int_equal(n, 12);
	assert_memory_equal(out, "AAAAAAl4eQ==", 12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_decode_in_pieces),
	    cmocka_unit_test(test_decode_refuses),
	    cmocka_unit_test(test_encode_pads_at_each_message_end),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
