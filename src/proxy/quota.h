/*
 * quota.h - routes.rate_limit on the request path: the guard's rate and concurrency checks,
 * and the token reservation an LLM request makes before it may take a slot (the limits
 * themselves, and the settling at the end of the exchange, are guard/limits.h's).
 *
 * A refused request is answered 429 with Retry-After (when waiting helps) and
 * X-RateLimit-Limit, -Remaining and -Reset for the limit that refused it. Responses that
 * pass carry no X-RateLimit-* headers: the numbers are exact only at the check, and adding
 * them would rewrite every response head of a limited route.
 */
#ifndef ACCELNET_PROXY_QUOTA_H
#define ACCELNET_PROXY_QUOTA_H

#include "proxy/exchange.h"

#include <stddef.h>

/* The route's per_ip rate (the guard stage, before auth: a client guessing credentials
 * is limited before each guess costs a hash). */
enum run quota_guard_address(struct exchange *x);

/* The route's tenant and route rates, then its concurrency cap (the guard stage, after
 * auth). */
enum run quota_guard(struct exchange *x);

/* The request body has been read before admission (as much as is held): note its
 * max_tokens from the strict view (x->view), or refuse a body whose max_tokens cannot be read
 * as the backend reads it: not held whole (413), not valid JSON or not a whole number (400).
 * tokens_per_minute routes only (quota_guard asked for the body: x->want_view). */
enum run quota_note_body(struct exchange *x);

/* Reserve the request's tokens (tokens_per_minute) before admission: 429 when its tenant's
 * budget cannot cover them. */
enum run quota_reserve(struct exchange *x);

/* More response body went through x->usage (tally.c): charge what its tokens now exceed. */
void quota_count(struct exchange *x);
/* The response has come whole from the backend: settle its tokens and give back its count
 * in flight now, not when the last byte has gone (exchange_free does it otherwise). */
void quota_response_done(struct exchange *x);

#endif
