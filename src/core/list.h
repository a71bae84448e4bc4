/*
 * list.h - intrusive doubly linked lists.
 *
 * An object that sits on a list embeds a struct list_node and is recovered from it with
 * container_of() (core/container.h). A list is a struct list_head: a sentinel node, so insertion
 * and removal never test for the empty case. A node that is on no list has both links NULL
 * (list_node_init); list_del() leaves it so, which makes "is it linked?" one test
 * (list_linked). list_del() takes a node that is linked: test first where it may not be.
 *
 * Nothing here allocates or locks: a list belongs to whoever holds its head.
 */
#ifndef ACCELNET_CORE_LIST_H
#define ACCELNET_CORE_LIST_H

#include "core/container.h"

#include <stddef.h>

struct list_node {
	struct list_node *prev, *next;
};

struct list_head {
	struct list_node n; /* sentinel: n.next is the first node, n.prev the last */
	size_t count;
};

static inline void list_init(struct list_head *l)
{
	l->n.prev = l->n.next = &l->n;
	l->count = 0;
}

static inline void list_node_init(struct list_node *e)
{
	e->prev = e->next = NULL;
}

static inline int list_linked(const struct list_node *e)
{
	return e->next != NULL;
}

static inline int list_empty(const struct list_head *l)
{
	return l->n.next == &l->n;
}

static inline void list_insert_after_(struct list_head *l, struct list_node *at,
				      struct list_node *e)
{
	e->prev = at;
	e->next = at->next;
	at->next->prev = e;
	at->next = e;
	l->count++;
}

/* Add <e> (linked nowhere) at the front / at the back of <l>. */
static inline void list_push_front(struct list_head *l, struct list_node *e)
{
	list_insert_after_(l, &l->n, e);
}

static inline void list_push_back(struct list_head *l, struct list_node *e)
{
	list_insert_after_(l, l->n.prev, e);
}

/* Take <e> off <l>; <e> must be on <l>. */
static inline void list_del(struct list_head *l, struct list_node *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	list_node_init(e);
	l->count--;
}

/* The first / last node, or NULL when empty. */
static inline struct list_node *list_first(const struct list_head *l)
{
	return list_empty(l) ? NULL : l->n.next;
}

static inline struct list_node *list_last(const struct list_head *l)
{
	return list_empty(l) ? NULL : l->n.prev;
}

/* The node after / before <e> on <l>, or NULL at the end. */
static inline struct list_node *list_next(const struct list_head *l, const struct list_node *e)
{
	return e->next == &l->n ? NULL : e->next;
}

static inline struct list_node *list_prev(const struct list_head *l, const struct list_node *e)
{
	return e->prev == &l->n ? NULL : e->prev;
}

/* Take the first node off <l>, or NULL when empty. */
static inline struct list_node *list_pop_front(struct list_head *l)
{
	struct list_node *e = list_first(l);
	if (e)
		list_del(l, e);
	return e;
}

#endif
