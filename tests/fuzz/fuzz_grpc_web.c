/*
 * fuzz_grpc_web.c - libFuzzer target: gRPC-Web's text mode (http/grpc_web.h). The first byte
 * chooses a piece size and a room; the rest is decoded as a request body fed in those pieces
 * with that room, which must agree with decoding it whole (refused alike, the same bytes),
 * never writing past the room; and encoded as a response body in those pieces, which must
 * stay within GRPC_WEB_ENCODE_ROOM and decode back, quantum by quantum, to the input.
 */
#include "http/grpc_web.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decode in[0..len) in pieces of <piece> with room <room> each call into out: its length,
 * or -1 (refused). */
static long decode(const char *in, size_t len, size_t piece, size_t room, char *out)
{
	struct grpc_web_dec d = {0};
	size_t at = 0, o = 0;
	while (at < len) {
		size_t k = len - at < piece ? len - at : piece, used;
		long n = grpc_web_decode(&d, in + at, k, &used, out + o, room);
		if (n < 0)
			return -1;
		if ((size_t)n > room || used > k || (!used && room >= 3))
			abort(); /* past its room, or no progress with room for a quantum */
		o += (size_t)n;
		at += used;
	}
	return grpc_web_decode_end(&d) < 0 ? -1 : (long)o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 4096)
		return 0;
	size_t piece = (size_t)(data[0] & 15) + 1, room = (size_t)(data[0] >> 4) + 3;
	const char *in = (const char *)data + 1;
	size_t len = size - 1;
	static char a[4096], b[4096], enc[4 * 4096], back[4096];
	long whole = decode(in, len, len ? len : 1, sizeof(a), a);
	long parts = decode(in, len, piece, room, b);
	if (whole != parts || (whole > 0 && memcmp(a, b, (size_t)whole)))
		abort();
	struct grpc_web_enc e = {0};
	size_t o = 0;
	for (size_t at = 0; at < len; at += piece) {
		size_t k = len - at < piece ? len - at : piece;
		size_t n = grpc_web_encode(&e, (const unsigned char *)in + at, k, enc + o);
		if (n > GRPC_WEB_ENCODE_ROOM(k) || n % 4)
			abort();
		o += n;
	}
	o += grpc_web_encode_flush(&e, enc + o);
	if (decode(enc, o, 4, 3, back) != (long)len || memcmp(back, in, len))
		abort();
	return 0;
}
