/*
 * fuzz_promtext.c - libFuzzer target: the Prometheus text reader on any bytes, whole and
 * split at the first newline into two reads (a sample line counts the same either way), with
 * names it may match. It must never read past the bytes, and a text it accepts must add up.
 */
#include "obs/promtext.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *p = malloc(size ? size : 1); /* exactly <size> bytes: no terminator to lean on */
	if (!p)
		return 0;
	memcpy(p, data, size);
	struct promtext_want w[] = {
	    {.name = "a"}, {.name = "vllm:num_requests_waiting"}, {.name = "x_y"}};
	int whole = promtext_read(p, size, w, 3);
	const char *nl = memchr(p, '\n', size);
	if (nl) {
		struct promtext_want v[3] = {
		    {.name = "a"}, {.name = "vllm:num_requests_waiting"}, {.name = "x_y"}};
		size_t cut = (size_t)(nl - p) + 1;
		int first = promtext_read(p, cut, v, 3);
		unsigned got = v[0].samples + v[1].samples + v[2].samples;
		int second = promtext_read(p + cut, size - cut, v, 3);
		got += v[0].samples + v[1].samples + v[2].samples;
		if (whole >= 0 && (first < 0 || second < 0 || first + second != whole ||
				   got != w[0].samples + w[1].samples + w[2].samples))
			abort();
	}
	for (size_t k = 0; whole >= 0 && k < 3; k++)
		if (w[k].samples > (unsigned)whole || isnan(w[k].sum))
			abort();
	free(p);
	return 0;
}
