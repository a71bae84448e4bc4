/*
 * limits.h - a route's limits (routes.rate_limit), shared by every worker without a lock:
 * request rates per client address, per tenant and for the whole route; LLM tokens per
 * tenant per minute; requests in flight per tenant.
 *
 * Rates and tokens are GCRA buckets (ratelimit.h). A token limit is spent in two steps: an
 * admission reserves what the request may cost (its max_tokens and an estimate of its
 * prompt), and the end of the response settles it with what it did cost (the backend's
 * usage, or the streamed tokens counted), giving back the unused part or charging more.
 * The concurrency cap is a count per tenant in a fixed table like the buckets': each slot is
 * one word, the tenant's 32-bit tag beside its count, so that claiming a free slot (count 0)
 * and counting in it are one compare-and-swap and a count is never made under another
 * tenant's tag. A tenant counts in the slot its tag holds among its probes, else claims the
 * first free one; only when all its probes are held by others does it share the least busy
 * (counted in conc_shared; so do two tenants whose tags agree, one pair in 2^32). Where a
 * tenant's probes lie is mixed with a random seed of the table's: tenant keys are unseeded
 * hashes of addresses and identities, and a client with many addresses could otherwise fill
 * another's probes, all at their cap, and have it refused at its first request. Taken when a
 * request passes the guard, given back when its exchange ends, so a tenant at its cap is refused
 * before it can queue or take a slot.
 *
 * Each check says what refused it and how the bucket stands, for the X-RateLimit-Limit,
 * -Remaining and -Reset headers of the 429.
 */
#ifndef ACCELNET_GUARD_LIMITS_H
#define ACCELNET_GUARD_LIMITS_H

#include "conf/model.h"
#include "guard/ratelimit.h"
#include "http/usage.h"

#include <stdatomic.h>
#include <stdint.h>

#define LIMITS_CONC_SLOTS 16384

struct conc_slot {
	_Atomic uint64_t word; /* tag << 32 | count */
};

struct route_limits {
	struct ratelimit ip, tenant, route, tokens;
	unsigned has_ip : 1, has_tenant : 1, has_route : 1, has_tokens : 1;
	unsigned concurrency;	      /* per tenant; 0: no cap */
	unsigned default_max_tokens;  /* a request's reservation when it names none */
	struct conc_slot *conc;	      /* LIMITS_CONC_SLOTS, when concurrency */
	uint64_t conc_seed;	      /* where a key's probes lie: random, this table's own */
	_Atomic uint64_t conc_shared; /* times a tenant had to share a count */
};

/* Why a request was refused, and the numbers its 429 shows. */
struct limit_refusal {
	const char *what;   /* "per_ip", "per_tenant", "per_route", "tokens_per_minute",
			       "concurrency" */
	uint64_t wait_us;   /* until it would pass: Retry-After (0: when a request ends) */
	struct rl_state st; /* the bucket (or the count) that refused */
};

/* What one request holds of its route's limits, until its exchange ends. */
struct limit_hold {
	struct conc_slot *conc; /* one of the tenant's requests in flight, or NULL */
	uint64_t tenant;
	uint64_t prompt_est;   /* tokens: the prompt's estimate (body bytes / 4) ... */
	uint64_t max_tokens;   /* ... and what it may generate (or default_max_tokens) */
	uint64_t charged;      /* tokens charged so far: the reservation, then the overdraft */
	unsigned reserved : 1; /* a token reservation is held (settle it) */
};

/* Set up the limits <c> names (NULL: none). 0 or -ENOMEM. */
int limits_init(struct route_limits *l, const struct conf_rate_limit *c);
void limits_fini(struct route_limits *l);

/*
 * A request from the address <ip_key> at <now_us>: its per_ip rate, taken before the
 * credentials are checked (a client guessing passwords pays a slow hash per try). 0 when it
 * passes, else -EAGAIN with <why> filled.
 */
int limits_take_address(struct route_limits *l, uint64_t ip_key, uint64_t now_us,
			struct limit_refusal *why);

/*
 * A request of <tenant> at <now_us>, its address passed: the tenant's rate, then the
 * route's (a request refused by the route's has used the tenant's). 0 when it passes, else
 * -EAGAIN with <why> filled.
 */
int limits_take_rate(struct route_limits *l, uint64_t tenant, uint64_t now_us,
		     struct limit_refusal *why);

/*
 * One more request in flight for <tenant>: 0 with *hold set (give it back with
 * limits_release_hold()), or -EBUSY with <why> filled when it holds its cap already. No cap:
 * 0, *hold NULL.
 */
int limits_take_hold(struct route_limits *l, uint64_t tenant, struct conc_slot **hold,
		     struct limit_refusal *why);
void limits_release_hold(struct conc_slot *hold);

/* Reserve <n> tokens of <tenant>'s budget: 0, or -EAGAIN with <why> filled. */
int limits_reserve_tokens(struct route_limits *l, uint64_t tenant, uint64_t n, uint64_t now_us,
			  struct limit_refusal *why);
/* <delta> tokens more (> 0) or fewer (< 0) than charged so far (ratelimit_adjust). */
void limits_settle_tokens(struct route_limits *l, uint64_t tenant, int64_t delta, uint64_t now_us);

/*
 * More response body of a request holding a reservation went through the scanner <u> (the
 * caller feeds it): charge at once whatever the tokens counted so far exceed.
 */
void limits_count_response(struct route_limits *l, struct limit_hold *h, const struct usage_scan *u,
			   uint64_t now_us);

/*
 * The request ends: settle its reservation with what it cost (the usage total seen, else
 * the prompt estimate and the events counted, else -- a response began but told nothing --
 * the reservation; no response or an error status: nothing), and give back its count in
 * flight. <answered>: a response with a status below 400 began. Safe on any hold, once.
 */
void limits_end(struct route_limits *l, struct limit_hold *h, const struct usage_scan *u,
		int answered, uint64_t now_us);

#endif
