/*
 * rlsync.h - the arithmetic of rate limits shared by several instances through one store
 * (cluster:, control/cluster.c does the talking): what a sync carries, what the store does with
 * it, and how its answer is merged back into the local bucket. Pure: no I/O, no clock.
 *
 * Every instance keeps its own GCRA buckets (ratelimit.h) and decides every request from
 * local memory alone. A synced limit's slot also counts the units taken and given back since
 * the last sync. Every sync_ms each instance sends, for each key that counted something or
 * whose bucket is not full, that count as time (its cost: units x the rate's interval; signed),
 * and the store charges it to one shared bucket per key, by the same rule a local bucket uses
 * (rlsync_charge: the shared TAT moves to max(TAT, now) + cost, never back before now). The
 * store answers how far that shared TAT lies ahead of its own clock: the key's debt, a
 * duration, so no two clocks need agree. The instance then sets its bucket to now + debt +
 * the cost of what it took since it sent the count: every instance's bucket holds what every
 * instance spent, as of the last sync, plus its own since.
 *
 * Between syncs an instance does not see the others' takes. So that N instances together do
 * not spend N times what the shared bucket holds, a sync leaves each instance 1/N of what it
 * holds (N the instances the store counts as live), and no bucket ever holds more than 1/N
 * of a burst: a key new to an instance's table, or quiet there since a sync found its shared
 * bucket full (such a key is no longer carried), spends at most that before its next sync.
 * What is left to overshoot is the refill: between two syncs each instance's bucket refills
 * at the whole rate. Whatever they pass is charged to the shared bucket and paid back by
 * refusing later, so over a window T the keys' requests passed stay within
 *
 *     rate x T + burst + (N - 1) x rate x sync
 *
 * the last term being the overshoot bound (what the other instances may pass in one sync that
 * is not yet paid back at the end of the window). The price: one instance that receives all
 * of a key's requests gets a full burst over a few syncs, 1/N of what is left at each, not at
 * once (with N = 3, two thirds of it after 3 syncs). A charge that reaches the store after the
 * bucket has refilled is charged from then (never earlier), so lag errs towards refusing,
 * and only for a bucket that was full.
 *
 * The store is believed to count, not trusted to: rlsync_debt_floor() is the least debt an
 * honest store can answer for a request rate, given its last answer and what was sent since.
 *
 * While the store is away no count is kept for it (rlsync_discard: the next sync starts
 * afresh, rather than charging an outage's worth at once), and each instance enforces 1/N of
 * each limit (rlsync_set_instances), N the instances the store last counted.
 */
#ifndef ACCELNET_GUARD_RLSYNC_H
#define ACCELNET_GUARD_RLSYNC_H

#include "guard/ratelimit.h"

#include <stddef.h>
#include <stdint.h>

/* A cost is clamped to +-this (about 11.6 days): debt upon debt saturates, never wraps. */
#define RLSYNC_COST_MAX ((int64_t)1000000000000)

/* One key of one limit in a sync. */
struct rlsync_item {
	struct rl_slot *slot;
	uint64_t key;
	int64_t units; /* taken (+) or given back (-) since the last sync */
};

/*
 * The keys of <rl> a sync carries at <now_us>: those that counted units since the last sync
 * (their count is taken: set to 0) and those whose bucket holds less than an idle key's
 * part (they learn the others' takes); a key whose last sync found its shared bucket full
 * and that has been quiet since is left out. At most <max> into <out>, scanning from *cursor
 * onwards and leaving it where the next sync goes on (a table with more keys than one sync carries
 * is gone through in turns). Returns how many.
 */
size_t rlsync_collect(struct ratelimit *rl, uint64_t now_us, size_t *cursor,
		      struct rlsync_item *out, size_t max);

/* The time <units> cost at <rl>'s rate, signed, clamped to +-RLSYNC_COST_MAX. */
int64_t rlsync_cost_us(const struct ratelimit *rl, int64_t units);

/* The store's rule: a shared bucket whose TAT is <tat> (0: none yet), charged <cost_us> at
 * <now_us>: its new TAT, max(max(tat, now) + cost, now). The store's script does the same. */
uint64_t rlsync_charge(uint64_t tat, uint64_t now_us, int64_t cost_us);

/*
 * The store answered <debt_us> (its TAT less its clock) for <it> at <now_us>, <n> instances
 * live: the bucket becomes now + debt, less all but 1/n of what the shared bucket still holds
 * (each instance may spend its share of that until the next sync), plus the cost of what the
 * slot counted since it was collected. A slot that holds another key by now is left alone.
 */
void rlsync_apply(struct ratelimit *rl, const struct rlsync_item *it, uint64_t debt_us, unsigned n,
		  uint64_t now_us);

/*
 * The least debt an honest store can answer for a key of a request rate whose shared TAT
 * was <last_tat_us> (on our clock: the previous answer's debt added to when it came; 0: none
 * known), charged <cost_us> by us at <now_us>: others' charges only add (a request rate is
 * never given back). So that a store that forgets (a writer deleting the keys, one answering
 * 0) cannot hand an instance more than it would take alone: rlsync_charge() of the last
 * TAT, less now.
 */
uint64_t rlsync_debt_floor(uint64_t last_tat_us, uint64_t now_us, int64_t cost_us);

/* The store is away: forget every count (nothing of this time is carried to it later). */
void rlsync_discard(struct ratelimit *rl);

/* The store is there (<up>) with <n> instances live (0 taken as 1), or away (the last <n> it
 * counted): a unit costs 1 (there) or n (away) units' time; a key new to the table starts
 * with 1/n of a burst (there; away, the share does that). */
void rlsync_set_instances(struct ratelimit *rl, int up, unsigned n);

#endif
