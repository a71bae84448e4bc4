/*
 * tokspm.h - loading a tokenizer file of either kind into a struct tok: a Hugging Face
 * tokenizer.json (tokjson.h) or a SentencePiece model (spm.h), told apart by the content, not
 * the name: a JSON object starts with '{' (after white space); anything else is given to
 * libsentencepiece, whose encoding a SentencePiece model's struct tok then uses. Its
 * decoding is detok.h's SentencePiece-style one, set up from the model's pieces: "▁" a space,
 * the space its normalizer put first cut as the library cuts it (spm_normalizer_flags():
 * the first of each piece until text comes, of the first piece only, or none), byte pieces
 * joined (character by character, as the
 * library does, not whole runs), control pieces (<s>, </s>) nothing,
 * the unknown piece " ⁇ " (the library's own), and the BOS before the ids when an encode
 * asks for the special tokens (as Llama 2's and Mistral's tokenizers add it).
 */
#ifndef ACCELNET_TOK_TOKSPM_H
#define ACCELNET_TOK_TOKSPM_H

#include "tok/tok.h"

#include <stddef.h>

/*
 * Builds *t from the file at <path>, a tokenizer.json or a SentencePiece model. 0, or -errno
 * with a message naming the file and, for a file that is neither, what each reading said:
 * -ENOENT and the like when it cannot be read, -EINVAL when it is not a tokenizer accelnet
 * supports, -ENOMEM. On failure *t holds nothing.
 */
int tok_load(const char *path, struct tok *t, char *err, size_t errlen);

#endif
