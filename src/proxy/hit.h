/*
 * hit.h - answering a client from a cache object (proxy/caching.h): the HTTP/1 codec's
 * "serve" whole, and the pieces HTTP/2's (h2.c) frames itself.
 *
 * The answer's head is the stored head (or a 304's, 206's or 416's made from it) with
 * Content-Length (or, while the fill is under way and its length unknown, chunked framing
 * of our own; close-delimited for an HTTP/1.0 client), Age, Cache-Status and X-Request-Id,
 * queued in cl->out; the body is written straight from the object's segments, gathered
 * with what cl->out holds in one writev: the stored bytes are never copied. A reader that
 * has caught up with a fill waits for the filling thread's notice; a coalesced reader whose
 * fill fails, turns out not storable, is another variant or keeps its head past
 * routes.cache.wait_ms goes on to the backend itself (if it has sent nothing yet; else its
 * connection is cut, as when a backend dies mid-response).
 */
#ifndef ACCELNET_PROXY_HIT_H
#define ACCELNET_PROXY_HIT_H

#include "proxy/client.h"

/* Move the answer on; finish the exchange at its end. RUN_AGAIN without an object
 * (caching_answers() NULL): it goes on to the backend. */
enum run hit_run(struct client *cl);

/*
 * The same pieces for a codec that frames its own answer (h2.c):
 * hit_await_head: before the answer's head, the object's head must be here: RUN_AGAIN when
 * it is (or the exchange went on without it: caching_answers() NULL), RUN_STAY to wait.
 * hit_head: the answer's head as HTTP/1.1 (<chunked>: while the fill's length is unknown,
 * chunked framing may be said; <keep>: no Connection: close) into out[0..cap): its length,
 * or -1 when it does not fit (the log counts it where the codec writes it).
 * hit_started: the head went: the exchange's status and log say so.
 * hit_copy: up to <len> body bytes of the answer from where it is into <out>, moved past;
 * *end 1 when the answer is whole, -1 when the fill it reads failed before it was, else 0
 * (caching_wait() for more when none came).
 */
enum run hit_await_head(struct exchange *x);
/* After the proxy's own event-stream head went (heartbeats, sse.h) and the cache answers in
 * the backend's place (a revalidation's 304, stale-if-error; HTTP/2, whose codec consults
 * the cache on the backend's head before it looks at the early stream): 1 when the answer is
 * a whole 200 event stream, whose body then continues the stream without a head of its own;
 * else 0, and the stream ends with an SSE error event. */
int hit_continues_stream(struct exchange *x);
int hit_head(struct exchange *x, char *out, size_t cap, int chunked, int keep);
void hit_started(struct exchange *x);
size_t hit_copy(struct exchange *x, char *out, size_t len, int *end);

#endif
