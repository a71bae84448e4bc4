/*
 * ratelimit.c - GCRA over a lock-free table of keys (see ratelimit.h).
 */
#include "guard/ratelimit.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

int ratelimit_init(struct ratelimit *rl, unsigned per, unsigned per_s, unsigned burst)
{
	if (!per || !per_s)
		return -EINVAL;
	rl->per = per;
	rl->period_us = (uint64_t)per_s * 1000000u;
	rl->interval_us = rl->period_us / per;
	if (!rl->interval_us)
		rl->interval_us = 1;
	if (!burst)
		burst = per / per_s ? per / per_s : 1;
	rl->burst = burst;
	rl->capacity_us = (uint64_t)burst * rl->period_us / per;
	rl->synced = 0;
	atomic_init(&rl->share, 1);
	atomic_init(&rl->cold_us, 0);
	atomic_init(&rl->shared, 0);
	rl->slots = calloc(RL_SLOTS, sizeof(*rl->slots));
	if (getrandom(&rl->seed, sizeof(rl->seed), 0) != sizeof(rl->seed))
		rl->seed = (uint64_t)(uintptr_t)rl->slots ^ (uint64_t)time(NULL) << 20;
	return rl->slots ? 0 : -ENOMEM;
}

void ratelimit_fini(struct ratelimit *rl)
{
	free(rl->slots);
	rl->slots = NULL;
}

/* The latest a bucket's theoretical arrival time goes (debt upon debt saturates here, so
 * tat + cost never wraps round to a full bucket). */
#define TAT_MAX (UINT64_MAX / 2)

/* The time the rate needs to earn <n> units (times the share, while a cluster is away). */
static uint64_t cost_of(const struct ratelimit *rl, uint64_t n)
{
	unsigned share = atomic_load_explicit(&rl->share, memory_order_relaxed);
	if (share > 1)
		n = n > UINT64_MAX / share ? UINT64_MAX : n * share;
	if (n == 1)
		return rl->interval_us;
	if (n > UINT64_MAX / rl->period_us)
		return UINT64_MAX / 4; /* (no such request: a bound, never an overflow) */
	return n * rl->period_us / rl->per;
}

/* May another key take over slot <s> (its key <k>, its bucket's <tat>) at <now_us>? Never
 * used, or full again and (synced) with nothing left to carry to the next sync. */
static int slot_free(const struct ratelimit *rl, struct rl_slot *s, uint64_t k, uint64_t tat,
		     uint64_t now_us)
{
	if (k == 0)
		return 1;
	if (tat > now_us)
		return 0;
	return !rl->synced || atomic_load_explicit(&s->pending, memory_order_relaxed) == 0;
}

/* Where <key>'s probes begin: mixed with the table's seed, so that no one outside can choose
 * keys (addresses) whose probes fill another's and make it share their buckets. */
static size_t slot_hash(const struct ratelimit *rl, uint64_t key)
{
	key ^= rl->seed;
	return (size_t)(key ^ (key >> 29)) * 0x9e3779b97f4a7c15u >> 16;
}

/* The slot of <key>: its own, a free one it claims, or (all busy) the least loaded. */
static struct rl_slot *slot_for(struct ratelimit *rl, uint64_t key, uint64_t now_us)
{
	size_t h = slot_hash(rl, key);
	struct rl_slot *least = NULL;
	uint64_t least_tat = UINT64_MAX;
	for (unsigned i = 0; i < RL_PROBE; i++) {
		struct rl_slot *s = &rl->slots[(h + i) % RL_SLOTS];
		uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
		if (k == key)
			return s;
		uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed);
		/* a never used slot, or one whose bucket is full again: take it over */
		if (slot_free(rl, s, k, tat, now_us) &&
		    atomic_compare_exchange_strong(&s->key, &k, key)) {
			atomic_store_explicit(
			    &s->tat,
			    now_us + atomic_load_explicit(&rl->cold_us, memory_order_relaxed),
			    memory_order_relaxed);
			return s;
		}
		if (tat < least_tat)
			least_tat = tat, least = s;
	}
	atomic_fetch_add_explicit(&rl->shared, 1, memory_order_relaxed);
	return least;
}

static void state_of(const struct ratelimit *rl, uint64_t tat, uint64_t now_us, struct rl_state *st)
{
	uint64_t busy = tat > now_us ? tat - now_us : 0; /* the part of the bucket spent */
	st->limit = rl->burst;
	st->remaining =
	    busy >= rl->capacity_us ? 0 : (rl->capacity_us - busy) * rl->per / rl->period_us;
	if (st->remaining > rl->burst)
		st->remaining = rl->burst;
	st->reset_us = busy;
}

uint64_t ratelimit_take_n(struct ratelimit *rl, uint64_t key, uint64_t n, uint64_t now_us,
			  struct rl_state *st)
{
	if (!key)
		key = 1; /* 0 marks a slot never used */
	struct rl_slot *s = slot_for(rl, key, now_us);
	uint64_t cost = cost_of(rl, n);
	/* a take larger than the bucket needs it full; then it leaves it in debt */
	uint64_t need = cost < rl->capacity_us ? cost : rl->capacity_us;
	/* a shared limit's bucket holds at most its part until a sync says more (cold_us) */
	uint64_t floor = now_us + atomic_load_explicit(&rl->cold_us, memory_order_relaxed);
	uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed);
	for (;;) {
		uint64_t t = tat > floor ? tat : floor;
		uint64_t allow_at = t + need > rl->capacity_us ? t + need - rl->capacity_us : 0;
		if (now_us < allow_at) {
			if (st)
				state_of(rl, t, now_us, st);
			return allow_at - now_us;
		}
		uint64_t base = t;
		uint64_t next = base < TAT_MAX - cost ? base + cost : TAT_MAX;
		if (atomic_compare_exchange_weak_explicit(&s->tat, &tat, next, memory_order_relaxed,
							  memory_order_relaxed)) {
			if (rl->synced)
				atomic_fetch_add_explicit(&s->pending,
							  (int64_t)(n > INT64_MAX ? INT64_MAX : n),
							  memory_order_relaxed);
			if (st)
				state_of(rl, next, now_us, st);
			return 0;
		}
	}
}

uint64_t ratelimit_take(struct ratelimit *rl, uint64_t key, uint64_t now_us)
{
	return ratelimit_take_n(rl, key, 1, now_us, NULL);
}

void ratelimit_adjust(struct ratelimit *rl, uint64_t key, int64_t delta, uint64_t now_us)
{
	if (!key)
		key = 1;
	if (!delta)
		return;
	size_t h = slot_hash(rl, key);
	struct rl_slot *s = NULL;
	for (unsigned i = 0; i < RL_PROBE && !s; i++) {
		struct rl_slot *c = &rl->slots[(h + i) % RL_SLOTS];
		if (atomic_load_explicit(&c->key, memory_order_acquire) == key)
			s = c;
	}
	if (!s)
		return;
	if (rl->synced)
		atomic_fetch_add_explicit(&s->pending, delta, memory_order_relaxed);
	uint64_t cost = cost_of(rl, delta < 0 ? 0 - (uint64_t)delta : (uint64_t)delta);
	uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed), next;
	do {
		uint64_t base = tat > now_us ? tat : now_us;
		if (delta > 0)
			next = base < TAT_MAX - cost ? base + cost : TAT_MAX;
		else
			next = tat > now_us + cost ? tat - cost : now_us;
	} while (!atomic_compare_exchange_weak_explicit(&s->tat, &tat, next, memory_order_relaxed,
							memory_order_relaxed));
}
