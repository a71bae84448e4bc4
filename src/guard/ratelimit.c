/*
 * ratelimit.c - GCRA over a lock-free table of keys (see ratelimit.h).
 */
#include "guard/ratelimit.h"

#include <errno.h>
#include <stdlib.h>

int ratelimit_init(struct ratelimit *rl, unsigned per, unsigned per_s, unsigned burst)
{
	if (!per || !per_s)
		return -EINVAL;
	rl->interval_us = (uint64_t)per_s * 1000000u / per;
	if (!rl->interval_us)
		rl->interval_us = 1;
	if (!burst)
		burst = per / per_s ? per / per_s : 1;
	rl->tolerance_us = (uint64_t)(burst - 1) * rl->interval_us;
	rl->rate_per_s = per / per_s;
	atomic_init(&rl->shared, 0);
	rl->slots = calloc(RL_SLOTS, sizeof(*rl->slots));
	return rl->slots ? 0 : -ENOMEM;
}

void ratelimit_fini(struct ratelimit *rl)
{
	free(rl->slots);
	rl->slots = NULL;
}

/* The slot of <key>: its own, a free one it claims, or (all busy) the least loaded. */
static struct rl_slot *slot_for(struct ratelimit *rl, uint64_t key, uint64_t now_us)
{
	if (!key)
		key = 1; /* 0 marks a slot never used */
	size_t h = (size_t)(key ^ (key >> 29)) * 0x9e3779b97f4a7c15u >> 16;
	struct rl_slot *least = NULL;
	uint64_t least_tat = UINT64_MAX;
	for (unsigned i = 0; i < RL_PROBE; i++) {
		struct rl_slot *s = &rl->slots[(h + i) % RL_SLOTS];
		uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
		if (k == key)
			return s;
		uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed);
		/* a never used slot, or one whose bucket is full again: take it over */
		if ((k == 0 || tat <= now_us) && atomic_compare_exchange_strong(&s->key, &k, key)) {
			atomic_store_explicit(&s->tat, now_us, memory_order_relaxed);
			return s;
		}
		if (tat < least_tat)
			least_tat = tat, least = s;
	}
	atomic_fetch_add_explicit(&rl->shared, 1, memory_order_relaxed);
	return least;
}

uint64_t ratelimit_take(struct ratelimit *rl, uint64_t key, uint64_t now_us)
{
	struct rl_slot *s = slot_for(rl, key, now_us);
	uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed);
	for (;;) {
		uint64_t allow_at = tat > rl->tolerance_us ? tat - rl->tolerance_us : 0;
		if (now_us < allow_at)
			return allow_at - now_us;
		uint64_t next = (tat > now_us ? tat : now_us) + rl->interval_us;
		if (atomic_compare_exchange_weak_explicit(&s->tat, &tat, next, memory_order_relaxed,
							  memory_order_relaxed))
			return 0;
	}
}
