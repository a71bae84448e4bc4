/*
 * evict.c - the eviction policies: lru and sieve (see evict.h), and their registry.
 */
#include "policy/evict.h"

#include <string.h>

static struct evict_item *item_of(struct list_node *n)
{
	return n ? container_of(n, struct evict_item, link) : NULL;
}

static void evict_init(struct evict *e)
{
	list_init(&e->list);
	e->hand = NULL;
	e->bytes = e->objects = 0;
}

static void count_in(struct evict *e, const struct evict_item *it)
{
	e->bytes += it->size;
	e->objects++;
}

static void count_out(struct evict *e, const struct evict_item *it)
{
	e->bytes -= it->size;
	e->objects--;
}

/* --- lru ---------------------------------------------------------------------------- */

static void lru_touch(struct evict *e, struct evict_item *it)
{
	list_del(&e->list, &it->link);
	list_push_front(&e->list, &it->link);
}

static void lru_insert(struct evict *e, struct evict_item *it)
{
	list_push_front(&e->list, &it->link);
	count_in(e, it);
}

static void lru_remove(struct evict *e, struct evict_item *it)
{
	list_del(&e->list, &it->link);
	count_out(e, it);
}

static struct evict_item *lru_victim(struct evict *e)
{
	struct evict_item *it = item_of(list_last(&e->list));
	if (it)
		lru_remove(e, it);
	return it;
}

const struct evict_ops evict_lru = {
    .name = "lru",
    .init = evict_init,
    .touch = lru_touch,
    .insert = lru_insert,
    .victim = lru_victim,
    .remove = lru_remove,
};

/* --- sieve -------------------------------------------------------------------------- */

static void sieve_touch(struct evict *e, struct evict_item *it)
{
	(void)e;
	atomic_store_explicit(&it->visited, 1, memory_order_relaxed);
}

static void sieve_insert(struct evict *e, struct evict_item *it)
{
	atomic_store_explicit(&it->visited, 0, memory_order_relaxed);
	list_push_front(&e->list, &it->link);
	count_in(e, it);
}

static void sieve_remove(struct evict *e, struct evict_item *it)
{
	if (e->hand == &it->link) /* the hand moves on toward the head */
		e->hand = list_prev(&e->list, &it->link);
	list_del(&e->list, &it->link);
	count_out(e, it);
}

/* From the hand toward the head (newer), wrapping to the tail: clear visited bits until an
 * unvisited object; at most two rounds (the first clears every bit). */
static struct evict_item *sieve_victim(struct evict *e)
{
	struct list_node *n = e->hand ? e->hand : list_last(&e->list);
	while (n) {
		struct evict_item *it = item_of(n);
		if (!atomic_exchange_explicit(&it->visited, 0, memory_order_relaxed)) {
			e->hand = list_prev(&e->list, n);
			list_del(&e->list, n);
			count_out(e, it);
			return it;
		}
		n = list_prev(&e->list, n);
		if (!n)
			n = list_last(&e->list);
	}
	return NULL;
}

const struct evict_ops evict_sieve = {
    .name = "sieve",
    .init = evict_init,
    .touch = sieve_touch,
    .insert = sieve_insert,
    .victim = sieve_victim,
    .remove = sieve_remove,
};

/* --- registry ----------------------------------------------------------------------- */

static const struct evict_ops *const policies[] = {&evict_sieve, &evict_lru};

const struct evict_ops *evict_find(const char *name)
{
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		if (strcmp(policies[i]->name, name) == 0)
			return policies[i];
	return NULL;
}

const char *evict_names(void)
{
	return "sieve, lru";
}
