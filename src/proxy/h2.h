/*
 * h2.h - the HTTP/2 client codec: one client connection that speaks HTTP/2, each of its
 * streams an exchange (exchange.h) through the same stages, hooks, attempts and policy as an
 * HTTP/1 request, to the same HTTP/1 upstream half (up_h1.h).
 *
 * The HTTP/1 codec (h1.c) accepts every connection and hands one over here when its first
 * bytes are the HTTP/2 connection preface on a listener with listen[].http2 on: over TLS once
 * ALPN chose "h2" (RFC 9113 3.2), on a plain listener with prior knowledge (h2c, 3.3). The
 * connection keeps its struct client (transport, buffers, timer, place on the worker's list); its
 * state becomes C_H2 and h1.c passes its events here. Framing, HPACK and the protocol's state
 * machine are nghttp2's (Debian's libnghttp2); what to read, when to give flow-control credit back
 * and what each stream does are ours (h2.c's essay says how).
 */
#ifndef ACCELNET_PROXY_H2_H
#define ACCELNET_PROXY_H2_H

#include "proxy/client.h"

#include <stddef.h>

/* Do p[0..len) begin with the connection preface (1), might they once more comes (0), or
 * not (-1)? */
int h2_preface(const char *p, size_t len);

/* cl->in begins with the preface: the connection speaks HTTP/2 from now on (C_H2). */
void h2_take(struct client *cl);

/* Run the HTTP/2 connection <cl> until it waits (its reads and timer set) or ends. */
void h2_run(struct client *cl);

/* Its timer came: the streams' deadlines, the idle connection's end. */
void h2_on_timer(struct client *cl);

/* Draining (a reload, SIGTERM): GOAWAY, the streams under way finished, then closed. */
void h2_drain(struct client *cl);

#endif
