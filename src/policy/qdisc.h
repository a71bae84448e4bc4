/*
 * qdisc.h - queue disciplines: in which order requests waiting for a backend slot get one.
 *
 * A discipline orders items (embedded in the proxy's waiters) and nothing else: no locks,
 * no clocks, no sockets; the pool's queue calls it under its lock, and the unit tests drive
 * it with plain arrays. Two are built:
 *
 *   fifo   first come, first served.
 *   fair   priority classes, highest first; within a class, tenants take turns (deficit
 *          round robin with one request as the unit), each tenant's own requests in order.
 *          A tenant that floods the queue only lengthens its own line: every other tenant
 *          still gets one grant per round.
 *
 * With one tenant and one class, fair is fifo. Adding a discipline: one qdisc_NAME.c and
 * one line in qdisc_find().
 */
#ifndef ACCELNET_POLICY_QDISC_H
#define ACCELNET_POLICY_QDISC_H

#include "core/list.h"

#include <stddef.h>
#include <stdint.h>

enum { QD_LOW, QD_NORMAL, QD_HIGH, QD_PRIOS };

struct qd_tenant;

/* One waiting request, as a discipline sees it. The caller sets tenant and prio. */
struct qd_item {
	struct list_node link; /* in its line */
	struct qd_tenant *tq;  /* fair: its tenant's line */
	uint64_t tenant;       /* who it is for (a hash of the key or header) */
	unsigned prio;	       /* QD_LOW .. QD_HIGH */
};

/* A tenant's line in a class (fair). */
struct qd_tenant {
	struct list_head items;	       /* its requests, in arrival order */
	struct qd_tenant *prev, *next; /* the class's ring of tenants that wait (a ring with a
					* moving turn, not a list: no sentinel) */
	struct qd_tenant *hnext;       /* hash chain, or free list */
	uint64_t tenant;
	unsigned prio;
};

struct qdisc {
	const struct qdisc_ops *ops;
	unsigned len;
	struct list_head fifo;		  /* fifo: the line */
	struct qd_tenant *turn[QD_PRIOS]; /* fair: whose turn it is, per class */
	struct qd_tenant **buckets;	  /* fair: tenant lines by tenant hash */
	size_t nbuckets;
	struct qd_tenant *spare; /* fair: tenant lines to reuse */
	unsigned nspare;
};

struct qdisc_ops {
	const char *name;
	/* Prepare an empty queue. 0 or -ENOMEM. */
	int (*init)(struct qdisc *q);
	void (*fini)(struct qdisc *q);
	/* Add <it>. 0, or -ENOMEM (fair: a new tenant's line could not be made). */
	int (*push)(struct qdisc *q, struct qd_item *it);
	/* The item the next grant goes to, left in place; NULL when empty. */
	struct qd_item *(*peek)(struct qdisc *q);
	/* Take out the item peek() gives, as a grant: the turn moves on. */
	struct qd_item *(*pop)(struct qdisc *q);
	/* The item after <it> in about the order grants would take them, or NULL: for looking
	 * past the head (a slot that suits a later request better). NULL op: not offered. */
	struct qd_item *(*next)(struct qdisc *q, struct qd_item *it);
	/* Take out <it> wherever it is (it gave up, or took a slot out of turn); the turn
	 * stays. */
	void (*remove)(struct qdisc *q, struct qd_item *it);
	/* The queue is full and <arriving> wants in: take out and return an item whose place
	 * it should get instead, or NULL (it is turned away). NULL op: never. */
	struct qd_item *(*push_out)(struct qdisc *q, const struct qd_item *arriving);
	/* 1: peek() and next() give the items in the order they were pushed, oldest first (a
	 * walk for the oldest may stop early). */
	int by_age;
};

/* The discipline called <name>, or NULL. */
const struct qdisc_ops *qdisc_find(const char *name);
/* "fair, fifo" for messages. */
const char *qdisc_names(void);
/* The class named s[0..len) ("low", "normal", "high", any case), or -1. */
int qdisc_priority(const char *s, size_t len);

extern const struct qdisc_ops qdisc_fifo;
extern const struct qdisc_ops qdisc_fair;

#endif
