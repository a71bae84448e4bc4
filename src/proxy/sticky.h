/*
 * sticky.h - sessions on the request path (pools[].session): what names a request's
 * conversation, and which backend answered each Responses API response.
 *
 * A pool with session: keeps each conversation on the backend that served it, through the
 * pool's table (policy/stick.h), read and written by the pick (runtime/pick.c) as a
 * preference the balancer's eligibility bounds. This room says which conversation a request
 * belongs to: the session header's value or the session cookie's (the pick remembers where it
 * went), or the body's "previous_response_id" (its backend was remembered when that
 * response passed: this room's hook reads the "id" of a /v1/responses answer, a JSON body or
 * the events of a stream, and remembers the backend that wrote it). The names themselves are
 * hashed (stick_key) where they are read and never kept; a header's or cookie's name is
 * hashed as STICK_NAMED, a response id as STICK_RESPONSE, so neither can name the other's
 * conversation.
 *
 * An id is looked for in the first STICKY_SCAN_MAX bytes of the answer: the first "id" key
 * there whose value is a plain string (letters, digits, "_-.:") of at most STICKY_ID_MAX
 * bytes; the Responses API writes the response's id first (a JSON answer's top-level "id",
 * the stream's response.created event). An id a chunk's framing cuts is not learned.
 */
#ifndef ACCELNET_PROXY_STICKY_H
#define ACCELNET_PROXY_STICKY_H

#include "http/parse.h"
#include "proxy/xhooks.h"

#include <stddef.h>

#define STICKY_ID_MAX 128
#define STICKY_SCAN_MAX 8192

struct exchange;

extern const struct xhook sticky_hook;

/* Stage classify: the header's or cookie's session of <x> (head <h>), when its pool keeps
 * sessions; and whether its body and its answer are to be read for the Responses API. */
void sticky_classify(struct exchange *x, const struct http_head *h);

#endif
