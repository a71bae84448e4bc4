/*
 * hedge.h - hedging (pools.hedge_after_ms): an idempotent request without a body that has
 * had no answer for that long is sent again to another backend with a free slot; the first
 * response head wins and the other connection is closed, which cancels the work there.
 * Only a request that is safe to send twice is hedged: never one with a body, never a method
 * that is not idempotent (POST, PATCH: an Idempotency-Key field changes nothing, the proxy
 * keeps no record of keys), and never a WebSocket handshake (HTTP/1.1 Upgrade or HTTP/2
 * extended CONNECT, exchange.tunnel): though a GET without a body, the copy would open a
 * second session on another backend and then cut it, which the application sees. To an
 * HTTP/2 backend (pools.protocol h2, h2c) each try is a stream (up_h2.h): the copy's head is
 * written into its stream and its answer pulled from it, and the loser's stream is reset
 * (RST_STREAM CANCEL) while its connection goes on carrying the others.
 */
#ifndef ACCELNET_PROXY_HEDGE_H
#define ACCELNET_PROXY_HEDGE_H

#include "proxy/exchange.h"

#include <stdint.h>

/* May <x> be hedged, and when (*when)? 0 when it may not (now or ever). */
int hedge_due(const struct exchange *x, uint64_t *when);
/* Send a copy to another backend with a free slot, if there is one. */
void hedge_start(struct exchange *x);
/* The copy takes over: the first connection is closed and its slot given back. */
void hedge_promote(struct exchange *x);
/* Drive the copy: send its head, read its answer. 1 when it answered first and has been
 * promoted; 0 otherwise (a failed copy is dropped quietly). */
int hedge_run(struct exchange *x);

#endif
