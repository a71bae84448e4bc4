/*
 * spm.h - a SentencePiece model file (`tokenizer.model`, Llama 2, Mistral, Gemma) through
 * Debian's libsentencepiece, behind this small C interface: the library is C++, and
 * spm_shim.cc, ours, calls it and nothing else does. Only what accelnet needs: load a model,
 * encode a text to ids, the pieces of the vocabulary and what kind each is (for decoding,
 * detok.h), the BOS id. The encoding is the library's own (its normalization, its merges or
 * unigram search), so the ids are exactly spm_encode's; the library allocates as it encodes.
 * A loaded model is read-only and its encode is safe to call from many threads at once.
 */
#ifndef ACCELNET_TOK_SPM_H
#define ACCELNET_TOK_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct spm_model;

enum spm_kind { SPM_NORMAL, SPM_UNKNOWN, SPM_CONTROL, SPM_BYTE, SPM_UNUSED };

/* Loads the model file at <path>: 0 and *out, or -EINVAL with the library's reason in err
 * (a file that is not a SentencePiece model), -ENOMEM. */
int spm_load(const char *path, struct spm_model **out, char *err, size_t errlen);
void spm_free(struct spm_model *m);

/* The ids of text[0..n) into ids[0..cap): 0 and *nids; -ENOSPC (with *nids the count
 * needed) when cap is short; -EINVAL when the library refuses the text. */
int spm_encode(const struct spm_model *m, const char *text, size_t n, uint32_t *ids, size_t cap,
	       size_t *nids);

size_t spm_vocab_size(const struct spm_model *m);
/* Piece <id> (below spm_vocab_size()): its text (*len bytes, not NUL-ended) and kind. */
const char *spm_piece(const struct spm_model *m, uint32_t id, size_t *len, int *kind);
/* What the model's normalizer does with spaces, which decoding must undo as the library's
 * does: *dummy_prefix, a "▁" put before the text (add_dummy_prefix); *remove_spaces, the
 * spaces at its ends and runs of them cut to one (remove_extra_whitespaces). The protobuf
 * fields are not in the library's public header, so they are read off its encoding of "a"
 * and " a". 0; -EINVAL when the library refuses those; -ENOMEM. */
int spm_normalizer_flags(const struct spm_model *m, int *dummy_prefix, int *remove_spaces);

/* The BOS id, or -1 when the model has none. */
int spm_bos_id(const struct spm_model *m);

#ifdef __cplusplus
}
#endif

#endif
