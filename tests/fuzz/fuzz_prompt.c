/*
 * fuzz_prompt.c - libFuzzer target: the prompt-key scanner on any bytes. It must never read
 * past the input, must answer "need more" only for an incomplete body, and, once it finds
 * a key in a prefix of the input, must find the same key in the whole input. The block
 * hashes: the same answer twice, within the cap. (The model name and the other fields:
 * fuzz_jsonview.c.)
 */
#include "http/prompt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	uint64_t whole = 0, part = 0;
	int r = http_prompt_key(p, size, 1, 32, &whole);
	if (r == 0)
		abort(); /* a complete body is decided */
	for (size_t cut = 0; cut <= size; cut += 1 + cut / 4) {
		int q = http_prompt_key(p, cut, 0, 32, &part);
		if (q == 1 && (r != 1 || part != whole))
			abort(); /* a key seen early must be the key */
	}
	uint64_t h1[8], h2[8];
	size_t text = 0;
	long n1 = http_prompt_blocks(p, size, 16, h1, 8, &text);
	long n2 = http_prompt_blocks(p, size, 16, h2, 8, NULL);
	if (n1 != n2 || n1 > 8 || (n1 >= 0 && (size_t)n1 * 16 > text))
		abort(); /* the same answer twice, within the cap, blocks made of text seen */
	for (long i = 0; i < n1; i++)
		if (h1[i] != h2[i])
			abort();
	return 0;
}
