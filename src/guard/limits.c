/*
 * limits.c - a route's rates, tokens and concurrency caps (see limits.h).
 */
#include "guard/limits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int limits_init(struct route_limits *l, const struct conf_rate_limit *c)
{
	memset(l, 0, sizeof(*l));
	if (!c)
		return 0;
	if (c->per_ip.n) {
		if (ratelimit_init(&l->ip, c->per_ip.n, c->per_ip.per_s, c->burst) < 0)
			goto nomem;
		l->has_ip = 1;
	}
	if (c->per_tenant.n) {
		if (ratelimit_init(&l->tenant, c->per_tenant.n, c->per_tenant.per_s, c->burst) < 0)
			goto nomem;
		l->has_tenant = 1;
	}
	if (c->per_route.n) {
		if (ratelimit_init(&l->route, c->per_route.n, c->per_route.per_s, c->burst) < 0)
			goto nomem;
		l->has_route = 1;
	}
	if (c->tokens_per_minute) {
		if (ratelimit_init(&l->tokens, c->tokens_per_minute, 60, c->token_burst) < 0)
			goto nomem;
		l->has_tokens = 1;
		l->default_max_tokens = c->default_max_tokens;
	}
	if (c->concurrency) {
		if (!(l->conc = calloc(LIMITS_CONC_SLOTS, sizeof(*l->conc))))
			goto nomem;
		if (getrandom(&l->conc_seed, sizeof(l->conc_seed), 0) != sizeof(l->conc_seed))
			l->conc_seed = (uint64_t)(uintptr_t)l->conc ^ (uint64_t)time(NULL) << 20;
		l->concurrency = c->concurrency;
	}
	return 0;
nomem:
	limits_fini(l);
	return -ENOMEM;
}

void limits_fini(struct route_limits *l)
{
	ratelimit_fini(&l->ip);
	ratelimit_fini(&l->tenant);
	ratelimit_fini(&l->route);
	ratelimit_fini(&l->tokens);
	free(l->conc);
	l->conc = NULL;
}

static int take(struct ratelimit *rl, const char *what, uint64_t key, uint64_t n, uint64_t now_us,
		struct limit_refusal *why)
{
	why->wait_us = ratelimit_take_n(rl, key, n, now_us, &why->st);
	why->what = what;
	return why->wait_us ? -EAGAIN : 0;
}

int limits_take_address(struct route_limits *l, uint64_t ip_key, uint64_t now_us,
			struct limit_refusal *why)
{
	if (l->has_ip && take(&l->ip, "per_ip", ip_key, 1, now_us, why) < 0)
		return -EAGAIN;
	return 0;
}

int limits_take_rate(struct route_limits *l, uint64_t tenant, uint64_t now_us,
		     struct limit_refusal *why)
{
	if (l->has_tenant && take(&l->tenant, "per_tenant", tenant, 1, now_us, why) < 0)
		return -EAGAIN;
	if (l->has_route && take(&l->route, "per_route", 1, 1, now_us, why) < 0)
		return -EAGAIN;
	return 0;
}

int limits_reserve_tokens(struct route_limits *l, uint64_t tenant, uint64_t n, uint64_t now_us,
			  struct limit_refusal *why)
{
	if (!l->has_tokens)
		return 0;
	return take(&l->tokens, "tokens_per_minute", tenant, n, now_us, why);
}

void limits_settle_tokens(struct route_limits *l, uint64_t tenant, int64_t delta, uint64_t now_us)
{
	if (l->has_tokens)
		ratelimit_adjust(&l->tokens, tenant ? tenant : 1, delta, now_us);
}

#define CONC_COUNT(w) ((uint32_t)(w))
#define CONC_TAG(w) ((uint32_t)((w) >> 32))

/* One more in <s>, whose word was <w>, if its count is below <cap>: 1 taken, 0 at the cap,
 * -1 the word changed under us (*w reloaded; look again). */
static int conc_count(struct conc_slot *s, uint64_t *w, uint64_t next, unsigned cap)
{
	if (CONC_COUNT(*w) >= cap)
		return 0;
	return atomic_compare_exchange_weak_explicit(&s->word, w, next, memory_order_acq_rel,
						     memory_order_acquire)
		   ? 1
		   : -1;
}

