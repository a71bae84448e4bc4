/*
 * qdisc_fair.c - priority classes, and tenants taking turns within a class.
 *
 * Each class keeps a ring of tenant lines, one per tenant that has requests waiting, and a
 * turn pointer into it. A grant goes to the head of the line whose turn it is in the
 * highest class that has anyone waiting; then the turn passes to the next tenant. A line
 * that empties leaves the ring and is kept for reuse, so a steady queue allocates nothing.
 * Lines are found by tenant hash through a bucket array sized once.
 */
#include "policy/qdisc.h"
#include "core/check.h"

#include <errno.h>
#include <stdlib.h>

#define FAIR_BUCKETS 1024
#define FAIR_SPARE_MAX 256

static int fair_init(struct qdisc *q)
{
	q->len = 0;
	for (int c = 0; c < QD_PRIOS; c++)
		q->turn[c] = NULL;
	q->nbuckets = FAIR_BUCKETS;
	q->buckets = calloc(q->nbuckets, sizeof(*q->buckets));
	q->spare = NULL;
	q->nspare = 0;
	return q->buckets ? 0 : -ENOMEM;
}

static void fair_fini(struct qdisc *q)
{
	for (size_t i = 0; i < q->nbuckets; i++)
		while (q->buckets[i]) { /* lines of requests nobody withdrew (shutdown) */
			struct qd_tenant *t = q->buckets[i];
			q->buckets[i] = t->hnext;
			free(t);
		}
	while (q->spare) {
		struct qd_tenant *t = q->spare;
		q->spare = t->hnext;
		free(t);
	}
	free(q->buckets);
	q->buckets = NULL;
}

static struct qd_tenant **bucket(struct qdisc *q, uint64_t tenant, unsigned prio)
{
	uint64_t h = (tenant ^ (prio * 0x9e3779b97f4a7c15u)) * 0xff51afd7ed558ccdu;
	return &q->buckets[(h >> 32) % q->nbuckets];
}

static int fair_push(struct qdisc *q, struct qd_item *it)
{
	ASSERT(it->prio < QD_PRIOS);
	struct qd_tenant **b = bucket(q, it->tenant, it->prio), *t = *b;
	while (t && (t->tenant != it->tenant || t->prio != it->prio))
		t = t->hnext;
	if (!t) {
		if (q->spare) {
			t = q->spare;
			q->spare = t->hnext;
			q->nspare--;
		} else if (!(t = malloc(sizeof(*t)))) {
			return -ENOMEM;
		}
		*t = (struct qd_tenant){.tenant = it->tenant, .prio = it->prio, .hnext = *b};
		list_init(&t->items);
		*b = t;
		/* join the ring just before the one whose turn it is: last in this round */
		struct qd_tenant *turn = q->turn[it->prio];
		if (!turn) {
			t->prev = t->next = t;
			q->turn[it->prio] = t;
		} else {
			t->next = turn;
			t->prev = turn->prev;
			turn->prev->next = t;
			turn->prev = t;
		}
	}
	it->tq = t;
	list_push_back(&t->items, &it->link);
	q->len++;
	return 0;
}

static struct qd_item *fair_peek(struct qdisc *q)
{
	for (int c = QD_PRIOS - 1; c >= 0; c--)
		if (q->turn[c])
			return container_of(list_first(&q->turn[c]->items), struct qd_item, link);
	return NULL;
}

/* <t> has emptied: out of the ring and the buckets, onto the spare list. */
static void line_retire(struct qdisc *q, struct qd_tenant *t)
{
	if (t->next == t)
		q->turn[t->prio] = NULL;
	else {
		t->prev->next = t->next;
		t->next->prev = t->prev;
		if (q->turn[t->prio] == t)
			q->turn[t->prio] = t->next;
	}
	struct qd_tenant **pp = bucket(q, t->tenant, t->prio);
	while (*pp != t)
		pp = &(*pp)->hnext;
	*pp = t->hnext;
	if (q->nspare < FAIR_SPARE_MAX) {
		t->hnext = q->spare;
		q->spare = t;
		q->nspare++;
	} else {
		free(t);
	}
}

