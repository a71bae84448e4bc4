/*
 * admission.h - who gets a backend slot, and when: each backend serves at most
 * max_concurrency requests at once; a request that finds every up backend at its cap waits
 * in its pool's queue (queue.h) until a slot frees.
 *
 * When a slot frees, the thread that freed it picks a backend for the head of the queue at
 * once, under the queue lock, and hands the granted request to the thread that owns it
 * through that owner's inbox, waking the owner's loop: no polling, and a slot is never free
 * while someone waits for it. Lock order: a pool's queue lock, then an inbox lock; nothing
 * else is held with either. The slot accounting itself stays lock-free (pool_pick claims a
 * slot with one atomic add); the queue lock only orders "slot freed" against "request starts
 * waiting": admission_release() gives the slot back before taking the lock, and
 * admission_admit() tries once more under the lock before queueing, so a request never waits
 * beside a free slot.
 */
#ifndef ACCELNET_PROXY_ADMISSION_H
#define ACCELNET_PROXY_ADMISSION_H

#include "core/list.h"
#include "runtime/queue.h"
#include "runtime/pool.h"

#include <pthread.h>
#include <stdint.h>

struct loop;

/* Where grants for one thread's waiters arrive; its loop is woken for each. */
struct admission_inbox {
	pthread_mutex_t lock;
	struct list_head granted; /* of struct waiter, by ilink, in grant order */
	struct loop *loop;
};

enum admit_result {
	ADMIT_PICKED, /* *out has a claimed slot */
	ADMIT_QUEUED, /* waiting for a grant */
	ADMIT_FULL,   /* the queue is at queue.max */
	ADMIT_NONE,   /* no backend could take it now (none up) */
};

/* Pick a backend for a request of <pool>, or queue <wt> if every up backend is at its cap. */
enum admit_result admission_admit(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms,
				  uint64_t rnd, struct backend **out);

/*
 * A request on <be> of <pool> ended: give its slot back and, if requests wait, grant slots
 * to them in order (each goes to its owner's inbox, whose loop is woken).
 */
void admission_release(struct pool_rt *pool, struct backend *be, uint64_t now_ms, uint64_t rnd);
/* Grant free slots to waiting requests, in order (e.g. when a backend comes back up). */
void admission_grant(struct pool_rt *pool, uint64_t now_ms, uint64_t rnd);

/* How long the request here that has waited longest for each backend of <pool> has waited, in
 * ms, into ages[nbackends]: one counted waiting for that backend (balance: llm's home) or for
 * none in particular; 0 where none waits. The cluster's deal gives a backend's slot that
 * instances contend for to the instance holding its oldest waiter (control/cluster.c). */
void admission_oldest(struct pool_rt *pool, uint64_t now_ms, uint32_t *ages);

/* Why a waiter leaves: counted (queue.timeouts, .spilled, .withdrawn) if it was still queued. */
enum withdraw_why { WITHDRAW_GONE, WITHDRAW_TIMEOUT, WITHDRAW_SPILL };

/*
 * The owner no longer wants <wt> (<why>: client gone, timeout, spillover): take it out of the
 * queue or out of the inbox. A slot granted meanwhile is released (it was counted granted).
 * Safe in any state. Every enqueued request is counted once as it leaves the queue: granted,
 * pushed out (displaced), or by <why> here; so enqueued = granted + displaced + timeouts +
 * spilled + withdrawn + length.
 */
void admission_withdraw(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms, uint64_t rnd,
			enum withdraw_why why);

void admission_inbox_init(struct admission_inbox *in, struct loop *loop);
void admission_inbox_destroy(struct admission_inbox *in);
/* Take the first granted waiter out of the inbox, or NULL (the owner's thread only). A waiter
 * with no backend (granted NULL) was pushed out of a full queue to make room for a request
 * of a tenant with fewer waiting (policy/qdisc.h push_out): it is turned away. */
struct waiter *admission_inbox_take(struct admission_inbox *in);

#endif
