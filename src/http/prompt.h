/*
 * prompt.h - the affinity key of an LLM request: a hash of the start of its prompt, and its
 * block hashes (the other top-level fields the proxy reads are the view's: jsonview.h).
 *
 * Requests whose prompts share a prefix should meet the backend whose KV cache holds that
 * prefix. The key is the hash of the first <prefix_bytes> of the raw JSON value of the
 * top-level "prompt" (a string or list) or "messages" (a list) of an OpenAI-style body, or
 * of the whole value when it is shorter.
 */
#ifndef ACCELNET_HTTP_PROMPT_H
#define ACCELNET_HTTP_PROMPT_H

#include <stddef.h>
#include <stdint.h>

/*
 * The prompt key of the JSON body in buf[0..len), <complete> when no more bytes will come.
 * Returns 1 with *key set, 0 when more bytes are needed to decide, -1 when the body has no
 * usable prompt (not a JSON object, no prompt field, a field of the wrong type).
 */
int http_prompt_key(const char *buf, size_t len, int complete, size_t prefix_bytes, uint64_t *key);

/*
 * The prompt as a chain of block hashes, the way an inference engine's prefix cache sees it.
 * The prompt text is, for "prompt", the string (or the list's elements, each followed by
 * 0x1f); for "messages", each message's role, 0x1e, its content (a string, or each content
 * part's "text" -- a part without one, an image, as its raw JSON -- followed by 0x1f), then
 * 0x1d; whatever order a message's fields come in. Strings are taken as their raw JSON bytes,
 * escapes and all (read in place, never decoded). The text is cut into blocks of
 * <block_bytes>; hash[i] is XXH3, seeded with hash[i-1] (HTTP_PROMPT_CHAIN_SEED for block 0),
 * of the 8-byte XXH3 of block i, so it names the whole prefix up to the end of block i (an
 * engine publishing the same hashes must compute them this way), and two prompts share
 * hash[i] exactly when they share their first i+1 blocks. A last partial block has no hash.
 *
 * Returns the number of whole blocks (at most <max>: the scan stops there), or -1 when the
 * body has no prompt or block_bytes is outside [HTTP_PROMPT_BLOCK_MIN, HTTP_PROMPT_BLOCK_MAX].
 * *text_bytes (may be NULL) gets the bytes of prompt text seen. A body cut short is read as
 * far as it goes.
 */
#define HTTP_PROMPT_BLOCK_MIN 16
#define HTTP_PROMPT_BLOCK_MAX 4096
#define HTTP_PROMPT_CHAIN_SEED 0x61636365u /* "acce" */
long http_prompt_blocks(const char *buf, size_t len, size_t block_bytes, uint64_t *hash, size_t max,
			size_t *text_bytes);

/*
 * The scope of a prompt: what besides its text decides whether an engine's cached KV can serve
 * it. A LoRA adapter's KV is not the base model's nor another adapter's, and a request's
 * "cache_salt" (vLLM's) keeps its cache to the requests that carry the same salt, so vLLM keys
 * a request's blocks by both. Ours is XXH3 of the raw JSON bytes of the body's top-level
 * "model" and "cache_salt" strings (quotes and escapes as written: two spellings of one name
 * are two scopes, two names never one), each hashed apart so that neither can stand for the
 * other; 0 when the body names neither. Every model name counts, the base model's too: the
 * proxy cannot tell a base model from an adapter by its name. http_prompt_scope_blocks() folds
 * a scope into block hashes in place (XOR): prompts of two scopes share no hash but by a
 * 64-bit chance, prompts of one scope share exactly what their text shares; scope 0 changes
 * nothing. An engine publishing our hashes (accelnet sim) scopes them the same way.
 */
uint64_t http_prompt_scope(const char *model, size_t model_len, const char *salt, size_t salt_len);
void http_prompt_scope_blocks(uint64_t *hash, size_t n, uint64_t scope);

#endif
