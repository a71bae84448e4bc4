/*
 * lora.c - tiers of backends for a LoRA adapter's request, and folding a scrape's report into
 * a backend's snapshot (see lora.h).
 */
#include "policy/lora.h"

#include <string.h>

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static int has(const uint64_t *h, size_t n, uint64_t m)
{
	for (size_t i = 0; i < n; i++)
		if (h[i] == m)
			return 1;
	return 0;
}

/* hash[from..to) of <s> holds <m>? */
static int holds(const struct lora_snap *s, uint32_t from, uint32_t to, uint64_t m)
{
	for (uint32_t i = from; i < to; i++)
		if (LOAD(s->hash[i]) == m)
			return 1;
	return 0;
}

/* Its counts as read now, each clamped to the array. */
static void counts(const struct lora_snap *s, uint32_t *n, uint32_t *active)
{
	uint32_t k = LOAD(s->n), a = LOAD(s->active);
	*n = k < LORA_REMEMBER ? k : LORA_REMEMBER;
	*active = a < *n ? a : *n;
}

void lora_fold(struct lora_snap *s, const uint64_t *act, size_t nact, uint32_t max, uint64_t base)
{
	uint64_t h[LORA_REMEMBER];
	size_t n = 0, active;
	for (size_t i = 0; i < nact && n < LORA_REMEMBER; i++)
		if (!has(h, n, act[i]))
			h[n++] = act[i];
	active = n;
	size_t keep = max > active ? max : active;
	if (keep > LORA_REMEMBER)
		keep = LORA_REMEMBER;
	uint32_t pn, pa;
	counts(s, &pn, &pa);
	for (uint32_t i = 0; i < pn && n < keep; i++) {
		uint64_t p = LOAD(s->hash[i]);
		if (!has(h, n, p))
			h[n++] = p;
	}
	for (size_t i = 0; i < n; i++)
		atomic_store_explicit(&s->hash[i], h[i], memory_order_relaxed);
	atomic_store_explicit(&s->active, (uint32_t)active, memory_order_relaxed);
	atomic_store_explicit(&s->n, (uint32_t)n, memory_order_relaxed);
	atomic_store_explicit(&s->max, max, memory_order_relaxed);
	atomic_store_explicit(&s->base, base, memory_order_relaxed);
}

enum lora_tier lora_tier(const struct lora_snap *s, uint64_t m)
{
	uint32_t n, active, max = LOAD(s->max);
	counts(s, &n, &active);
	if (!max)
		return LORA_FULL;
	if (holds(s, 0, active, m))
		return LORA_HAS;
	if (active >= max)
		return LORA_FULL;
	return holds(s, active, n, m) ? LORA_HAS : LORA_ROOM;
}

/* Is <m> an adapter, as far as the snapshots go? */
static int is_adapter(const struct lora_snap *const *snap, uint64_t m, size_t n)
{
	int some_base = 0, some_max = 0;
	for (size_t i = 0; i < n; i++) {
		const struct lora_snap *s = snap[i];
		if (!s)
			continue;
		uint64_t base = LOAD(s->base);
		uint32_t k, active;
		if (base == m && m)
			return 0;
		some_base |= base != 0;
		some_max |= LOAD(s->max) != 0;
		counts(s, &k, &active);
		if (holds(s, 0, k, m))
			return 1;
	}
	return some_base && some_max;
}

int lora_prefer(const struct lora_snap *const *snap, uint64_t m, struct lb_candidate *cand,
		size_t n)
{
	uint8_t tier[LB_MAX_BACKENDS];
	int best = -1;
	if (n > LB_MAX_BACKENDS || !is_adapter(snap, m, n))
		return -1;
	for (size_t i = 0; i < n; i++) {
		tier[i] = (uint8_t)(snap[i] ? lora_tier(snap[i], m) : LORA_FULL);
		if (cand[i].eligible && (best < 0 || tier[i] < best))
			best = tier[i];
	}
	if (best < 0)
		return -1; /* no tier has room: the request waits as any other */
	for (size_t i = 0; i < n; i++)
		if (tier[i] != best)
			cand[i].eligible = cand[i].busy = 0;
	return best;
}
