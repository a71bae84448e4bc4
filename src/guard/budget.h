/*
 * budget.h - a route's spend budgets (routes.budget): what each tenant has spent in the
 * current window, shared by every worker without a lock.
 *
 * A fixed table of BUDGET_SLOTS slots per route with a budget, each a tenant's key beside
 * its spend word (policy/spend_math.h: the window's tag and the micro-units spent in it). A
 * reservation finds the tenant's slot among its probes (where they lie is mixed with a
 * random seed of the table's, as the rate limits' are), claims a free one, or takes over one
 * whose tenant spent nothing in this window; then reserves with one compare-and-swap on the
 * word, which also starts a new window. When every probe is held by a tenant that spent in
 * this window, it shares the one that spent least (counted in <shared>): refused early,
 * never late. Settling swaps in what the request did cost for what it reserved, in the
 * window it reserved in; the spend never goes below zero and never past the budget by a race
 * (each reservation is checked against the word it replaces). A settlement may take the
 * spend past the budget (a response that cost more than its reservation); nothing more
 * passes until the window turns.
 *
 * Memory is fixed: BUDGET_SLOTS slots of 16 bytes per route with a budget, and the seed.
 */
#ifndef ACCELNET_GUARD_BUDGET_H
#define ACCELNET_GUARD_BUDGET_H

#include "conf/model.h"
#include "policy/spend_math.h"

#include <stdatomic.h>
#include <stdint.h>

#define BUDGET_SLOTS 16384
#define BUDGET_PROBE 8

struct budget_slot {
	_Atomic uint64_t key;  /* the tenant's; 0: never used */
	_Atomic uint64_t word; /* its spend in a window (spend_math.h) */
};

struct route_budget {
	const struct conf_budget *conf; /* NULL: the route has no budget */
	struct budget_slot *slots;	/* BUDGET_SLOTS, when conf */
	uint64_t seed;			/* where a key's probes lie: random, this table's own */
	_Atomic uint64_t shared;	/* times a tenant had to share a slot */
};

/* What one request holds of its tenant's budget until it settles. */
struct budget_hold {
	struct budget_slot *slot; /* NULL: nothing reserved */
	uint64_t window;	  /* the window it reserved in */
	uint64_t reserved;	  /* micro-units */
};

/* Set up the budget <c> names (NULL: none). 0 or -ENOMEM. */
int budget_init(struct route_budget *b, const struct conf_budget *c);
void budget_fini(struct route_budget *b);

/*
 * Reserve <cost> micro-units of <tenant>'s budget at the Unix time <now_s>: 0 with <h> set,
 * or -EAGAIN when its window's spend plus <cost> would pass the budget (*spent then says
 * what it has spent in this window).
 */
int budget_reserve(struct route_budget *b, uint64_t tenant, uint64_t cost, uint64_t now_s,
		   struct budget_hold *h, uint64_t *spent);

/* Settle <h> at <actual> micro-units (what it did cost); safe on any hold, once. */
void budget_settle(struct budget_hold *h, uint64_t actual);

#endif
