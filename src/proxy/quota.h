/*
 * quota.h - routes.rate_limit on the request path: the guard's rate and concurrency checks,
 * and the token reservation an LLM request makes before it may take a slot (the limits
 * themselves, and the settling at the end of the exchange, are guard/limits.h's).
 *
 * A route's spend budget (routes.budget) follows the same three steps, after the token
 * limit's at each (spend.h): the guard asks for the body, the body's price is found, the
 * cost reserved.
 *
 * A refused request is answered 429 with Retry-After (when waiting helps) and
 * X-RateLimit-Limit, -Remaining and -Reset for the limit that refused it. Responses that
 * pass carry no X-RateLimit-* headers: the numbers are exact only at the check, and adding
 * them would rewrite every response head of a limited route.
 *
 * Its context per exchange (quota_hook, xhooks.h) is the guard's: the identity routes.auth
 * proved (x->peer.identity points into it), what the exchange holds of the route's limits, and
 * how a refusal is worded. Its hooks settle the token reservation against the usage tally.h
 * scans: on each piece of response body, when the response is in whole, at the end.
 */
#ifndef ACCELNET_PROXY_QUOTA_H
#define ACCELNET_PROXY_QUOTA_H

#include "guard/apikeys.h"
#include "guard/limits.h"
#include "proxy/exchange.h"
#include "proxy/xhooks.h"

#include <stddef.h>

extern const struct xhook quota_hook;

/* Where the guard stage writes the identity it proved (x->peer.identity then points to it):
 * QUOTA_IDENTITY_CAP bytes, kept as long as the exchange. */
#define QUOTA_IDENTITY_CAP (APIKEYS_TENANT_MAX + 1)
char *quota_identity_buf(struct exchange *x);

/* How the proxy's 429 for <x> is worded: its OpenAI error type ("requests" or "tokens";
 * "insufficient_quota" for a spent budget, with no X-RateLimit-* lines) and its
 * X-RateLimit-* lines; NULL and "" when no limit refused it. */
const char *quota_refusal_type(const struct exchange *x);
const char *quota_refusal_headers(const struct exchange *x);

/* The route's per_ip rate (the guard stage, before auth: a client guessing credentials
 * is limited before each guess costs a hash). */
enum run quota_guard_address(struct exchange *x);

/* The route's tenant and route rates, then its concurrency cap (the guard stage, after
 * auth); then its budget's (spend_guard()). */
enum run quota_guard(struct exchange *x);

/* The request body <body> has been read before admission (as much as is held): note its
 * max_tokens from the strict view (x->reqbody.view), or refuse a body whose max_tokens cannot be
 * read as the backend reads it: not held whole (413), not valid JSON or not a whole number (400).
 * tokens_per_minute and budget routes only (the guard asked for the body: x->reqbody.want_view);
 * a budget's price is then found (spend_note_body()). */
enum run quota_note_body(struct exchange *x, const char *body);

/* Reserve the request's tokens (tokens_per_minute), then its cost (a budget,
 * spend_reserve()), before admission: 429 when its tenant's tokens or budget cannot cover
 * them. */
enum run quota_reserve(struct exchange *x);

#endif
