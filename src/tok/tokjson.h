/*
 * tokjson.h - loading a Hugging Face tokenizer.json into a struct tok (tok.h). What it takes:
 * a byte-level BPE model (Llama 3, Qwen 2/3, DeepSeek V3, GPT-2 style) with its vocabulary,
 * merges (as "a b" strings or [a, b] pairs), ignore_merges; or a SentencePiece-style one
 * (Llama 2, Gemma 2/3: no ByteLevel step) with its unknown token, byte fallback and fuse_unk,
 * and its decoder (Replace, ByteFallback, Fuse, Strip); added and special tokens without
 * lstrip, rstrip or single_word; normalizers NFC, Prepend and Replace of a string (a Sequence
 * of those); a pre-tokenizer of Split steps (a regex or a string) ending in ByteLevel without
 * a prefix space, or none, or a Metaspace; a ByteLevel or TemplateProcessing post-processor (or a
 * Sequence of them). Anything else that would change the ids (another model, normalizer or
 * pre-tokenizer, a dropout, a subword prefix, truncation, padding, an option it does not
 * know) is refused with the field and the value, rather than tokenized some other way. A
 * byte-level file's decoder is not read: byte-level decoding is fixed.
 */
#ifndef ACCELNET_TOK_TOKJSON_H
#define ACCELNET_TOK_TOKJSON_H

#include "tok/tok.h"

#include <stddef.h>

struct json_t;

/*
 * Builds *t from the tokenizer.json at <path>. 0, or -errno with a message for the user in
 * err[0..errlen) naming the file, the field (as model.vocab, added_tokens[3].lstrip...) and
 * what is wrong with it: -ENOENT and the like when the file cannot be read, -EINVAL when it is
 * not JSON or not a tokenizer accelnet supports, -ENOMEM. On failure *t holds nothing.
 */
int tokjson_load(const char *path, struct tok *t, char *err, size_t errlen);

/*
 * The JSON at <path> parsed by jansson with <flags> (JSON_* of jansson.h): the file read whole,
 * not a character at a time (a tokenizer.json of 33 MB loaded a quarter faster), and only
 * a regular file of at most 1 GiB (a FIFO would hold the caller waiting for a writer;
 * libsentencepiece throws on a directory). NULL with -errno in *rc and a message in err[0..errlen)
 * naming the file, FILE:LINE:COL where its JSON is wrong.
 */
struct json_t *tokjson_read_file(const char *path, size_t flags, int *rc, char *err, size_t errlen);

/* The same from the JSON text buf[0..n); <name> stands for the file in messages. */
int tokjson_load_buffer(const char *buf, size_t n, const char *name, struct tok *t, char *err,
			size_t errlen);

#endif
