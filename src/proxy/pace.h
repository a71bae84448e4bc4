/*
 * pace.h - the clocks and marks by which an exchange's client is paced: how fast its request
 * body comes (timeouts.body_ms, limits.min_body_rate), whether it takes the response
 * (timeouts.send_ms), its heartbeats (sse.h), and whether the body is read before admission.
 *
 * The codec that carries the exchange keeps them, one set per exchange (the HTTP/1 client
 * codec in its connection: client.h), and moves them as bytes move; deadline.c, sse.c and the
 * stages judge them, through the exchange's pointer to them (exchange_pace()). They are
 * codec-neutral: an HTTP/2 stream is paced by the same marks, kept by its own codec.
 */
#ifndef ACCELNET_PROXY_PACE_H
#define ACCELNET_PROXY_PACE_H

#include "proxy/exchange.h"

#include <stdint.h>

struct xpace {
	uint64_t body_start_ms; /* the request head was read: the body's clocks start */
	uint64_t rate_mark_ms, rate_mark_bytes; /* the current min_body_rate window began */
	uint64_t client_took_ms;  /* the client last took response bytes (timeouts.send_ms) */
	uint64_t hb_next_ms;	  /* the next heartbeat */
	unsigned client_full : 1; /* the last write to the client left bytes unsent */
	unsigned buffering : 1;	  /* reading the body before admission (the stage "body") */
	unsigned buf_wait : 1;	  /* ... and waiting for a body buffer to be free */
	unsigned sse_hb : 1;	  /* a streaming request on a route with heartbeats */
	unsigned sse_body : 1;	  /* heartbeats if the body asks for a stream: not looked yet */
};

/* The pacing marks of <x>, kept by its codec (which points x->pace at them when the exchange
 * starts: no call to reach them). */
static inline struct xpace *exchange_pace(const struct exchange *x)
{
	return x->pace;
}

#endif