/* One more request of the tenant tagged <tag> counted in its slot: 1 counted (*out the
 * slot), 0 at its cap. Its own slot (its tag) first, else the first free one among its
 * probes (claimed with the count in one step), else the least busy, shared. */
static int conc_take(struct route_limits *l, uint64_t key, uint32_t tag, struct conc_slot **out)
{
	uint64_t k = key ^ l->conc_seed; /* no one outside knows where another's probes lie */
	size_t h = (size_t)((k ^ (k >> 31)) * 0xbf58476d1ce4e5b9u >> 20);
	for (;;) {
		struct conc_slot *own = NULL, *free_slot = NULL, *least = NULL;
		uint64_t own_w = 0, free_w = 0, least_w = UINT64_MAX;
		for (unsigned i = 0; i < RL_PROBE && !own; i++) {
			struct conc_slot *s = &l->conc[(h + i) % LIMITS_CONC_SLOTS];
			uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
			if (CONC_TAG(w) == tag)
				own = s, own_w = w;
			else if (!CONC_COUNT(w) && !free_slot)
				free_slot = s, free_w = w;
			else if (CONC_COUNT(w) < CONC_COUNT(least_w))
				least = s, least_w = w;
		}
		int rc;
		if (own) {
			rc = conc_count(own, &own_w, own_w + 1, l->concurrency);
			*out = own;
		} else if (free_slot) {
			rc =
			    conc_count(free_slot, &free_w, (uint64_t)tag << 32 | 1, l->concurrency);
			*out = free_slot;
		} else {
			rc = conc_count(least, &least_w, least_w + 1, l->concurrency);
			*out = least;
			if (rc == 1)
				atomic_fetch_add_explicit(&l->conc_shared, 1, memory_order_relaxed);
		}
		if (rc >= 0)
			return rc;
	}
}

int limits_take_hold(struct route_limits *l, uint64_t tenant, struct conc_slot **hold,
		     struct limit_refusal *why)
{
	*hold = NULL;
	if (!l->concurrency)
		return 0;
	uint32_t tag = (uint32_t)(tenant ^ tenant >> 32);
	struct conc_slot *s;
	if (!conc_take(l, tenant, tag ? tag : 1, &s)) { /* tag 0 marks a slot never used */
		why->what = "concurrency";
		why->wait_us = 0;
		why->st = (struct rl_state){.limit = l->concurrency, .remaining = 0, .reset_us = 0};
		return -EBUSY;
	}
	*hold = s;
	return 0;
}

void limits_release_hold(struct conc_slot *hold)
{
	if (hold) /* the count is at least 1 while held: the tag is never touched */
		atomic_fetch_sub_explicit(&hold->word, 1, memory_order_release);
}

void limits_count_response(struct route_limits *l, struct limit_hold *h, const struct usage_scan *u,
			   uint64_t now_us)
{
	uint64_t live = h->prompt_est + u->events;
	if (!h->reserved || u->has_total || live <= h->charged)
		return;
	/* a stream past its reservation: charged as it goes, never overdrawn unseen */
	limits_settle_tokens(l, h->tenant, (int64_t)(live - h->charged), now_us);
	h->charged = live;
}

void limits_end(struct route_limits *l, struct limit_hold *h, const struct usage_scan *u,
		int answered, uint64_t now_us)
{
	limits_release_hold(h->conc);
	h->conc = NULL;
	if (!h->reserved)
		return;
	h->reserved = 0;
	uint64_t cost = u->has_total ? u->total
			: u->events  ? h->prompt_est + u->events
			: answered   ? h->charged
				     : 0;
	/* a backend may report any 19 digits (2^63 and more): the difference is taken in
	 * unsigned arithmetic and saturates, so it never flips into a refund */
	if (cost > h->charged) {
		uint64_t d = cost - h->charged;
		limits_settle_tokens(l, h->tenant, d > INT64_MAX ? INT64_MAX : (int64_t)d, now_us);
	} else if (cost < h->charged) {
		uint64_t d = h->charged - cost;
		limits_settle_tokens(l, h->tenant, d > INT64_MAX ? -INT64_MAX : -(int64_t)d,
				     now_us);
	}
	h->charged = cost;
}
