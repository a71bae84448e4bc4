/*
 * retry.h - what a failed upstream attempt means, and whether to try again.
 *
 * A request is retried once, on another backend, when its connection could not be
 * established (nothing was sent, whatever the method: this spends the pool's retry budget),
 * and when a reused keep-alive connection died before any response byte and the method is
 * idempotent (the backend had closed it: not its failure, and free). A refused or timed-out
 * connect, or a failed TLS handshake (logged once, with OpenSSL's reason), keeps the backend out of
 * rotation for fail_timeout_ms; a first-byte timeout counts as a 504 in its latency record. While a
 * hedged copy runs on another backend, the copy carries on alone instead.
 */
#ifndef ACCELNET_PROXY_RETRY_H
#define ACCELNET_PROXY_RETRY_H

#include "proxy/exchange.h"

enum retry_action {
	RETRY_NO,	/* answer *status / *detail, or cut the response if it started */
	RETRY_AGAIN,	/* try another backend (x->att->retry_status: what to answer if none) */
	RETRY_TO_HEDGE, /* the hedged copy takes over */
};

/* Did <why> happen before anything could be sent: TCP, its timeout, or TLS? */
static inline int retry_connect_failed(enum up_failure why)
{
	return why == UP_CONNECT || why == UP_CONNECT_TIMEOUT || why == UP_TLS;
}

/* The current attempt of <x> failed for <why> (not UP_LOCAL): note it against the backend
 * and decide. */
enum retry_action retry_decide(struct exchange *x, enum up_failure why, int *status,
			       const char **detail);

#endif
