/*
 * fuzz_http_body.c - libFuzzer target: http_body_scan fed the same bytes whole and in random
 * splits, with the ready bytes relayed (dropped from the buffer's front) at random, must agree
 * on the outcome, on where the body ends and on the payload counted; ready never passes the
 * buffer, and a Content-Length body never passes its length.
 *
 * Input: byte 0 picks the framing (Content-Length, chunked, close-delimited), bytes 1-2 the
 * Content-Length or the chunked payload limit (0: none), byte 3 seeds the splits; the rest is
 * the wire.
 */
#include "http/body.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
	int rc;
	int done;
	uint64_t body; /* sent + ready: bytes that belong to the body */
	uint64_t payload;
};

static uint32_t next_rand(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void check_invariants(const struct http_body *b, size_t buffered, uint64_t cl)
{
	if (b->ready > buffered)
		abort();
	if (b->framing == HTTP_BODY_LENGTH && b->sent + b->ready + b->left != cl)
		abort();
}

/* Feed wire[0..len) in pieces (all at once when <seed> is 0), relaying at random. */
static struct outcome feed(enum http_framing framing, uint64_t cl, uint64_t limit, const char *wire,
			   size_t len, uint32_t seed, char *buf)
{
	struct http_body b;
	struct outcome o = {0, 0, 0, 0};
	size_t fed = 0, buffered = 0;
	http_body_init(&b, framing, cl);
	while (fed < len && !b.done) {
		size_t n = len - fed;
		if (seed) {
			size_t piece = 1 + next_rand(&seed) % 64;
			n = n < piece ? n : piece;
		}
		memcpy(buf + buffered, wire + fed, n);
		buffered += n;
		fed += n;
		uint64_t before = b.sent + b.ready;
		o.rc = http_body_scan(&b, buf, buffered, limit);
		check_invariants(&b, buffered, cl);
		if (b.sent + b.ready < before)
			abort();
		if (o.rc)
			break;
		if (seed && b.ready && next_rand(&seed) % 2) {
			size_t r = b.ready - next_rand(&seed) % (b.ready + 1) / 2;
			memmove(buf, buf + r, buffered - r);
			buffered -= r;
			http_body_sent(&b, r);
			check_invariants(&b, buffered, cl);
		}
	}
	o.done = b.done;
	o.body = b.sent + b.ready;
	o.payload = b.payload;
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum http_framing framings[] = {HTTP_BODY_LENGTH, HTTP_BODY_CHUNKED,
						     HTTP_BODY_CLOSE};
	if (size < 4)
		return 0;
	enum http_framing framing = framings[data[0] % 3];
	uint64_t param = (uint64_t)data[1] << 8 | data[2];
	uint64_t cl = framing == HTTP_BODY_LENGTH ? param : 0;
	uint64_t limit = framing == HTTP_BODY_CHUNKED ? param : 0;
	const char *wire = (const char *)data + 4;
	size_t len = size - 4;
	char *buf = malloc(len ? len : 1);
	if (!buf)
		return 0;
	struct outcome whole = feed(framing, cl, limit, wire, len, 0, buf);
	struct outcome split = feed(framing, cl, limit, wire, len, 0x9e3779b9u ^ data[3], buf);
	free(buf);
	if (whole.rc != split.rc || whole.done != split.done || whole.payload != split.payload)
		abort();
	if (whole.rc == 0 && whole.body != split.body)
		abort();
	if (whole.rc == 0 && framing == HTTP_BODY_CLOSE && whole.body != len)
		abort();
	return 0;
}
