/*
 * lora.c - tiers of backends for a LoRA adapter's request, and folding a scrape's report into
 * a backend's snapshot (see lora.h).
 */
#include "policy/lora.h"

#include <string.h>

static int has(const uint64_t *h, size_t n, uint64_t m)
{
	for (size_t i = 0; i < n; i++)
		if (h[i] == m)
			return 1;
	return 0;
}

void lora_fold(const struct lora_snap *prev, const uint64_t *act, size_t nact, uint32_t max,
	       uint64_t base, struct lora_snap *next)
{
	struct lora_snap s = {.base = base, .max = max};
	for (size_t i = 0; i < nact && s.n < LORA_REMEMBER; i++)
		if (!has(s.hash, s.n, act[i]))
			s.hash[s.n++] = act[i];
	s.active = s.n;
	size_t keep = max > s.active ? max : s.active;
	if (keep > LORA_REMEMBER)
		keep = LORA_REMEMBER;
	size_t pn = prev->n < LORA_REMEMBER ? prev->n : LORA_REMEMBER;
	for (size_t i = 0; i < pn && s.n < keep; i++)
		if (!has(s.hash, s.n, prev->hash[i]))
			s.hash[s.n++] = prev->hash[i];
	*next = s;
}

enum lora_tier lora_tier(const struct lora_snap *s, uint64_t m)
{
	uint32_t n = s->n < LORA_REMEMBER ? s->n : LORA_REMEMBER;
	uint32_t active = s->active < n ? s->active : n;
	if (!s->max)
		return LORA_FULL;
	if (has(s->hash, active, m))
		return LORA_HAS;
	if (active >= s->max)
		return LORA_FULL;
	return has(s->hash + active, n - active, m) ? LORA_HAS : LORA_ROOM;
}

/* Is <m> an adapter, as far as the snapshots go? */
static int is_adapter(const struct lora_snap *const *snap, uint64_t m, size_t n)
{
	int some_base = 0, some_max = 0;
	for (size_t i = 0; i < n; i++) {
		const struct lora_snap *s = snap[i];
		if (!s)
			continue;
		if (s->base == m && m)
			return 0;
		some_base |= s->base != 0;
		some_max |= s->max != 0;
		if (has(s->hash, s->n < LORA_REMEMBER ? s->n : LORA_REMEMBER, m))
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
