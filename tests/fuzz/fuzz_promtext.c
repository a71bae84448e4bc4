/*
 * fuzz_promtext.c - libFuzzer target: the Prometheus text reader on any bytes, whole and
 * split at the first newline into two reads (a sample line counts the same either way), with
 * names it may match, one of them read by its labels as vLLM's info gauge is. It must never
 * read past the bytes, a text it accepts must add up, and a label it keeps must lie within
 * the text and decode within its room.
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
	static const char *const labels[] = {"running_lora_adapters", "waiting_lora_adapters",
					     "max_lora", "a"};
	struct promtext_want w[] = {{.name = "a", .labels = labels, .nlabels = 4},
				    {.name = "vllm:num_requests_waiting"},
				    {.name = "x_y"}};
	int whole = promtext_read(p, size, w, 3);
	for (size_t k = 0; whole >= 0 && k < 4; k++) {
		const struct promtext_span *v = &w[0].label[k];
		char out[16];
		if (v->p && (v->p < p || v->p + v->n > p + size))
			abort();
		size_t n = promtext_unescape(v, out, sizeof(out));
		if (n >= sizeof(out) || out[n] != '\0')
			abort();
	}
	const char *nl = memchr(p, '\n', size);
	if (nl) {
		struct promtext_want v[3] = {{.name = "a", .labels = labels, .nlabels = 4},
					     {.name = "vllm:num_requests_waiting"},
					     {.name = "x_y"}};
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
