/*
 * fuzz_usage.c - libFuzzer target: the response usage scanner on any bytes, whole and cut
 * into pieces, plain or taking chunked framing off (the first byte's low bit); the pieces
 * must add up to what the whole says. Plain bytes are also framed into chunks (of 1 to 16
 * bytes, by the first byte) and scanned as a chunked body: taking the framing off must give
 * back what the plain scan read, wherever the chunks cut an event or a key.
 */
#include "http/usage.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_count(const struct usage_scan *a, const struct usage_scan *b)
{
	return a->events == b->events && a->has_total == b->has_total &&
	       (!a->has_total || a->total == b->total) && a->has_prompt == b->has_prompt &&
	       (!a->has_prompt || a->prompt == b->prompt) &&
	       a->has_completion == b->has_completion &&
	       (!a->has_completion || a->completion == b->completion) &&
	       a->has_cached == b->has_cached && (!a->has_cached || a->cached == b->cached) &&
	       a->bad_framing == b->bad_framing;
}

/* <p>[0..size) as chunks of <step> bytes and the last chunk, fed to <u> a chunk at a time. */
static void feed_framed(struct usage_scan *u, const char *p, size_t size, size_t step)
{
	char head[16];
	for (size_t i = 0; i < size; i += step) {
		size_t n = size - i < step ? size - i : step;
		int h = snprintf(head, sizeof(head), "%zx\r\n", n);
		usage_scan_feed(u, head, (size_t)h);
		usage_scan_feed(u, p + i, n);
		usage_scan_feed(u, "\r\n", 2);
	}
	usage_scan_feed(u, "0\r\n\r\n", 5);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	struct usage_scan whole, cut;
	int chunked = size && (data[0] & 1);
	usage_scan_init(&whole);
	usage_scan_init(&cut);
	if (chunked) {
		usage_scan_chunked(&whole);
		usage_scan_chunked(&cut);
	}
	usage_scan_feed(&whole, p, size);
	size_t step = size ? (size_t)data[0] % 7 + 1 : 1;
	for (size_t i = 0; i < size; i += step)
		usage_scan_feed(&cut, p + i, size - i < step ? size - i : step);
	if (!same_count(&whole, &cut))
		abort();
	if (chunked)
		return 0;
	struct usage_scan framed;
	usage_scan_init(&framed);
	usage_scan_chunked(&framed);
	feed_framed(&framed, p, size, size ? (size_t)(data[0] >> 1) % 16 + 1 : 1);
	if (!same_count(&whole, &framed))
		abort();
	return 0;
}
