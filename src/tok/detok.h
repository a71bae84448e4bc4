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
 *
 * A SentencePiece-style tokenizer (Llama 2, Gemma) decodes by its decoder (struct
 * tok_decoder), as the reference does: each token's text with "▁" made " " (its Replace
 * steps, added tokens' too), a run of <0xNN> tokens joined into the bytes it names, the whole
 * with its first space cut (Strip, Llama 2). The reference takes a run of byte tokens whole:
 * when the run is UTF-8 it is that text, else every byte of it is one U+FFFD (not Python's
 * replacement by maximal parts). So a run is held back until the token after it (or the end)
 * says it is over; once what is held cannot be the start of UTF-8, its bytes go out as U+FFFD
 * at once, and so does each later byte of that run. A run held longer than DETOK_RUN bytes
 * lets its whole characters go (the one place this can differ from the reference: a run of
 * more than DETOK_RUN bytes of which a later byte breaks the UTF-8, which only an engine
 * sampling byte tokens at random makes).
 *
 * A SentencePiece model file (tokspm.h) decodes as libsentencepiece does instead: a run of
 * byte pieces read a character at a time (whole characters go at once, a byte that starts
 * none is one U+FFFD, only the start of a character is held), the first space of each piece
 * cut until one gives text, and the unknown piece's " ⁇ " kept whole.
 */
#ifndef ACCELNET_TOK_DETOK_H
#define ACCELNET_TOK_DETOK_H

#include "tok/tok.h"

#include <stddef.h>
#include <stdint.h>

#define DETOK_RUN 128			  /* bytes of a run of <0xNN> tokens held back, at most */
#define DETOK_END_MAX (3 * DETOK_RUN + 3) /* the room detok_end() needs */

struct detok {
	uint8_t pend[4]; /* the start of a character, not yet complete */
	uint8_t npend;
	uint8_t nrun;	  /* SentencePiece-style: the bytes of a run of byte tokens held */
	uint8_t run_bad;  /* that run cannot be UTF-8: each byte is U+FFFD at once */
	uint8_t stripped; /* leading spaces cut so far (Strip) */
	uint8_t started;  /* text went out: no more to strip */
	uint8_t run[DETOK_RUN];
};

/* The room detok_piece() needs for <id>, at most. */
size_t detok_room(const struct tok *t, uint32_t id);

/* The text token <id> completes, written to out[0..cap) (cap >= detok_room()): its length,
 * or -ENOSPC (nothing written, *d unchanged). */
long detok_piece(const struct tok *t, struct detok *d, uint32_t id, char *out, size_t cap);

/* The end: what is held back (as U+FFFD where it is not whole UTF-8) into out[0..cap)
 * (cap >= DETOK_END_MAX): its length. */
size_t detok_end(const struct tok *t, struct detok *d, char *out, size_t cap);

#endif
