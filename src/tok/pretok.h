/*
 * pretok.h - the pre-tokenizer: the text cut into pre-tokens (words, number groups, runs of
 * spaces...) by the Split steps of a tokenizer.json, each a regular expression run on every
 * piece the step before it left (PCRE2, UTF and Unicode properties on, JIT where available).
 * A step keeps both the matches and the text between them ("Isolated"), drops the matches
 * ("Removed"), or glues each match to the text before it ("MergedWithPrevious") or after it
 * ("MergedWithNext"), as the reference's fold does: a match glued to no text (one at the
 * edge, or next to another match) stands alone. ByteLevel's own regex, where a file asks for it, is
 * the GPT-2 pattern as one more Isolated step; its byte-to-character mapping is no step here
 * (bytelevel.h).
 */
#ifndef ACCELNET_TOK_PRETOK_H
#define ACCELNET_TOK_PRETOK_H

#include <stddef.h>
#include <stdint.h>

#define PRETOK_MAX_STEPS 8

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

/* What a Split step does with its matches; the names of a tokenizer.json's `behavior`. */
enum pretok_behavior {
	PRETOK_ISOLATED,
	PRETOK_REMOVED,
	PRETOK_MERGED_WITH_PREVIOUS,
	PRETOK_MERGED_WITH_NEXT,
};

struct pretok {
	struct {
		struct pcre2_real_code_8 *re;
		int behavior; /* enum pretok_behavior */
	} step[PRETOK_MAX_STEPS];
	size_t n;
};

/* The GPT-2 pattern ByteLevel uses when its use_regex is true. */
extern const char pretok_gpt2_pattern[];

/*
 * Adds a step splitting on pattern p[0..n) (a literal string when <literal>), doing with the
 * matches what <behavior> (enum pretok_behavior) says. 0, or -EINVAL with the reason in err: too
 * many steps, a pattern PCRE2 refuses (with its message and offset) or one that can match the empty
 * string.
 */
int pretok_add_split(struct pretok *pt, const char *p, size_t n, int literal, int behavior,
		     char *err, size_t errlen);
void pretok_free(struct pretok *pt);

/* Match data with room for any step's match, for one thread; NULL when out of memory. */
struct pcre2_real_match_data_8 *pretok_match_data_new(void);
void pretok_match_data_free(struct pcre2_real_match_data_8 *md);

/* Called with each pre-token in order; a nonzero return stops the split and is returned. */
typedef int (*pretok_fn)(void *arg, const uint8_t *w, size_t n);

/*
 * Splits valid UTF-8 s[0..n) through every step and calls <fn> on each non-empty pre-token.
 * 0, what fn returned, or -EOVERFLOW when PCRE2 gave up (its match or depth limit).
 */
int pretok_split(const struct pretok *pt, struct pcre2_real_match_data_8 *md, const uint8_t *s,
		 size_t n, pretok_fn fn, void *arg);

#endif
