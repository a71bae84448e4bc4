/*
 * budget.h - a route's spend budgets (routes.budget): what each tenant has spent in the
 * current window, shared by every worker without a lock.
 *
 * A fixed table of routes.budget.tenants slots (BUDGET_SLOTS unless set) per route with a budget,
 * each a tenant's key beside its spend word (policy/spend_math.h: the window's tag and the
 * micro-units spent in it). A reservation finds the tenant's slot among its BUDGET_PROBE probes
 * (where they lie is mixed with a random seed of the table's, as the rate limits' are), or claims
 * one that is free: never used, or of a tenant that holds nothing in this window (no spend, no
 * reservation, nothing the sync has yet to send); then reserves with one compare-and-swap on the
 * word, which also starts a new window. A slot is never shared: when every probe holds a tenant
 * that spent in this window, the reservation is refused (-ENOSPC, counted in <full>) until the
 * window turns, so no tenant is ever charged another's spend, nor let through on another's budget.
 * A slot taken over between finding it and reserving in it is noticed after the swap (the key is
 * read again) and the reservation undone and tried anew.
 *
 * Settling swaps in what the request did cost for what it reserved, in the window it reserved
 * in; the spend never goes below zero and never past the budget by a race (each reservation is
 * checked against the word it replaces). A long answer that outgrows its reservation may
 * extend it as it goes (budget_extend(): within the budget, never past it); a settlement that
 * costs more than the hold still counts whole (a response whose usage passed its reservation),
 * and nothing more passes until the window turns.
 *
 * A budget shared by several instances (cluster:) is marked <synced>: each slot then also
 * counts what was charged or given back since the last sync, which the sync adds to the
 * tenant's shared spend in the store; the store's total plus what was charged here since
 * becomes the slot's spend. Between two syncs each instance decides from what it knows, so
 * N instances may together pass the budget by what the others pass in one sync (and by a
 * tenant's first request on an instance that has not yet heard of it): refusals follow
 * within a sync.
 *
 * Memory is fixed: a slot of 24 bytes per tenant it holds per route with a budget, and the
 * seed: at most that many tenants spend on a route in one window (fewer when their probes
 * crowd; all of them in a table no larger than BUDGET_PROBE).
 */
#ifndef ACCELNET_GUARD_BUDGET_H
#define ACCELNET_GUARD_BUDGET_H

#include "conf/model.h"
#include "policy/spend_math.h"

#include <stdatomic.h>
#include <stdint.h>

#define BUDGET_SLOTS CONF_BUDGET_TENANTS /* unless routes.budget.tenants says */
#define BUDGET_PROBE 16

struct budget_slot {
	_Atomic uint64_t key;	 /* the tenant's; 0: never used */
	_Atomic uint64_t word;	 /* its spend in a window (spend_math.h) */
	_Atomic int64_t pending; /* synced: micro-units charged (+) or given back (-) since
				    the last sync */
};

struct route_budget {
	const struct conf_budget *conf; /* NULL: the route has no budget */
	struct budget_slot *slots;	/* nslots, when conf */
	size_t nslots;			/* routes.budget.tenants (BUDGET_SLOTS unless set) */
	uint64_t seed;			/* where a key's probes lie: random, this table's own */
	_Atomic uint64_t full;		/* reservations refused: no slot free for the tenant */
	unsigned synced;		/* shared through cluster: (set before any reserve) */
};

/* One tenant's spend in a sync (cluster:): what this instance charged since the last. */
struct budget_sync_item {
	struct budget_slot *slot;
	uint64_t key, window;
	int64_t micros;
};

/* What one request holds of its tenant's budget until it settles. */
struct budget_hold {
	struct budget_slot *slot; /* NULL: nothing reserved */
	uint64_t window;	  /* the window it reserved in */
	uint64_t reserved;	  /* micro-units */
	unsigned synced;	  /* the budget is shared: settling counts for the sync */
};

/* Set up the budget <c> names (NULL: none). 0 or -ENOMEM. */
int budget_init(struct route_budget *b, const struct conf_budget *c);
void budget_fini(struct route_budget *b);

/*
 * Reserve <cost> micro-units (at least 1) of <tenant>'s budget at the Unix time <now_s>: 0 with
 * <h> set; -EAGAIN when its window's spend plus <cost> would pass the budget (*spent then says
 * what it has spent in this window); -ENOSPC when the table has no slot for it in this window.
 */
int budget_reserve(struct route_budget *b, uint64_t tenant, uint64_t cost, uint64_t now_s,
		   struct budget_hold *h, uint64_t *spent);

/*
 * Add up to <more> micro-units to the hold <h> of <b> at the Unix time <now_s>, as much of it
 * as the budget still covers: how many were added (0 when nothing is left, or when the window
 * <h> reserved in has turned).
 */
uint64_t budget_extend(const struct route_budget *b, struct budget_hold *h, uint64_t more,
		       uint64_t now_s);

/* Settle <h> at <actual> micro-units (what it did cost); safe on any hold, once. */
void budget_settle(struct budget_hold *h, uint64_t actual);

/*
 * A sync (synced budgets, control/cluster.c): the tenants that spent in the window of the Unix
 * time <now_s>, from *cursor on, at most <max> into <out> (what each charged since the last
 * sync taken, so the next counts from 0): how many. A sync sends each one's count to the
 * store, which adds it to the tenant's shared spend in that window and answers the total.
 */
size_t budget_collect(struct route_budget *b, uint64_t now_s, size_t *cursor,
		      struct budget_sync_item *out, size_t max);

/* The store answered <total> micro-units for item <it> of <b>, at the Unix time <now_s>: the
 * tenant's spend here becomes that plus what this instance charged since it was collected
 * (unless its slot has gone to another tenant or its window has turned). */
void budget_apply(const struct route_budget *b, const struct budget_sync_item *it, uint64_t total,
		  uint64_t now_s);

#endif
