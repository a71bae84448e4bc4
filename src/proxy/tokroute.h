/*
 * tokroute.h - balance: llm's prompt blocks in tokens: for a request whose "model" the
 * config's models: gives a tokenizer, the prompt's token ids (runtime/tokprompt.h: the chat
 * template for messages) cut into blocks of the model's block_size and named by accelnet's
 * chain hash of them (tok/tokmodel.h), the blocks an engine's KV-cache events describe
 * (control/kvsub.c keys them the same way). Other requests keep the blocks of prompt bytes
 * (http/prompt.h).
 */
#ifndef ACCELNET_PROXY_TOKROUTE_H
#define ACCELNET_PROXY_TOKROUTE_H

#include "proxy/reqbody.h"
#include "proxy/worker.h"

/*
 * The token blocks of body[0..len), whose view <rb> holds, read on worker <w>, into <rb>'s
 * block array (lent already):
 * how many (0: a prompt under one block), or -1 when the request's model has no tokenizer,
 * or its prompt cannot be tokenized (no prompt the tokenizer takes, a chat message the format
 * refuses, the tokenizer failed on it): the caller then reads blocks of bytes. Sets
 * reqbody.llm_block_tokens. A prompt of a model with a tokenizer is counted by how it was
 * keyed (runtime/proxy_metric.h, enum tok_keyed), a body without a prompt not at all.
 */
long tokroute_blocks(struct worker *w, struct reqbody *rb, const char *body, size_t len);

#endif
