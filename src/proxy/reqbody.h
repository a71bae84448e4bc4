/*
 * reqbody.h - what the proxy knows of a request body's content, and who asked for it.
 *
 * Some stages decide on the body, not only on the head: the route's pool may list models (read
 * "model"), balance on the prompt (its key, or balance: llm's blocks), reserve tokens
 * (max_tokens), key the cache on the body. Each says so when the head is read (want_*, the
 * cache's cache_body); the stage "model" may read into the body before the route (peeked),
 * and the codec reads the body before admission for the others (exchange_codec_ops.await_body,
 * relay.c). The whole body is read once by the strict view (jsonview.h: reqbody_read_view()),
 * and every stage reads that view: a body the view refuses is answered 400 by a stage that
 * decides on it, never read another way. The bytes themselves and their framing are the
 * exchange's request body (exchange.req), not this.
 */
#ifndef ACCELNET_PROXY_REQBODY_H
#define ACCELNET_PROXY_REQBODY_H

#include "conf/model.h"
#include "http/jsonview.h"
#include "runtime/queue.h"
#include "proxy/worker.h"

#include <stddef.h>
#include <stdint.h>

struct reqbody {
	unsigned want_key : 1;	   /* the pool balances on the prompt key, read from the body */
	unsigned want_model : 1;   /* the pool's backends list models: read "model" from the body */
	unsigned model_read : 1;   /* the body's "model" was looked for (wt.has_model: found) */
	unsigned peeked : 1;	   /* the body was read into before the route (stage "model") */
	unsigned want_view : 1;	   /* tokens_per_minute: the body's max_tokens must be read */
	unsigned cache_body : 1;   /* an inference POST: the cache's key is its body (caching.h) */
	unsigned want_session : 1; /* pools[].session.responses_api: previous_response_id */
	unsigned view_read : 1;	   /* the whole body was read by the strict view (view) ... */
	unsigned view_ok : 1;	   /* ... and it is valid JSON (else view_why says why) */
	/* the strict view of the whole body (view_ok), read once, read by every stage */
	struct json_view view;
	const char *view_why;
	/* the body's "model", decoded (when wt.has_model; wt.model is its models_hash()) */
	char model[CONF_MODEL_MAX + 1];
	uint16_t model_len;
	uint64_t *llm_blocks; /* balance: llm: the prompt's blocks, lent by the worker (llm.h) */
	uint16_t llm_block_tokens; /* ... of this many tokens (proxy/tokroute.h); 0: of bytes */
};

/*
 * Read the whole body body[0..len) once with the strict view (jsonview.h) into rb->view, unless
 * it was read already. 0 when it is valid JSON; -EINVAL when it is not (rb->view_why says why:
 * a stage that reads the body then answers 400, never reads it another way).
 */
int reqbody_read_view(struct reqbody *rb, const char *body, size_t len);

/*
 * Note the "model" of the body <body> as the view found it (rb->model_read): the name in
 * rb->model and its hash in <wt> (the exchange's place in its pool's queue) when it names one;
 * none when the view was not read (a body too long to hold, chunked) or is not valid. -EINVAL
 * when the body names a model the proxy cannot hold (a NUL in it, longer than CONF_MODEL_MAX
 * bytes): the backend reads that name, so it must not be taken for none (the caller refuses
 * the request), else 0.
 */
int reqbody_note_model(struct reqbody *rb, const char *body, struct waiter *wt);
#define REQBODY_MODEL_UNREADABLE "a \"model\" with a NUL, or longer than 255 bytes"

/* The exchange ends: the prompt's blocks go back to worker <w>. */
void reqbody_end(struct reqbody *rb, struct worker *w);

#endif
