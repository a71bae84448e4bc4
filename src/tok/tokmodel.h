/*
 * tokmodel.h - one model's tokenizer as the config's `models:` names it: its tokenizer.json
 * (tok.h), its chat format when it has one (chat.h: the tokenizer_config.json given, else the
 * one beside the tokenizer.json when there is one), and the size of its engine's KV-cache
 * blocks in tokens. Loaded once (by `accelnet check`, a start or a reload), read-only after,
 * shared by every thread.
 *
 * A prompt's token blocks are named the way the prefix index names them (policy/
 * prefix_index.h): hash[i] is XXH3, seeded with hash[i-1] (TOKMODEL_CHAIN_SEED, folded with
 * the prompt's scope, for block 0), of block i's <block_size> token ids as 32-bit
 * little-endian numbers, so it names the whole prefix through block i. This is accelnet's own
 * hash, never an engine's: vLLM's block hashes (SHA-256 or Python's hash over pickled
 * tuples) cannot be computed outside it, so an engine's events are matched through the
 * token ids they carry (control/kvmap.h), and both sides hash those alike.
 */
#ifndef ACCELNET_TOK_TOKMODEL_H
#define ACCELNET_TOK_TOKMODEL_H

#include "tok/chat.h"
#include "tok/tok.h"

#include <stddef.h>
#include <stdint.h>

#define TOKMODEL_CHAIN_SEED 0x746f6b73u /* "toks" */
#define TOKMODEL_BLOCK_MAX 4096		/* tokens per block, at most */

struct tokmodel {
	struct tok tok;
	struct chat chat;
	int has_chat;
	char chat_skipped[384]; /* why a template was passed over (has_chat 0); "": none was */
	unsigned block_size;
	uint64_t serial; /* one per load in this process: a thread's scratch knows its tokenizer */
};

/*
 * Load the tokenizer.json at <tokenizer> and the chat format of <chat_template> (a
 * tokenizer_config.json; NULL: the one in the tokenizer's folder, when there is one) into
 * *m, with blocks of <block_size> tokens. 0, or -errno with a message naming the file and the
 * field in err (tokjson_load(), chat_load()); on failure *m holds nothing. A template with no
 * chat_template accelnet knows (chat_load()'s -ENOTSUP) is no failure: the model has no chat
 * format (has_chat 0) and m->chat_skipped says why, for the caller to tell the operator.
 * <chat_format> (NULL: by the template) chooses the format by name (chat_load()); it needs
 * the tokenizer_config.json all the same, for the tokens the format writes.
 */
int tokmodel_load(const char *tokenizer, const char *chat_template, const char *chat_format,
		  unsigned block_size, struct tokmodel *m, char *err, size_t errlen);
void tokmodel_free(struct tokmodel *m);

/* The hash of the block of ids[0..block_size) that follows the block named <prev>. */
uint64_t tokmodel_block_hash(uint64_t prev, const uint32_t *ids, size_t block_size);

/* The chain hashes of the whole blocks of ids[0..n) from <seed> into hash[0..max): how many
 * (a last partial block has none). */
size_t tokmodel_blocks(const uint32_t *ids, size_t n, size_t block_size, uint64_t seed,
		       uint64_t *hash, size_t max);

#endif
