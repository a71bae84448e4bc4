/*
 * ratelimit.h - rate limits per key (a client address, a tenant, a route), shared by every
 * worker without a lock; a request costs one unit, or n (tokens of an LLM request).
 *
 * Each limit is a rate and a burst, enforced with the generic cell rate algorithm: a key's
 * state is one number, its theoretical arrival time (TAT); a take of n units at <now>
 * conforms when TAT + cost(n) - capacity <= now, and then moves TAT to max(TAT, now) +
 * cost(n), where cost(n) is the time the rate needs to earn n units and capacity the time
 * it needs to earn a burst. That is a bucket of <burst> units refilled at <rate>, kept in
 * one 64-bit word changed with compare-and-swap: workers never wait for each other, and
 * only requests of the same key touch the same word. A take larger than the whole bucket
 * conforms only on a full bucket, and leaves it in debt (TAT beyond now + capacity): later
 * takes wait until the rate has paid it back. Units can be given back (a refund: TAT moves
 * back, never before now, so a bucket never holds more than its burst) or charged after
 * the fact (TAT moves on, whatever the bucket holds).
 *
 * The keys live in a fixed table per limit (open addressing, a short probe). A slot whose
 * TAT lies in the past has a full bucket and may be taken by another key, so the table
 * holds the keys that are active now; when every probed slot is busy with other active
 * keys, the request shares the least-loaded one (limited a little early, never late), and
 * that is counted. Where a key's probes lie is mixed with a random seed of the table's:
 * keys are unseeded hashes of addresses and identities, and a client with many addresses
 * could otherwise choose keys whose probes fill another's, keep their buckets spent, and
 * have it share theirs (refused at its first request). Memory is fixed: RL_SLOTS slots of
 * 24 bytes per limit, and the seed.
 *
 * A limit shared by several instances (cluster:, guard/rlsync.h) is marked <synced>: each
 * slot then also counts the units taken or given back since the last sync (<pending>), which
 * the sync carries to Redis, and a slot is handed to another key only once that count is 0
 * (synced). Its buckets never hold more than a bucket less <cold_us> (the others' part of
 * it: a take counts the bucket spent at least that far), so a key that is new to the table,
 * or was quiet since a sync found its shared bucket full, spends only its part until the
 * next sync says what the key holds; 0 for a limit not shared. While the
 * shared store is away each instance enforces a share of the limit: every unit costs
 * <share> times its time, so N instances together keep about the rate.
 */
#ifndef ACCELNET_GUARD_RATELIMIT_H
#define ACCELNET_GUARD_RATELIMIT_H

#include <stdatomic.h>
#include <stdint.h>

#define RL_SLOTS 65536 /* per limit */
#define RL_PROBE 8

struct rl_slot {
	_Atomic uint64_t key;	 /* 0: never used */
	_Atomic uint64_t tat;	 /* microseconds, on the monotonic clock */
	_Atomic int64_t pending; /* synced limits: units since the last sync (+ taken, - back) */
};

struct ratelimit {
	uint64_t per, period_us; /* <per> units per <period_us> */
	uint64_t interval_us;	 /* the cost of one unit: period / per (at least 1) */
	uint64_t capacity_us;	 /* the cost of a full bucket: burst units */
	unsigned burst;
	unsigned synced;	  /* shared through cluster: (set before any take) */
	_Atomic unsigned share;	  /* a unit costs this many units' time (1; N: cluster away) */
	_Atomic uint64_t cold_us; /* a bucket counts as spent at least this far */
	_Atomic uint64_t shared;  /* times a key had to share a slot */
	struct rl_slot *slots;	  /* RL_SLOTS */
	uint64_t seed;		  /* where a key's probes lie: random, this table's own */
};

/* What a bucket holds after a take: for X-RateLimit-* headers. */
struct rl_state {
	uint64_t limit;	    /* the burst: units at once */
	uint64_t remaining; /* units that could be taken now */
	uint64_t reset_us;  /* until the bucket is full again */
};

/* A limit of <per>/<per_s> seconds (e.g. 100 per 1 s, 600 per 60 s) with <burst> units
 * at once (0: one second's worth, at least 1). 0 or -ENOMEM (-EINVAL: no rate). */
int ratelimit_init(struct ratelimit *rl, unsigned per, unsigned per_s, unsigned burst);
void ratelimit_fini(struct ratelimit *rl);

/*
 * One request of <key> at <now_us>: 0 when it conforms (and is counted), else how long
 * until it would, in microseconds (> 0).
 */
uint64_t ratelimit_take(struct ratelimit *rl, uint64_t key, uint64_t now_us);

/* <n> units for <key> at <now_us>, as ratelimit_take(); <st>, when given, is filled with
 * what the bucket holds afterwards (taken or not). */
uint64_t ratelimit_take_n(struct ratelimit *rl, uint64_t key, uint64_t n, uint64_t now_us,
			  struct rl_state *st);

/*
 * After the fact: charge <key> <delta> more units (> 0; whatever its bucket holds), or give
 * -<delta> back (< 0; the bucket fills, up to its burst). A key no longer in the table (its
 * slot reused since: its bucket was full) is left alone.
 */
void ratelimit_adjust(struct ratelimit *rl, uint64_t key, int64_t delta, uint64_t now_us);

#endif
