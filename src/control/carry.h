/*
 * carry.h - what a reload carries from the running runtime to the one built for the new
 * config, and what it must not free when an older generation ends.
 *
 * A backend is the same backend in both when it is in a pool of the same name at the same
 * address, or the same slot of the same discovered name (with the address the name last
 * gave it, so a reload while DNS cannot answer keeps the last answer). For each the new
 * runtime starts where the old one is: up or down as the checks last said (and their
 * counts), passively marked out, ejected, its latency estimates, its engine's last report
 * (where it has its LoRA adapters too) and what its prefix index holds; and it takes the old
 * backend's share (runtime/pool.h): the requests still in flight in the old generation count
 * against its max_concurrency, and when one ends (or one of the new's) every live generation's
 * queue hears of it. Weights and caps come from the new config.
 *
 * A pool with session: keeps its conversations: the new pool of the same name takes each
 * entry of the old one's table whose backend it has (by the rule above), with the time it
 * had left; and what the old configuration's requests in flight learn after that (an answer's
 * response id) follows from the old table's feed (policy/stick.h), which the main thread
 * reads into the running configuration's table every turn of its retire check
 * (carry_follow()), until the old configuration is released.
 *
 * The response cache is not carried: its keys name routes by position, and a reload may
 * reorder them. A reload starts with an empty cache.
 */
#ifndef ACCELNET_CONTROL_CARRY_H
#define ACCELNET_CONTROL_CARRY_H

#include "runtime/pool.h"

#include <stddef.h>

/* Carry <from>'s state into <to> (both built, <to> not yet serving), and carry_join(to);
 * returns how many backends were carried. Main thread. */
size_t carry_runtime(struct runtime *to, struct runtime *from);

/* What <from>'s session tables learned since the last call (or the reload that began to
 * follow them) into <to>'s, the running configuration's. Main thread. */
void carry_follow(struct runtime *to, struct runtime *from);

/* <rt>'s pools hear when a slot of a backend they share frees (runtime/pool.h), until
 * carry_leave(rt): called once its workers have stopped, a turn of every other worker before
 * it is freed. Main thread. */
void carry_join(struct runtime *rt);
void carry_leave(struct runtime *rt);

/* <dying> ends while <live> (n of them) go on: let go of the shares they hold too, so that
 * runtime_destroy(dying) does not free them. Main thread. */
void carry_release(struct runtime *dying, struct runtime *const *live, size_t n);

#endif
