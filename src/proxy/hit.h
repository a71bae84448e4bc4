/*
 * hit.h - answering an HTTP/1 client from a cache object (proxy/caching.h): the codec's
 * "serve".
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

#endif
