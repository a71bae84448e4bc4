/*
 * detok.h - token ids back to text, one id at a time, as an engine's output streams in: what
 * Hugging Face's decode() gives for a byte-level BPE tokenizer with skip_special_tokens (the
 * OpenAI servers' default), cut so that every piece is whole UTF-8.
 *
 * A vocabulary token stands for raw bytes (bytelevel.h), and a character may be split over
 * two or more tokens (an emoji, a CJK character, in most byte-level vocabularies): the bytes
 * of a character not yet complete are held back in the struct detok and go out with the token
 * that completes it, so that pieces concatenate to the text of all the ids, and no piece (an
 * SSE event, a JSON string) carries half a character. Bytes that cannot be UTF-8 become
 * U+FFFD, as Python's decode(errors="replace") makes them; so does a character still
 * incomplete at the end (detok_end). An added token is its content, a special one nothing; an
 * id the tokenizer does not name is nothing either (an engine's padding, or a bug: never a
 * crash). Nothing allocates; a struct detok is a few bytes, zeroed to start.
 */
#ifndef ACCELNET_TOK_DETOK_H
#define ACCELNET_TOK_DETOK_H

#include "tok/tok.h"

#include <stddef.h>
#include <stdint.h>

struct detok {
	uint8_t pend[4]; /* the start of a character, not yet complete */
	uint8_t npend;
};

/* The room detok_piece() needs for <id>, at most. */
size_t detok_room(const struct tok *t, uint32_t id);

/* The text token <id> completes, written to out[0..cap) (cap >= detok_room()): its length,
 * or -ENOSPC (nothing written, *d unchanged). */
long detok_piece(const struct tok *t, struct detok *d, uint32_t id, char *out, size_t cap);

/* The end: what is held back, as U+FFFD, into out[0..cap) (cap >= 3): its length. */
size_t detok_end(struct detok *d, char *out, size_t cap);

#endif
