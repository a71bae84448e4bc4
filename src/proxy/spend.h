/*
 * spend.h - routes.budget on the request path: each request of a route with a budget is
 * priced (prices:, by the model its body names), reserved against its tenant's budget
 * before it may queue or take a slot, and settled with what the backend says it cost.
 *
 * The guard (quota.h) asks for the body when the route has a budget; once the body is read,
 * its model must have a price (else 403: a route with a budget serves priced models only)
 * and its max_tokens are read by the token limits' reader. The reservation (the stage
 * tokens, after the token limits') is the prompt's estimate (body bytes / 4) at the input
 * price plus max_tokens times the answers asked for at the output price; a tenant whose
 * window cannot cover it gets 429 with the OpenAI error type insufficient_quota and
 * Retry-After until its window turns; a tenant the budget table has no slot for (guard/budget.h)
 * gets 503. An event stream is charged as it goes: when what its events cost passes the hold,
 * the hold grows by a first reservation's worth, within the budget; when the budget cannot
 * cover what came, the stream is cut off (x->cut_why) before those bytes reach the client and
 * charged what it held, so streams never take the spend past the budget. When the response
 * is whole (or the exchange ends) the reservation is settled with the cost of what the usage
 * scanner (tally.h) read: the usage's prompt tokens (those it reports as cached at the cached
 * price) and completion tokens, else the prompt estimate and one completion token per
 * streamed event with generated text, else -- a response that began and told nothing -- the
 * reservation; a request that reached the backend whole and got no response (the client
 * left, the backend failed) costs its prompt estimate; one that reached none, or got an
 * error status without usage, costs nothing. What it cost is added to the tenant's, the
 * route's and the model's spend counters and shown to the access log.
 *
 * Its context per exchange (spend_hook, xhooks.h): the price, the reservation and the cost.
 */
#ifndef ACCELNET_PROXY_SPEND_H
#define ACCELNET_PROXY_SPEND_H

#include "proxy/exchange.h"
#include "proxy/xhooks.h"

#include <stdint.h>

extern const struct xhook spend_hook;

/* The guard passed <x> (its tenant authenticated): on a route with a budget, ask for its
 * body (411 for a chunked one: its model must be read before admission). */
enum run spend_guard(struct exchange *x);

/* Its body <body> was read whole by the strict view (quota_note_body() checked it and read
 * <max_tokens>, all answers together): find its model's price, or answer 403. */
enum run spend_note_body(struct exchange *x, const char *body, uint64_t max_tokens);

/* Reserve its cost before admission, or answer 429 insufficient_quota. */
enum run spend_reserve(struct exchange *x);

/* Was <x> refused because its tenant's budget is spent (its 429's OpenAI type is then
 * insufficient_quota, quota.h)? */
int spend_refused(const struct exchange *x);

/* What <x> cost, in micro-units, once settled: 1, or 0 when it was not metered. */
int spend_cost_of(const struct exchange *x, uint64_t *micros);

#endif
