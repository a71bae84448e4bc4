/*
 * tokbench.c - the tokenizer's cost for bench/tokenize.py: `tokbench TOKENIZER.json < LINES`,
 * LINES one JSON string literal a line (as `accelnet tokenize --lines` reads them). The texts
 * are read into memory first; then one pass encodes them all with a new scratch (cold: an
 * empty pre-token cache, buffers not yet grown) and <passes> more with the same one (warm),
 * the fastest of those kept. Prints one JSON object: texts, bytes, tokens, the seconds of
 * each, and µs per 1,000 tokens.
 */
#include "tok/tokjson.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double pass(struct tok_scratch *s, json_t **texts, size_t n, size_t *tokens)
{
	double t0 = now();
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		const uint32_t *ids;
		size_t k;
		if (tok_encode(s, json_string_value(texts[i]), json_string_length(texts[i]), 1,
			       &ids, &k)) {
			fprintf(stderr, "tokbench: text %zu refused\n", i + 1);
			exit(1);
		}
		total += k;
	}
	*tokens = total;
	return now() - t0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: tokbench TOKENIZER.json [PASSES] < LINES\n");
		return 2;
	}
	int passes = argc > 2 ? atoi(argv[2]) : 5;
	struct tok t;
	char err[512];
	if (tokjson_load(argv[1], &t, err, sizeof(err))) {
		fprintf(stderr, "tokbench: %s\n", err);
		return 1;
	}
	size_t n = 0, cap = 1024, bytes = 0;
	json_t **texts = malloc(cap * sizeof(*texts));
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	while ((len = getline(&line, &lcap, stdin)) > 0) {
		json_t *j = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		if (!json_is_string(j))
			continue;
		if (n == cap)
			texts = realloc(texts, (cap *= 2) * sizeof(*texts));
		texts[n++] = j;
		bytes += json_string_length(j);
	}
	struct tok_scratch s;
	if (tok_scratch_init(&s, &t))
		return 1;
	size_t tokens;
	double cold = pass(&s, texts, n, &tokens), warm = 1e9;
	for (int p = 0; p < passes; p++) {
		double w = pass(&s, texts, n, &tokens);
		if (w < warm)
			warm = w;
	}
	printf("{\"texts\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"cold_s\": %.6f, \"warm_s\": "
	       "%.6f, \"cold_us_per_1k\": %.2f, \"warm_us_per_1k\": %.2f, \"cache_hits\": %llu, "
	       "\"cache_misses\": %llu}\n",
	       n, bytes, tokens, cold, warm, cold * 1e9 / (double)tokens,
	       warm * 1e9 / (double)tokens, (unsigned long long)s.hits,
	       (unsigned long long)s.misses);
	tok_scratch_free(&s);
	tok_free(&t);
	for (size_t i = 0; i < n; i++)
		json_decref(texts[i]);
	free(texts);
	free(line);
	return 0;
}
