/*
 * norm.h - the normalizers of a tokenizer.json that accelnet applies: Unicode NFC (Qwen 2/3)
 * or none. NFC comes from libutf8proc into a reusable scratch; text that is all ASCII is NFC
 * already and is passed through untouched.
 */
#ifndef ACCELNET_TOK_NORM_H
#define ACCELNET_TOK_NORM_H

#include <stddef.h>
#include <stdint.h>

struct norm_scratch {
	int32_t *cp; /* code points, then the UTF-8 written over them */
	size_t cap;
};

void norm_scratch_free(struct norm_scratch *ns);

/*
 * The NFC form of valid UTF-8 s[0..n): *out (s itself, or the scratch, valid until its next
 * use) and *outn. 0, -EILSEQ (not UTF-8), -ENOMEM.
 */
int norm_nfc(struct norm_scratch *ns, const uint8_t *s, size_t n, const uint8_t **out,
	     size_t *outn);

#endif
