/*
 * queue.h - the waiting room of a pool: requests that found every up backend at its
 * max_concurrency wait here, in the order of the pool's queue discipline (policy/qdisc.h:
 * fair between tenants and by priority class, or fifo), bounded by queue.max and
 * queue.timeout_ms. One mutex per pool, shared by every worker.
 *
 * These are the types and the queue's own upkeep; who enters, who is granted a slot and how
 * the grant reaches its owner is admission (admission.h). A waiter lives inside its
 * exchange; the owner takes it back out (queue or inbox) before the exchange can end.
 */
#ifndef ACCELNET_RUNTIME_QUEUE_H
#define ACCELNET_RUNTIME_QUEUE_H

#include "core/list.h"
#include "policy/qdisc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct backend;
struct admission_inbox;
struct conf_pool;
struct lb_explain;

enum waiter_state {
	W_IDLE,	   /* not waiting */
	W_QUEUED,  /* in its pool's queue */
	W_GRANTED, /* given a backend slot, in its owner's inbox */
};

struct waiter {
	struct qd_item item;	       /* in the queue; the owner sets item.tenant and item.prio */
	struct list_node ilink;	       /* in the owner's inbox once granted */
	struct admission_inbox *owner; /* where a grant is delivered */
	struct backend *granted;
	/* the owner reads it unlocked; a granting worker writes it under the queue's lock */
	_Atomic enum waiter_state state;
	uint64_t queued_ms;
	/* balance: llm: when a pick for it first passed up a free slot to wait for its home
	 * (0: none has): what max_wait_ms counts from. A granting worker writes it under the
	 * queue's lock, the owner reads it for its timer. */
	_Atomic uint64_t declined_ms;
	uint64_t key; /* affinity hash for the balancer, when has_key */
	int has_key;
	const uint64_t *blocks; /* balance: llm: the prompt's block hashes, owned by the owner */
	uint32_t nblocks;
	uint32_t missed; /* ... set with a grant: the blocks the granted backend must compute */
	uint32_t work;	 /* ... and its expected time there (0: none counted) */
	uint32_t ticks;	 /* ... and the index clock's ticks its prompt took there */
	uint64_t model;	 /* models_hash() of the request's "model": only its backends serve it */
	int has_model;
	uint64_t session; /* pools[].session: the conversation's stick_key(), when has_session */
	uint8_t has_session, session_learn; /* ... and whether a pick is remembered for it */
	/* balance: llm: where each pick for it is read back, or NULL (runtime/pick.h) */
	struct lb_explain *explain;
	/* balance: llm: the backend it is counted waiting for (llm_wait_for()); under the lock */
	struct backend *home;
};

struct pool_queue {
	pthread_mutex_t lock;
	struct qdisc qd;
	atomic_uint len; /* qd.len as of its last change (admission.c), read without the lock */
	/* cluster: an eventfd the sync thread watches (control/cluster.c), made by
	 * pool_queue_watch() and closed with the queue; -1: none */
	atomic_int wake_fd;
};

/* 0, or -ENOMEM. */
int pool_queue_init(struct pool_queue *q, const struct conf_pool *pc);
void pool_queue_destroy(struct pool_queue *q);
/* Requests queued now (the mirror of qd.len its owner keeps): no lock taken. */
unsigned pool_queue_len(const struct pool_queue *q);
/* The eventfd that pool_queue_wake() writes, made on the first call (the sync thread's, once
 * at its start): the fd, or -errno. It lives as long as the queue, so a worker of a generation
 * whose sync thread stopped still writes to it safely. */
int pool_queue_watch(struct pool_queue *q);
/* Tell whoever watches the queue (nobody: nothing done) that a deal of slots may have changed:
 * a slot stands free here that other instances wait for, or a request began to wait here. */
void pool_queue_wake(struct pool_queue *q);

#endif
