/*
 * tokjson.h - loading a Hugging Face tokenizer.json into a struct tok (tok.h). What it takes:
 * a byte-level BPE model (Llama 3, Qwen 2/3, DeepSeek V3, GPT-2 style) with its vocabulary,
 * merges (as "a b" strings or [a, b] pairs), ignore_merges; added and special tokens without
 * lstrip, rstrip or single_word; the NFC normalizer or none (a Sequence of those); a
 * pre-tokenizer of Split steps (Isolated or Removed, a regex or a string) ending in ByteLevel
 * without a prefix space; a ByteLevel or TemplateProcessing post-processor (or a Sequence of
 * them). Anything else that would change the ids (another model, normalizer or
 * pre-tokenizer, a dropout, an unk token, byte fallback, a subword prefix, truncation,
 * padding, an option it does not know) is refused with the field and the value, rather than
 * tokenized some other way. The decoder is not read: it plays no part in encoding.
 */
#ifndef ACCELNET_TOK_TOKJSON_H
#define ACCELNET_TOK_TOKJSON_H

#include "tok/tok.h"

#include <stddef.h>

/*
 * Builds *t from the tokenizer.json at <path>. 0, or -errno with a message for the user in
 * err[0..errlen) naming the file, the field (as model.vocab, added_tokens[3].lstrip...) and
 * what is wrong with it: -ENOENT and the like when the file cannot be read, -EINVAL when it is
 * not JSON or not a tokenizer accelnet supports, -ENOMEM. On failure *t holds nothing.
 */
int tokjson_load(const char *path, struct tok *t, char *err, size_t errlen);

/* The same from the JSON text buf[0..n); <name> stands for the file in messages. */
int tokjson_load_buffer(const char *buf, size_t n, const char *name, struct tok *t, char *err,
			size_t errlen);

#endif
