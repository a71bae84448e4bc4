/*
 * fuzz_usage.c - libFuzzer target: the response usage scanner on any bytes, whole and cut
 * into pieces, plain or taking chunked framing off (the first byte's low bit); the pieces
 * must add up to what the whole says.
 */
#include "http/usage.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
	if (whole.events != cut.events || whole.has_total != cut.has_total ||
	    (whole.has_total && whole.total != cut.total) || whole.has_prompt != cut.has_prompt ||
	    (whole.has_prompt && whole.prompt != cut.prompt) ||
	    whole.has_completion != cut.has_completion ||
	    (whole.has_completion && whole.completion != cut.completion) ||
	    whole.bad_framing != cut.bad_framing)
		abort();
	return 0;
}
