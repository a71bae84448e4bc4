/*
 * tokbench.c - the tokenizer's cost for bench/tokenize.py: `tokbench TOKENIZER.json < LINES`,
 * LINES one JSON string literal a line (as `accelnet tokenize --lines` reads them). The texts
 * are read into memory first; then one pass encodes them all with a new scratch (cold: an
 * empty pre-token cache, buffers not yet grown) and <passes> more with the same one (warm),
 * the fastest of those kept; the segment cache off (tok.h), which would make a warm pass a
 * copy of the ids of each text seen whole. Prints one JSON object: texts, bytes, tokens, the
 * seconds of each, and µs per 1,000 tokens.
 *
 * `tokbench --turns TOKENIZER.json < LINES`: the lines are a chat's rendered prompts in the
 * order they are sent (conversations that grow a turn at a time, interleaved), encoded
 * without the post-processor's ids as the router encodes a chat, one pass each way on a new
 * scratch: the segment cache off (every turn tokenized whole), on (each turn finds its last
 * turn's segments), and on again over the same lines (every turn seen before: a retry), the
 * fastest of <passes> kept. Prints µs per decision (per text) each way, and for the longest
 * text alone.
 */
#include "tok/tokjson.h"

#include <jansson.h>
#include <stdint.h>
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

static int special = 1; /* the post-processor's ids: not for --turns (a chat) */

/* One pass over texts[0..n): its seconds; the ids in all in *tokens; the seconds of text
 * <one> alone in *one_s. */
static double pass_one(struct tok_scratch *s, json_t **texts, size_t n, size_t *tokens, size_t one,
		       double *one_s)
{
	double t0 = now();
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		const uint32_t *ids;
		size_t k;
		double t1 = now();
		if (tok_encode(s, json_string_value(texts[i]), json_string_length(texts[i]),
			       special, &ids, &k)) {
			fprintf(stderr, "tokbench: text %zu refused\n", i + 1);
			exit(1);
		}
		if (i == one)
			*one_s = now() - t1;
		total += k;
	}
	*tokens = total;
	return now() - t0;
}

static double pass(struct tok_scratch *s, json_t **texts, size_t n, size_t *tokens)
{
	double one;
	return pass_one(s, texts, n, tokens, SIZE_MAX, &one);
}

/* --turns: the segment cache off, on, and on again, each the fastest of <passes> on a new
 * scratch. */
static int turns(const struct tok *t, json_t **texts, size_t n, size_t bytes, int passes)
{
	size_t longest = 0, tokens = 0;
	for (size_t i = 1; i < n; i++)
		if (json_string_length(texts[i]) > json_string_length(texts[longest]))
			longest = i;
	double best[3] = {1e9, 1e9, 1e9}, one[3] = {1e9, 1e9, 1e9};
	uint64_t hits = 0, misses = 0;
	size_t longest_tokens = 0;
	for (int p = 0; p < passes; p++)
		for (int way = 0; way < 2; way++) {
			struct tok_scratch s;
			if (tok_scratch_init(&s, t))
				return 1;
			if (!way)
				tok_scratch_segment_budget(&s, 0);
			double o, w = pass_one(&s, texts, n, &tokens, longest, &o);
			best[way] = w < best[way] ? w : best[way];
			one[way] = o < one[way] ? o : one[way];
			if (!way) {
				const uint32_t *ids;
				tok_encode(&s, json_string_value(texts[longest]),
					   json_string_length(texts[longest]), special, &ids,
					   &longest_tokens);
			} else {
				hits = s.seg.hits;
				misses = s.seg.misses;
				w = pass_one(&s, texts, n, &tokens, longest, &o);
				best[2] = w < best[2] ? w : best[2];
				one[2] = o < one[2] ? o : one[2];
			}
			tok_scratch_free(&s);
		}
	printf("{\"texts\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"longest_tokens\": %zu, "
	       "\"off_us\": %.1f, \"on_us\": %.1f, \"again_us\": %.1f, \"off_longest_us\": %.1f, "
	       "\"on_longest_us\": %.1f, \"again_longest_us\": %.1f, \"off_us_per_1k\": %.2f, "
	       "\"on_us_per_1k\": %.2f, \"segment_hits\": %llu, \"segment_misses\": %llu}\n",
	       n, bytes, tokens, longest_tokens, best[0] * 1e6 / (double)n,
	       best[1] * 1e6 / (double)n, best[2] * 1e6 / (double)n, one[0] * 1e6, one[1] * 1e6,
	       one[2] * 1e6, best[0] * 1e9 / (double)tokens, best[1] * 1e9 / (double)tokens,
	       (unsigned long long)hits, (unsigned long long)misses);
	return 0;
}

int main(int argc, char **argv)
{
	int by_turn = argc > 1 && !strcmp(argv[1], "--turns");
	if (by_turn) {
		argv++;
		argc--;
		special = 0;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: tokbench [--turns] TOKENIZER.json [PASSES] < LINES\n");
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
	if (by_turn) {
		int rc = turns(&t, texts, n, bytes, passes);
		tok_free(&t);
		for (size_t i = 0; i < n; i++)
			json_decref(texts[i]);
		free(texts);
		free(line);
		return rc;
	}
	struct tok_scratch s;
	if (tok_scratch_init(&s, &t))
		return 1;
	tok_scratch_segment_budget(&s, 0);
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
