/*
 * sse.h - early event streams (routes.sse_heartbeat_ms).
 *
 * A streaming request (one that accepts text/event-stream, or whose JSON body asks for
 * "stream": true) that has no answer yet gets the proxy's own event-stream head, once, and
 * then an SSE comment every sse_heartbeat_ms, so the client and any idle timer between see
 * life while it waits in the queue or for the first token. When the backend's head comes,
 * a 200 text/event-stream continues the stream the proxy began (a chunked body passes as it
 * is, a Content-Length body becomes one chunk); anything else ends it with an SSE error
 * event. HTTP/1.1 and HTTP/2 clients (each head parsed as HTTP/1.1), never for HEAD (an answer
 * without a body).
 *
 * This file decides who gets heartbeats; writing them, and handing the stream over, is the
 * codec's (relay.c for HTTP/1: relay_heartbeat, and the early head in response_head; h2.c:
 * codec_heartbeat, DATA frames on the stream).
 */
#ifndef ACCELNET_PROXY_SSE_H
#define ACCELNET_PROXY_SSE_H

#include "http/parse.h"
#include "proxy/exchange.h"

#include <stddef.h>

/* From the request head <h>: does x's route want heartbeats, and may this request get them? */
void sse_setup(struct exchange *x, const struct http_head *h);
/* The request body is read (or not buffered): does it ask for a stream? Its strict view says
 * ("stream": true in a whole, valid body); a body the view has not read gets none. */
void sse_decide(struct exchange *x);
/* The backend's head <h> came after the proxy began the event stream: 0 when its body goes on
 * in that stream (a 200 event stream with a body; close-delimited only where <close_ok>, as
 * HTTP/2's DATA frames carry any), else the status the proxy answers instead, its reason in
 * detail[0..cap). */
int sse_refusal(const struct http_head *h, int close_ok, char *detail, size_t cap);

#endif
