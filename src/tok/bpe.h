/*
 * bpe.h - byte pair encoding of one pre-token: its bytes start as one symbol each and the
 * adjacent pair of lowest merge rank (the leftmost of equals) is merged until no pair merges,
 * as Hugging Face's BPE model does. A min-heap of (rank, position) keeps that O(n log n), so
 * a long run of one character costs no more than its length says.
 *
 * A byte-level model starts from one symbol per byte. A SentencePiece-style one (Llama 2,
 * Gemma) starts from one symbol per character, its token in the vocabulary; a character
 * without one becomes its bytes' <0xNN> tokens (byte_fallback, when each byte has one),
 * else the unknown token, a run of unknown characters one unknown token when fuse_unk is set
 * (else one each), else nothing, as the reference drops it. The reference holds an unknown
 * token back until the next known character (or the end), so bytes that fell back between
 * go in before it: kept, as the ids must be its ids.
 */
#ifndef ACCELNET_TOK_BPE_H
#define ACCELNET_TOK_BPE_H

#include "tok/vocab.h"

#include <stddef.h>
#include <stdint.h>

struct bpe_sym;
struct bpe_item;

/* Reusable room for one pre-token's symbols and heap, grown to the longest seen. */
struct bpe_scratch {
	struct bpe_sym *sym;
	struct bpe_item *heap;
	size_t cap; /* symbols; the heap has room for 3 x cap */
};

void bpe_scratch_free(struct bpe_scratch *s);

/* How a SentencePiece-style model starts a pre-token (above). */
struct bpe_chars {
	int byte_fallback;     /* a character's bytes as their <0xNN> tokens, where all are */
	int32_t byte_tok[256]; /* the id of <0xNN>, or -1 */
	int64_t unk;	       /* the unknown token's id, or -1 */
	int fuse_unk;
};

/*
 * The ids of pre-token w[0..n) (n >= 1) into out (room for n ids: each id covers a byte at
 * least); *nout their count. 0, -ENOMEM (growing the scratch), or -ENOENT when a byte has no
 * token (a load that passed tokjson's checks has all 256).
 */
int bpe_encode_word(const struct vocab *v, struct bpe_scratch *s, const uint8_t *w, size_t n,
		    uint32_t *out, size_t *nout);

/* The same for a SentencePiece-style model, valid UTF-8 w[0..n) starting from its characters
 * as <c> says (room for n ids in out). 0 or -ENOMEM. */
int bpe_encode_chars(const struct vocab *v, const struct bpe_chars *c, struct bpe_scratch *s,
		     const uint8_t *w, size_t n, uint32_t *out, size_t *nout);

#endif
