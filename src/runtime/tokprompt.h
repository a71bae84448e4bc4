/*
 * tokprompt.h - a request's prompt as the token ids its engine computes, for a model the
 * config gives a tokenizer (models:, tok/tokmodel.h): a completion's "prompt" string encoded
 * with the tokenizer's special tokens (as vLLM encodes it), a chat completion's "messages"
 * (and "tools") rendered by the model's chat format with the generation prompt and encoded
 * without them
 * (as apply_chat_template does); then its chain of token-block hashes. The proxy's balance:
 * llm keys its prefix index on these, and accelnet sim its cache and KV events, so that both
 * cut the prompt where the engine does.
 *
 * Each thread works through its own struct tokprompt: a tokenizer's scratch (grown to the
 * largest prompt, never per call, with its cache of a conversation's segments: tok.h) for each
 * of the last TOKPROMPT_MODELS models it served, so that a router of several models does not
 * empty it at each switch, the chat text, and an arena
 * the prompt's JSON is decoded into: while a call decodes, jansson's allocations on that
 * thread come from the arena (its allocator is set once, before main, to functions that fall
 * through to malloc and free on every other thread and outside such a call), and the arena
 * is grown after a call that needed more, so that a steady load allocates nothing.
 */
#ifndef ACCELNET_RUNTIME_TOKPROMPT_H
#define ACCELNET_RUNTIME_TOKPROMPT_H

#include "http/engine_pb.h"
#include "http/jsonview.h"
#include "tok/tokmodel.h"

#include <stddef.h>
#include <stdint.h>

#define TOKPROMPT_MODELS 4 /* scratches a thread keeps; the least recently used is replaced */

struct tokprompt {
	struct {
		struct tok_scratch tok;
		uint64_t serial; /* the tokmodel <tok> was made for; 0: none yet */
		uint64_t used;	 /* the call that used it last */
	} scratch[TOKPROMPT_MODELS];
	uint64_t calls;
	struct chat_text chat;
	char *arena;		  /* the decoded JSON's values, reused by every call */
	size_t cap, used, wanted; /* wanted: what the last call asked for in all */
	uint32_t *given;	  /* a prompt given as token ids, copied out; grown, never shrunk */
	size_t given_cap;
};

void tokprompt_free(struct tokprompt *p);

/*
 * The ids of the prompt of <body>[0..len), whose strict view is <v>, under model <m>: *ids
 * (in <p>, valid until its next call) and *n. Of at most the first <max_text> bytes of the
 * prompt's text (cut at a character; 0: all of it): *cut says whether it was cut, when the
 * last ids may differ from those of the whole text (a pre-token cut short). A "prompt" that
 * is a list of token ids (as vLLM takes one) is used as given (its first <max_text> ids). 0;
 * or why not, each a reason the caller counts (proxy/tokroute.c):
 *   -ENOENT   the body has no "prompt" nor "messages"
 *   -ENOTSUP  "messages", and the model has no chat format
 *   -EINVAL   messages the chat format does not take (a content part, a role, tools)
 *   -EBADMSG  a "prompt" that is neither a string nor one list of ids (several prompts)
 *   -EIO      the tokenizer failed on the text (tok_encode(): not UTF-8, the
 *             pre-tokenizer's regex gave up, libsentencepiece refused it)
 *   -ENOMEM
 */
int tokprompt_ids(struct tokprompt *p, const struct tokmodel *m, const char *body, size_t len,
		  const struct json_view *v, size_t max_text, const uint32_t **ids, size_t *n,
		  int *cut);

/*
 * The engine's request (pools[].engine: engine_pb.h) for the OpenAI request body[0..len)
 * under model <m>, written into out[0..outcap): the ids of its prompt (a chat completion's
 * messages through the chat format, <chat>; else a completion's "prompt" string), its stream,
 * max_tokens (or max_completion_tokens), temperature, top_p and stop, and r->rid (given by
 * the caller). *r keeps what was read (ids valid until <p>'s next call; no stop strings); the
 * request's "model" goes into model[0..cap) (cut; "" without). The message's length, or
 * -EINVAL with why[0..whylen) saying what the request lacks (for a 400), -ENOSPC when the
 * message does not fit in <outcap>, or -ENOMEM.
 */
long tokprompt_engine(struct tokprompt *p, const struct tokmodel *m, const char *body, size_t len,
		      int chat, struct engine_req *r, uint8_t *out, size_t outcap, char *model,
		      size_t cap, char *why, size_t whylen);

/* The salt of the body's "cache_salt" (0 without): folded into the chain's seed. */
uint64_t tokprompt_seed(const char *body, const struct json_view *v);

#endif
