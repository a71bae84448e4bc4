/*
 * prompt.h - the affinity key of an LLM request: a hash of the start of its prompt.
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

/* Does the (start of the) JSON body in buf[0..len) have a top-level "stream": true? */
int http_wants_stream(const char *buf, size_t len);

/*
 * The top-level "max_tokens" (or "max_completion_tokens", whichever comes first) of the JSON
 * body in buf[0..len), when it is a whole number below 2^31 followed by the rest of the
 * body; else -1 (absent, not a number, cut off).
 */
long http_max_tokens(const char *buf, size_t len);

#endif
