/*
 * engine_grpc.h - OpenAI requests to an engine spoken to in its own gRPC API (pools[].engine:
 * api sglang-grpc, docs/tokenizers.md "gRPC mode"), for one HTTP/2 stream to a backend
 * (up_h2.c).
 *
 * The upstream half writes the request as HTTP/1.1, as to any backend; the stream collects it
 * whole and hands it here: a POST to /v1/chat/completions (or /v1/completions) becomes the
 * engine's Generate call, its prompt tokenized with the pool's model's tokenizer (the chat
 * template for messages: runtime/tokprompt.h) and its sampling fields carried over
 * (http/engine_pb.h). Anything else is answered here (404, 400, 413), without a call.
 *
 * The engine's answer is a stream of gRPC messages of token ids and a grpc-status in its
 * trailers. Its DATA is gathered here (gin) and read a message at a time, and written out as
 * the HTTP/1.1 response an OpenAI server would have sent -- Server-Sent Events for a streamed
 * request (one event per message, its ids detokenized: tok/detok.h, whole characters only),
 * else one JSON object, chunked as it comes -- with usage from the engine's counts (its
 * cached_tokens when it gives them) and [DONE]. A message is read only when the room for its
 * event is there, so a slow client holds the engine's stream back (the caller gives no
 * credit back while messages wait: engine_call_holding). A grpc-status other than 0, or a
 * GenerateError, becomes an OpenAI error with the status it stands for (http_grpc_to_http(),
 * or the error's http_status_code) when nothing was written yet; after, an SSE error event
 * ends a stream and a JSON answer is cut. An engine's bytes that are not its messages (a
 * frame past the buffer, a malformed message) end the answer the same way, as a 502 before.
 */
#ifndef ACCELNET_PROXY_ENGINE_GRPC_H
#define ACCELNET_PROXY_ENGINE_GRPC_H

#include "core/buf.h"
#include "http/engine_pb.h"
#include "proxy/worker.h"
#include "tok/detok.h"

#include <stddef.h>
#include <stdint.h>

#define ENGINE_RID_MAX 64
#define ENGINE_MODEL_MAX 256 /* the request's "model", JSON-escaped, cut to fit */

struct conf_engine;
struct tokmodel;

enum engine_phase {
	ENG_CALL,   /* the call is under way */
	ENG_ANSWER, /* an answer of ours waits in <answer>; no call */
	ENG_DONE,   /* the response is whole */
};

struct engine_call {
	struct worker *w;
	const struct tokmodel *tm;
	enum engine_phase phase;
	unsigned chat : 1, stream : 1;
	unsigned vllm : 1;	/* vLLM's service (its counts are deltas), else SGLang's */
	unsigned head_out : 1;	/* the response head went out */
	unsigned end_in : 1;	/* the engine's END_STREAM came */
	unsigned finished : 1;	/* a complete message came */
	unsigned have_msg : 1;	/* msg is read, being written from pos */
	unsigned grpc_ct : 1;	/* content-type application/grpc */
	int http_status;	/* the engine's :status (0: none yet) */
	int grpc_status;	/* -1: none yet */
	char grpc_message[128]; /* the engine's grpc-message, printable ASCII */
	struct buf *gin;	/* the engine's DATA not yet read */
	struct buf *answer;	/* ENG_ANSWER: our whole response */
	struct engine_resp msg; /* the message being written */
	struct engine_idpos pos;
	uint32_t msg_len; /* its frame's bytes in gin, header included */
	struct detok dt;
	uint64_t nprompt;		     /* ids we sent */
	uint64_t ngot;			     /* ids the engine gave */
	uint64_t prompt, completion, cached; /* the engine's counts */
	unsigned has_prompt : 1, has_completion : 1, has_cached : 1, chunk_ids : 1;
	char finish[16];
	char rid[ENGINE_RID_MAX + 1];
	char model[ENGINE_MODEL_MAX];
	uint64_t created;
};

/*
 * The request req[0..len) (an HTTP/1.1 head and its whole body) for engine <e>: 1 with the
 * Generate call's :path in *path and its message written into <out> (sent as the stream's
 * body); or 0 with an answer of ours waiting (phase ENG_ANSWER: pump it); or -ENOSPC when
 * the message does not fit in <out> (nothing written: try a larger one); or -ENOMEM.
 */
int engine_call_begin(struct engine_call *c, struct worker *w, const struct conf_engine *e,
		      const char *req, size_t len, struct buf *out);

/* Answer <status> with <detail> here, without a call (phase ENG_ANSWER). */
void engine_call_refuse(struct engine_call *c, struct worker *w, int status, const char *detail);

/* A field of the engine's response head or trailers. */
void engine_call_header(struct engine_call *c, const char *name, size_t nlen, const char *value,
			size_t vlen);
/* DATA from the engine. 0, or -EPROTO when it cannot be held (a message past the buffer). */
int engine_call_data(struct engine_call *c, const uint8_t *p, size_t n);
/* The engine ended its stream (END_STREAM). */
void engine_call_end(struct engine_call *c);

/*
 * Write what is ready of the response into out[0..cap) (HTTP/1.1, as a backend would): the
 * bytes written (0: nothing now; more once the engine sends, or room comes), or -EPROTO when
 * the response must be cut. phase is ENG_DONE once it is whole.
 */
long engine_call_pump(struct engine_call *c, char *out, size_t cap);

/* Do read messages wait for room (the engine's credit is held back)? */
int engine_call_holding(const struct engine_call *c);

/* Its buffers back to the worker. */
void engine_call_free(struct engine_call *c);

#endif
