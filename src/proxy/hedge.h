/*
 * hedge.h - hedging (pools.hedge_after_ms): an idempotent request without a body that has
 * had no answer for that long is sent again to another backend with a free slot; the first
 * response head wins and the other connection is closed, which cancels the work there. To an
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
