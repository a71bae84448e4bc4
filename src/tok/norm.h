/*
 * norm.h - the normalizers of a tokenizer.json that accelnet applies, as one chain of steps
 * run in the file's order: Unicode NFC (Qwen 2/3), Prepend (SentencePiece's "▁" before a
 * piece that is not empty: Llama 2) and Replace of a literal string (" " by "▁": Llama 2,
 * Gemma). NFC comes from libutf8proc; text that is all ASCII is NFC already and is passed
 * through untouched. Each step writes into one of the scratch's two buffers, the other
 * holding its input, so nothing is allocated once they have grown to the longest text.
 */
#ifndef ACCELNET_TOK_NORM_H
#define ACCELNET_TOK_NORM_H

#include <stddef.h>
#include <stdint.h>

#define NORM_MAX_STEPS 8
#define NORM_MAX_STR 16 /* bytes of a Prepend's or Replace's string */

enum norm_kind { NORM_NFC, NORM_PREPEND, NORM_REPLACE };

struct norm_step {
	uint8_t kind;	    /* enum norm_kind */
	uint8_t nfrom, nto; /* Replace: from -> to; Prepend: to */
	char from[NORM_MAX_STR], to[NORM_MAX_STR];
};

struct norm {
	struct norm_step step[NORM_MAX_STEPS];
	size_t n;
};

struct norm_scratch {
	int32_t *cp; /* NFC's code points */
	size_t cap;
	uint8_t *buf[2]; /* the steps' outputs, in turn */
	size_t bcap[2];
};

void norm_scratch_free(struct norm_scratch *ns);

/*
 * The NFC form of valid UTF-8 s[0..n): *out (s itself, or the scratch, valid until its next
 * use) and *outn. 0, -EILSEQ (not UTF-8), -ENOMEM.
 */
int norm_nfc(struct norm_scratch *ns, const uint8_t *s, size_t n, const uint8_t **out,
	     size_t *outn);

/* Every step of <nm> in turn on valid UTF-8 s[0..n): *out (s itself when there is no step,
 * else the scratch) and *outn. 0, -EILSEQ, -ENOMEM. */
int norm_apply(const struct norm *nm, struct norm_scratch *ns, const uint8_t *s, size_t n,
	       const uint8_t **out, size_t *outn);

#endif
