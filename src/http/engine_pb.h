/*
 * engine_pb.h - the messages of an inference engine's gRPC Generate service that the proxy
 * speaks (pools[].engine, docs/tokenizers.md "gRPC mode"): SGLang's
 * sglang.grpc.scheduler.SglangScheduler/Generate and vLLM's vllm.grpc.engine.VllmEngine/Generate,
 * the services SGLang's router (SMG) uses, where the router tokenizes and detokenizes and the
 * engine takes and gives token ids.
 *
 * Written: a GenerateRequest (request_id 1; tokenized 2 {input_ids 2, packed}; sampling_params
 * 4 {temperature 1, top_p 2, max_new_tokens 8, stop 9, skip_special_tokens 11}; stream 17) in a
 * gRPC message frame; vLLM's numbers stop 10, skip_special_tokens 12 and stream 5, the rest
 * alike. Read: a GenerateResponse (request_id 1; one of chunk 2 {token_ids 1,
 * prompt_tokens 2, completion_tokens 3, cached_tokens 4}, complete 3 {output_ids 1,
 * finish_reason 2, prompt_tokens 3, completion_tokens 4, cached_tokens 5}, error 4 {message 1,
 * http_status_code 2, details 3}). The field numbers are the engine's; nothing else of its
 * .proto is used, and the rest of what it sends is skipped.
 *
 * A response is the engine's bytes: engine_pb_read() checks the whole message (every field's
 * framing, every token id's varint, the types of the fields it reads) before any of it is
 * used, and the token ids are then walked in place, never copied (engine_pb_next_id). Pure.
 */
#ifndef ACCELNET_HTTP_ENGINE_PB_H
#define ACCELNET_HTTP_ENGINE_PB_H

#include "http/protowire.h"

#include <stddef.h>
#include <stdint.h>

#define ENGINE_STOP_MAX 16 /* stop strings sent, at most (OpenAI allows 4) */

/* Whose Generate service: their requests differ in three field numbers and the :path. */
enum engine_dialect {
	ENGINE_SGLANG = 0,
	ENGINE_VLLM,
};

/* The Generate call's :path for engine <d>. */
const char *engine_pb_path(enum engine_dialect d);

struct engine_str {
	const char *p;
	size_t n;
};

/* What a request asks of the engine. */
struct engine_req {
	enum engine_dialect dialect;
	struct engine_str rid; /* request_id */
	const uint32_t *ids;   /* the prompt's token ids */
	size_t nids;
	float temperature, top_p;
	unsigned has_temperature : 1, has_top_p : 1, stream : 1;
	long max_tokens; /* max_new_tokens; < 0: not given (the engine's default) */
	struct engine_str stop[ENGINE_STOP_MAX];
	size_t nstop;
};

/* The gRPC message (5-byte frame header, then the GenerateRequest) for <r> into out[0..cap):
 * its length, or -ENOSPC. */
long engine_pb_write(const struct engine_req *r, uint8_t *out, size_t cap);

enum engine_kind {
	ENGINE_NONE = 0, /* a response with none of the three (skipped) */
	ENGINE_CHUNK = 2,
	ENGINE_COMPLETE = 3,
	ENGINE_ERROR = 4,
};

/* One GenerateResponse as read; its pointers are into the message's bytes. */
struct engine_resp {
	enum engine_kind kind;
	const uint8_t *body; /* the chunk's or complete's bytes, for engine_pb_next_id */
	size_t body_len;
	uint64_t nids; /* token ids in it */
	uint64_t prompt_tokens, completion_tokens, cached_tokens;
	unsigned has_prompt : 1, has_completion : 1, has_cached : 1;
	struct engine_str finish;      /* complete's finish_reason */
	struct engine_str message;     /* error's message */
	struct engine_str http_status; /* error's http_status_code */
};

/* Read the GenerateResponse p[0..n) into *r: 0, or -EBADMSG when it is not one (malformed
 * framing, a token id past 32 bits, a field of the wrong type). */
int engine_pb_read(const uint8_t *p, size_t n, struct engine_resp *r);

/* Where a walk of a response's token ids is. Zeroed: at the first. */
struct engine_idpos {
	size_t at;	  /* the next field in r->body */
	size_t pat, pend; /* within a packed run: body[pat..pend) */
};

/* The next token id of <r> after *pos: 1 with *id, or 0 after the last. */
int engine_pb_next_id(const struct engine_resp *r, struct engine_idpos *pos, uint32_t *id);

#endif
