/*
 * reqnames.h - the names an exchange goes by: its request id and its trace context.
 *
 * Every exchange has one request id and one trace context (a W3C traceparent whose parent-id
 * is the proxy's own span for this hop), made when it starts (reqnames_make(), from
 * exchange_new()). A client in trusted_proxies is believed: its well-formed X-Request-Id is
 * kept and its valid traceparent continued (same trace id, a new span id, its tracestate
 * passed on), and it may ask for X-Accelnet-Timing. Any other client's are ignored, so no
 * client chooses the id its request is logged and forwarded under. The rewrite of the
 * request head, the access log, /debug/requests and the proxy's own answers read them.
 */
#ifndef ACCELNET_PROXY_REQNAMES_H
#define ACCELNET_PROXY_REQNAMES_H

#include "http/parse.h"
#include "http/rewrite.h"
#include "http/traceparent.h"
#include "proxy/worker.h"

struct reqnames {
	char reqid[REQUEST_ID_MAX + 1];
	char traceparent[TRACEPARENT_LEN + 1]; /* sent upstream: the trace id, the proxy's span */
	unsigned pass_tracestate : 1;	       /* the client's traceparent was taken */
	unsigned want_timing : 1;	       /* a trusted client asked for X-Accelnet-Timing */
};

/* The names of the request <h> into <n> (see above), the random parts from <w>'s generator;
 * <trusted>: the client is in trusted_proxies. */
void reqnames_make(struct reqnames *n, struct worker *w, const struct http_head *h, int trusted);

/* A fresh request id (32 lower-case hex digits) into out[0..32], for an exchange or for a
 * request refused before it became one. */
void reqnames_make_request_id(struct worker *w, char *out);

#endif
