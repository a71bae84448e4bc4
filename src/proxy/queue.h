/*
 * queue.h - admission: each backend serves at most max_concurrency requests at once; a
 * request that finds every up backend at its cap waits in its pool's queue, in the order of
 * the pool's queue discipline (lb/qdisc.h: fair between tenants and by priority class, or
 * fifo), bounded by queue.max and queue.timeout_ms.
 *
 * The queue is shared by every worker (one mutex per pool). When a slot frees, the worker
 * that freed it picks a backend for the head of the queue right away, under the lock, and
 * hands the granted request to the worker that owns it through that worker's inbox and
 * loop wake-up: no polling, and the slot is never free while someone waits for it. A
 * waiter lives inside its session; the owner takes it back out (queue or inbox) before the
 * session can go away.
 */
#ifndef ACCELNET_PROXY_QUEUE_H
#define ACCELNET_PROXY_QUEUE_H

#include "policy/qdisc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct worker;
struct backend;
struct pool_rt;

enum waiter_state {
	W_IDLE,	   /* not waiting */
	W_QUEUED,  /* in its pool's queue */
	W_GRANTED, /* given a backend slot, in its owner's inbox */
};

struct waiter {
	struct qd_item item;  /* in the queue; the owner sets item.tenant and item.prio */
	struct waiter *inext; /* inbox link */
	struct worker *owner;
	struct backend *granted;
	enum waiter_state state;
	uint64_t queued_ms;
	uint64_t key; /* affinity hash for the balancer, when has_key */
	int has_key;
};

struct pool_queue {
	pthread_mutex_t lock;
	struct qdisc qd;
	atomic_uint_fast64_t enqueued, granted, timeouts, overflows;
};

struct worker_inbox {
	pthread_mutex_t lock;
	struct waiter *head, *tail;
};

enum queue_result { Q_PICKED, Q_QUEUED, Q_FULL, Q_NONE };

struct conf_pool;
/* 0, or -ENOMEM. */
int pool_queue_init(struct pool_queue *q, const struct conf_pool *pc);
void pool_queue_destroy(struct pool_queue *q);
unsigned pool_queue_len(struct pool_queue *q);

/*
 * Pick a backend for a request of <pool>, or queue <wt> if every up backend is at its cap.
 * Q_PICKED: *out has a claimed slot. Q_QUEUED: wait for a grant. Q_FULL: the queue is at
 * queue.max. Q_NONE: no backend could ever take it now (none up).
 */
enum queue_result pool_admit(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms, uint64_t rnd,
			     struct backend **out);

/*
 * A request on <be> of <pool> ended: give its slot back and, if requests wait, grant slots
 * to them in order (each goes to its owner's inbox, whose loop is woken).
 */
void pool_release(struct pool_rt *pool, struct backend *be, uint64_t now_ms, uint64_t rnd);
/* Grant free slots to waiting requests, in order (e.g. when a backend comes back up). */
void pool_grant(struct pool_rt *pool, uint64_t now_ms, uint64_t rnd);

/*
 * Called by the owner when it no longer wants <wt> (timeout, client gone): takes it out of
 * the queue or out of the inbox. A slot granted meanwhile is released. Safe in any state.
 */
void pool_withdraw(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms, uint64_t rnd);

void worker_inbox_init(struct worker_inbox *in);
void worker_inbox_destroy(struct worker_inbox *in);
/* Take every granted waiter out of the inbox, in grant order (the owner's thread only). */
struct waiter *worker_inbox_take(struct worker_inbox *in);

#endif
