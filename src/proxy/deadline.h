/*
 * deadline.h - when an exchange must next be looked at, and what happens then.
 *
 * The clocks read are those of its current attempt (attempt.h: its connect, its head sent);
 * a hedged copy is not timed on its own: it ends with the first answer, or with the exchange.
 *
 * One timer per connection; for an exchange it is armed at the earliest of: the queue's
 * timeout (or spillover.after_ms), timeouts.connect_ms for a connect, first_byte_ms for the
 * response head, between_bytes_ms for any other progress, the request body's own clocks
 * (timeouts.body_ms for the whole body, limits.min_body_rate judged over windows of
 * BODY_RATE_WINDOW_MS so an early burst buys no later stall), timeouts.send_ms while the
 * client's socket is full (it takes none of the response: a slow reader), the next
 * heartbeat and the hedge, or LOCAL_WAIT_MS while a connect waits for a free descriptor; and
 * never past the client's own deadline (until_ms: a gRPC request's grpc-timeout). A window
 * in which the proxy itself held the body back (queued, its buffer full, the backend not taking
 * bytes) is not counted against the client.
 */
#ifndef ACCELNET_PROXY_DEADLINE_H
#define ACCELNET_PROXY_DEADLINE_H

#include "proxy/exchange.h"

#include <stdint.h>

#define BODY_RATE_WINDOW_MS 5000
#define BODY_BUF_WAIT_MS 50 /* how often a body waiting for a body buffer looks again */
#define LOCAL_WAIT_MS 50    /* how often a connect that found no descriptor tries again */

/* The next time <x> must be looked at (<now>: the loop's clock). */
uint64_t deadline_next(const struct exchange *x, uint64_t now);

/* The timer came at <now>: act on whichever deadline is due. */
enum run deadline_fire(struct exchange *x, uint64_t now);

#endif
