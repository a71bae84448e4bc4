/*
 * tally.h - the route's, the tenant's and the tokens' figures of each exchange (tally.c's
 * essay says which), and the token usage scanner of its response.
 *
 * It follows each exchange through its hooks (xhooks.h): at the response head it decides
 * whether the tokens are counted, on the response body it feeds the scanner (http/usage.h)
 * before the client can see the bytes, at the end it adds the exchange to the figures. The
 * usage it scans is the one the token limits settle with (quota.h) and the access log
 * writes.
 */
#ifndef ACCELNET_PROXY_TALLY_H
#define ACCELNET_PROXY_TALLY_H

#include "http/usage.h"
#include "proxy/exchange.h"
#include "proxy/xhooks.h"

extern const struct xhook tally_hook;

/* Count the tokens of <x>'s response whatever it is (a token reservation settles with
 * them): called before its response head. */
void tally_want_tokens(struct exchange *x);

/* Scan <x>'s response's usage for a reader even when its tokens are not counted (they stay
 * uncounted): called from a response head hook that runs after the tallies'. */
void tally_read_usage(struct exchange *x);

/* The usage scanned so far of <x>'s response (all zero while it is neither counted nor
 * read). */
const struct usage_scan *tally_usage(const struct exchange *x);

/* Its token events so far, and when the first and the last came (0: none). */
struct tally_tokens {
	uint64_t events, first_ns, last_ns;
};
void tally_tokens_of(const struct exchange *x, struct tally_tokens *t);

/* Its prompt and completion tokens, as the route's figures count them: 1, or 0 when its
 * tokens are not counted. */
int tally_usage_tokens(const struct exchange *x, uint64_t *prompt, uint64_t *completion);

#endif
