/*
 * fuzz_prompt.c - libFuzzer target: the prompt-key scanner on any bytes. It must never read
 * past the input, must answer "need more" only for an incomplete body, and, once it finds
 * a key in a prefix of the input, must find the same key in the whole input. The block
 * hashes: the same answer twice, within the cap. The model name (http_model): one seen in a
 * prefix is the whole input's, NUL-free and within its buffer.
 */
#include "core/glob.h"
#include "http/prompt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* http_model: a name seen in a prefix is the whole input's, and well formed. */
static void check_model(const char *p, size_t size)
{
	char whole[64], part[64];
	size_t wn = 0, pn = 0;
	int r = http_model(p, size, 1, whole, sizeof(whole), &wn);
	if (r == 0 || (r == 1 && (wn >= sizeof(whole) || strlen(whole) != wn)))
		abort();
	/* the name meets the patterns of match.model: a star matches it, its own bytes too */
	if (r == 1 && (!glob_match("*", whole, wn) ||
		       (!strpbrk(whole, "*?") && !glob_match(whole, whole, wn))))
		abort();
	if (r == 1)
		(void)glob_match("*a*?b*c*", whole, wn);
	for (size_t cut = 0; cut <= size; cut += 1 + cut / 4) {
		int q = http_model(p, cut, 0, part, sizeof(part), &pn);
		if (q == 1 && (r != 1 || pn != wn || memcmp(part, whole, wn) != 0))
			abort();
	}
}

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
	check_model(p, size);
	(void)http_wants_stream(p, size);
	long mt = http_max_tokens(p, size);
	if (mt < -1)
		abort();
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
