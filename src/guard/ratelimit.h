/*
 * ratelimit.h - request rate limits per key (a client address, a tenant, a route), shared
 * by every worker without a lock.
 *
 * Each limit is a rate and a burst, enforced with the generic cell rate algorithm: a key's
 * state is one number, its theoretical arrival time (TAT); a request at <now> conforms when
 * TAT - (burst - 1) * interval <= now, and then moves TAT to max(TAT, now) + interval. That
 * is a token bucket of <burst> tokens refilled at <rate>, kept in one 64-bit word changed
 * with compare-and-swap: workers never wait for each other, and only requests of the same
 * key touch the same word.
 *
 * The keys live in a fixed table per limit (open addressing, a short probe). A slot whose
 * TAT lies in the past has a full bucket and may be taken by another key, so the table
 * holds the keys that are active now; when every probed slot is busy with other active
 * keys, the request shares the least-loaded one (limited a little early, never late), and
 * that is counted. Memory is fixed: RL_SLOTS slots of 16 bytes per limit.
 */
#ifndef ACCELNET_GUARD_RATELIMIT_H
#define ACCELNET_GUARD_RATELIMIT_H

#include <stdatomic.h>
#include <stdint.h>

#define RL_SLOTS 65536 /* per limit */
#define RL_PROBE 8

struct rl_slot {
	_Atomic uint64_t key; /* 0: never used */
	_Atomic uint64_t tat; /* microseconds, on the monotonic clock */
};

struct ratelimit {
	uint64_t interval_us;	 /* 1 s / rate */
	uint64_t tolerance_us;	 /* (burst - 1) * interval */
	unsigned rate_per_s;	 /* for messages: requests per second (rounded) */
	_Atomic uint64_t shared; /* times a key had to share a slot */
	struct rl_slot *slots;	 /* RL_SLOTS */
};

/* A limit of <per>/<per_s> seconds (e.g. 100 per 1 s, 600 per 60 s) with <burst> requests
 * at once (0: one second's worth, at least 1). 0 or -ENOMEM. */
int ratelimit_init(struct ratelimit *rl, unsigned per, unsigned per_s, unsigned burst);
void ratelimit_fini(struct ratelimit *rl);

/*
 * One request of <key> at <now_us>: 0 when it conforms (and is counted), else how long
 * until it would, in microseconds (> 0).
 */
uint64_t ratelimit_take(struct ratelimit *rl, uint64_t key, uint64_t now_us);

#endif
