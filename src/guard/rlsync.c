/*
 * rlsync.c - collecting, charging and merging shared rate limits (see rlsync.h).
 */
#include "guard/rlsync.h"

size_t rlsync_collect(struct ratelimit *rl, uint64_t now_us, size_t *cursor,
		      struct rlsync_item *out, size_t max)
{
	size_t n = 0, i = *cursor % RL_SLOTS;
	uint64_t floor = now_us + atomic_load_explicit(&rl->cold_us, memory_order_relaxed);
	for (size_t seen = 0; seen < RL_SLOTS && n < max; seen++, i = (i + 1) % RL_SLOTS) {
		struct rl_slot *s = &rl->slots[i];
		uint64_t key = atomic_load_explicit(&s->key, memory_order_acquire);
		if (!key)
			continue;
		int64_t units = atomic_load_explicit(&s->pending, memory_order_relaxed);
		uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed);
		if (!units && tat <= floor)
			continue; /* as full as it may be, and nothing to tell */
		out[n].slot = s;
		out[n].key = key;
		out[n].units = atomic_exchange_explicit(&s->pending, 0, memory_order_relaxed);
		n++;
	}
	*cursor = i;
	return n;
}

int64_t rlsync_cost_us(const struct ratelimit *rl, int64_t units)
{
	uint64_t u = units < 0 ? 0 - (uint64_t)units : (uint64_t)units;
	uint64_t cost = u > UINT64_MAX / rl->period_us ? UINT64_MAX : u * rl->period_us / rl->per;
	if (cost > (uint64_t)RLSYNC_COST_MAX)
		cost = (uint64_t)RLSYNC_COST_MAX;
	return units < 0 ? -(int64_t)cost : (int64_t)cost;
}

uint64_t rlsync_charge(uint64_t tat, uint64_t now_us, int64_t cost_us)
{
	uint64_t base = tat > now_us ? tat : now_us;
	if (cost_us >= 0)
		return base + (uint64_t)cost_us;
	uint64_t back = 0 - (uint64_t)cost_us;
	return base > now_us + back ? base - back : now_us;
}

void rlsync_apply(struct ratelimit *rl, const struct rlsync_item *it, uint64_t debt_us, unsigned n,
		  uint64_t now_us)
{
	struct rl_slot *s = it->slot;
	if (debt_us > (uint64_t)RLSYNC_COST_MAX)
		debt_us = (uint64_t)RLSYNC_COST_MAX;
	/* of what the shared bucket holds, this instance may spend its 1/n until the next sync */
	uint64_t room = debt_us < rl->capacity_us ? rl->capacity_us - debt_us : 0;
	uint64_t base = now_us + debt_us + (n > 1 ? room / n * (n - 1) : 0);
	uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed), next;
	do {
		if (atomic_load_explicit(&s->key, memory_order_acquire) != it->key)
			return;
		int64_t since = atomic_load_explicit(&s->pending, memory_order_relaxed);
		next = rlsync_charge(base, now_us, rlsync_cost_us(rl, since));
	} while (!atomic_compare_exchange_weak_explicit(&s->tat, &tat, next, memory_order_relaxed,
							memory_order_relaxed));
}

uint64_t rlsync_debt_floor(uint64_t last_tat_us, uint64_t now_us, int64_t cost_us)
{
	return rlsync_charge(last_tat_us, now_us, cost_us) - now_us;
}

void rlsync_discard(struct ratelimit *rl)
{
	for (size_t i = 0; i < RL_SLOTS; i++)
		if (atomic_load_explicit(&rl->slots[i].pending, memory_order_relaxed))
			atomic_store_explicit(&rl->slots[i].pending, 0, memory_order_relaxed);
}

void rlsync_set_instances(struct ratelimit *rl, int up, unsigned n)
{
	if (!n)
		n = 1;
	atomic_store_explicit(&rl->share, up ? 1 : n, memory_order_relaxed);
	atomic_store_explicit(&rl->cold_us, up ? rl->capacity_us / n * (n - 1) : 0,
			      memory_order_relaxed);
}
