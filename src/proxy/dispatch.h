/*
 * dispatch.h - getting an exchange to a backend: admission (a slot now, or the pool's
 * queue), spillover to another pool, the upstream connection, and where a failed attempt
 * leads (retry.h: another backend, the hedged copy, or an answer to the client). What each
 * try holds is the exchange's current attempt (attempt.h, x->att).
 */
#ifndef ACCELNET_PROXY_DISPATCH_H
#define ACCELNET_PROXY_DISPATCH_H

#include "proxy/exchange.h"

/*
 * Find a backend for <x>: the first time through admission (which may queue it: RUN_STAY
 * until a grant arrives), on a retry directly among the others, never <exclude>. With no
 * backend it answers the client (503, or x->att->retry_status after a failed attempt).
 */
enum run dispatch_connect(struct exchange *x, const struct backend *exclude);

/* x->att->local_wait: its connect found no free descriptor; try again (the slot is still
 * held). */
enum run dispatch_attach_again(struct exchange *x);

/* The current attempt (on x->att->be) failed for <why>. */
enum run dispatch_failed(struct exchange *x, enum up_failure why);

/* Move <x> to its spillover pool and admit it there. */
enum run dispatch_spill(struct exchange *x);

/* Run the exchanges of <w> whose queued requests were granted a slot. */
void dispatch_take_grants(struct worker *w);

#endif