/* The item at <depth> in <t>'s line (0: its head), or NULL. */
static struct qd_item *line_at(struct qd_tenant *t, size_t depth)
{
	if (depth >= t->items.count)
		return NULL;
	struct list_node *n = list_first(&t->items);
	while (depth--)
		n = list_next(&t->items, n);
	return container_of(n, struct qd_item, link);
}

/* The first item of <t>'s line. */
static struct qd_item *line_head(struct qd_tenant *t)
{
	return container_of(list_first(&t->items), struct qd_item, link);
}

static size_t depth_of(struct qd_item *it)
{
	size_t d = 0;
	for (struct list_node *n = list_prev(&it->tq->items, &it->link); n;
	     n = list_prev(&it->tq->items, n))
		d++;
	return d;
}

/*
 * After <it>, in the order grants take them: round the class's ring from the turn, each
 * tenant's item at one depth (heads first, then the second items, ...), then the lower
 * classes the same way. Walks lines to find depths: for looking a few places past the head,
 * not for draining the queue.
 */
static struct qd_item *fair_next(struct qdisc *q, struct qd_item *it)
{
	unsigned prio = it->tq->prio;
	size_t depth = depth_of(it);
	struct qd_tenant *turn = q->turn[prio], *t;
	for (t = it->tq->next; t != turn; t = t->next) /* the rest of this round */
		if ((it = line_at(t, depth)))
			return it;
	t = turn; /* the next round, one deeper */
	do {
		if ((it = line_at(t, depth + 1)))
			return it;
		t = t->next;
	} while (t != turn);
	while (prio-- > 0) /* this class is done: the lower classes, heads first */
		if (q->turn[prio])
			return line_head(q->turn[prio]);
	return NULL;
}

static void fair_remove(struct qdisc *q, struct qd_item *it)
{
	struct qd_tenant *t = it->tq;
	list_del(&t->items, &it->link);
	it->tq = NULL;
	q->len--;
	if (list_empty(&t->items))
		line_retire(q, t);
}

static struct qd_item *fair_pop(struct qdisc *q)
{
	struct qd_item *it = fair_peek(q);
	if (!it)
		return NULL;
	struct qd_tenant *t = it->tq;
	if (t->items.count > 1)
		q->turn[t->prio] = t->next; /* served: the next tenant's turn */
	fair_remove(q, it);		    /* (an emptied line passes the turn itself) */
	return it;
}

/*
 * A full queue: the newest request of the longest line gives its place to <arriving> when
 * that line is longer than <arriving>'s own would then be, so one tenant filling queue.max
 * cannot turn every other tenant away; lines of equal length keep their places.
 */
static struct qd_item *fair_push_out(struct qdisc *q, const struct qd_item *arriving)
{
	struct qd_tenant *longest = NULL, **b = bucket(q, arriving->tenant, arriving->prio), *own;
	for (own = *b; own && (own->tenant != arriving->tenant || own->prio != arriving->prio);
	     own = own->hnext)
		;
	size_t own_len = own ? own->items.count : 0;
	for (int c = 0; c < QD_PRIOS; c++) {
		struct qd_tenant *t = q->turn[c];
		for (int first = 1; t && (first || t != q->turn[c]); first = 0, t = t->next)
			if (!longest || t->items.count > longest->items.count)
				longest = t;
	}
	if (!longest || longest->items.count <= own_len + 1)
		return NULL;
	struct qd_item *it = container_of(list_last(&longest->items), struct qd_item, link);
	fair_remove(q, it);
	return it;
}

const struct qdisc_ops qdisc_fair = {
    .name = "fair",
    .init = fair_init,
    .fini = fair_fini,
    .push = fair_push,
    .peek = fair_peek,
    .pop = fair_pop,
    .next = fair_next,
    .remove = fair_remove,
    .push_out = fair_push_out,
};
