/*
 * bpe.h - byte pair encoding of one pre-token: its bytes start as one symbol each and the
 * adjacent pair of lowest merge rank (the leftmost of equals) is merged until no pair merges,
 * as Hugging Face's BPE model does. A min-heap of (rank, position) keeps that O(n log n), so
 * a long run of one character costs no more than its length says.
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

/*
 * The ids of pre-token w[0..n) (n >= 1) into out (room for n ids: each id covers a byte at
 * least); *nout their count. 0, -ENOMEM (growing the scratch), or -ENOENT when a byte has no
 * token (a load that passed tokjson's checks has all 256).
 */
int bpe_encode_word(const struct vocab *v, struct bpe_scratch *s, const uint8_t *w, size_t n,
		    uint32_t *out, size_t *nout);

#endif
