/*
 * budget.c - the tenants' spend per route, in a fixed lock-free table (see budget.h).
 */
#include "guard/budget.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int budget_init(struct route_budget *b, const struct conf_budget *c)
{
	memset(b, 0, sizeof(*b));
	if (!c)
		return 0;
	b->nslots = c->tenants ? c->tenants : BUDGET_SLOTS;
	if (!(b->slots = calloc(b->nslots, sizeof(*b->slots))))
		return -ENOMEM;
	if (getrandom(&b->seed, sizeof(b->seed), 0) != sizeof(b->seed))
		b->seed = (uint64_t)(uintptr_t)b->slots ^ (uint64_t)time(NULL) << 20;
	b->conf = c;
	return 0;
}

void budget_fini(struct route_budget *b)
{
	free(b->slots);
	b->slots = NULL;
	b->conf = NULL;
}

/* Can a slot holding <key> (0: none) be taken for another tenant in window <win>? Only one
 * that holds no spend of this window and no count the sync has not sent: a hold keeps at least
 * 1 micro-unit in the word while it lasts (a reservation never costs 0), so no hold is on it. */
static int slot_free(struct budget_slot *s, uint64_t key, uint64_t win)
{
	if (!key)
		return 1;
	return !spend_word_spent(atomic_load_explicit(&s->word, memory_order_acquire), win) &&
	       !atomic_load_explicit(&s->pending, memory_order_relaxed);
}

/* <tenant>'s slot for window <win>: its own, or a free one claimed (slot_free()); NULL when
 * every probe belongs to another tenant that spent in <win> (counted in <full>). */
static struct budget_slot *slot_of(struct route_budget *b, uint64_t tenant, uint64_t win)
{
	uint64_t k = tenant ^ b->seed;
	size_t h = (size_t)((k ^ (k >> 31)) * 0xbf58476d1ce4e5b9u >> 20);
	for (;;) {
		struct budget_slot *idle = NULL;
		uint64_t idle_key = 0;
		for (unsigned i = 0; i < BUDGET_PROBE; i++) {
			struct budget_slot *s = &b->slots[(h + i) % b->nslots];
			uint64_t key = atomic_load_explicit(&s->key, memory_order_acquire);
			if (key == tenant)
				return s;
			if (!idle && slot_free(s, key, win))
				idle = s, idle_key = key;
		}
		if (!idle) {
			atomic_fetch_add_explicit(&b->full, 1, memory_order_relaxed);
			return NULL;
		}
		if (atomic_compare_exchange_strong_explicit(
			&idle->key, &idle_key, tenant, memory_order_acq_rel, memory_order_acquire))
			return idle;
		/* another tenant claimed it first: look again */
	}
}

/* Swap <reserved> in <s>'s word for <actual>, in window <win> (nothing once it turned). */
static void word_settle(struct budget_slot *s, uint64_t win, uint64_t reserved, uint64_t actual,
			unsigned synced)
{
	uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire), next;
	do {
		next = spend_word_settle(w, win, reserved, actual);
	} while (!atomic_compare_exchange_weak_explicit(&s->word, &w, next, memory_order_acq_rel,
							memory_order_acquire));
	if (synced && next != w) { /* the window had not turned: tell the others */
		int64_t d = actual > reserved ? (int64_t)(actual - reserved)
					      : -(int64_t)(reserved - actual);
		atomic_fetch_add_explicit(&s->pending, d, memory_order_relaxed);
	}
}

int budget_reserve(struct route_budget *b, uint64_t tenant, uint64_t cost, uint64_t now_s,
		   struct budget_hold *h, uint64_t *spent)
{
	const struct conf_budget *c = b->conf;
	uint64_t win = spend_window_of(now_s, c->window_s);
	if (!tenant)
		tenant = 1; /* key 0 marks unused */
	for (;;) {
		struct budget_slot *s = slot_of(b, tenant, win);
		if (!s)
			return -ENOSPC;
		uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire), next;
		do {
			if (!spend_word_reserve(w, win, cost, c->per_tenant, &next)) {
				if (atomic_load_explicit(&s->key, memory_order_acquire) != tenant)
					goto again; /* taken over meanwhile: its spend is not ours
						     */
				*spent = spend_word_spent(w, win);
				return -EAGAIN;
			}
		} while (!atomic_compare_exchange_weak_explicit(
		    &s->word, &w, next, memory_order_acq_rel, memory_order_acquire));
		/* a slot found free may have gone to another tenant between finding ours and
		 * reserving in it: then what we reserved is given back and we look again (while
		 * we hold it, it is not free: nobody takes it over after this check) */
		if (atomic_load_explicit(&s->key, memory_order_acquire) == tenant) {
			if (b->synced)
				atomic_fetch_add_explicit(&s->pending, (int64_t)cost,
							  memory_order_relaxed);
			h->slot = s;
			h->window = win;
			h->reserved = cost;
			h->synced = b->synced;
			return 0;
		}
		word_settle(s, win, cost, 0, 0);
	again:;
	}
}

uint64_t budget_extend(const struct route_budget *b, struct budget_hold *h, uint64_t more,
		       uint64_t now_s)
{
	struct budget_slot *s = h->slot;
	const struct conf_budget *c = b->conf;
	if (!s || spend_window_of(now_s, c->window_s) != h->window)
		return 0;
	uint64_t budget = c->per_tenant < SPEND_SPENT_MAX ? c->per_tenant : SPEND_SPENT_MAX;
	uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire), next, got;
	do {
		uint64_t spent = spend_word_spent(w, h->window);
		if (spend_word_at(h->window, spent) != w || spent >= budget)
			return 0; /* the window turned (the word is of another), or nothing is left
				   */
		got = more < budget - spent ? more : budget - spent;
		next = spend_word_at(h->window, spent + got);
	} while (!atomic_compare_exchange_weak_explicit(&s->word, &w, next, memory_order_acq_rel,
							memory_order_acquire));
	if (h->synced)
		atomic_fetch_add_explicit(&s->pending, (int64_t)got, memory_order_relaxed);
	h->reserved += got;
	return got;
}

void budget_settle(struct budget_hold *h, uint64_t actual)
{
	struct budget_slot *s = h->slot;
	if (!s)
		return;
	h->slot = NULL;
	word_settle(s, h->window, h->reserved, actual, h->synced);
}

size_t budget_collect(struct route_budget *b, uint64_t now_s, size_t *cursor,
		      struct budget_sync_item *out, size_t max)
{
	if (!b->conf || !b->synced)
		return 0;
	uint64_t win = spend_window_of(now_s, b->conf->window_s);
	size_t n = 0, i = *cursor % b->nslots;
	for (size_t seen = 0; seen < b->nslots && n < max; seen++, i = (i + 1) % b->nslots) {
		struct budget_slot *s = &b->slots[i];
		uint64_t key = atomic_load_explicit(&s->key, memory_order_acquire);
		if (!key)
			continue;
		uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
		int64_t p = atomic_load_explicit(&s->pending, memory_order_relaxed);
		if (!p && !spend_word_spent(w, win))
			continue; /* nothing spent here in this window: nothing to hear of */
		p = atomic_exchange_explicit(&s->pending, 0, memory_order_relaxed);
		out[n++] =
		    (struct budget_sync_item){.slot = s, .key = key, .window = win, .micros = p};
	}
	*cursor = i;
	return n;
}

void budget_apply(const struct route_budget *b, const struct budget_sync_item *it, uint64_t total,
		  uint64_t now_s)
{
	struct budget_slot *s = it->slot;
	if (atomic_load_explicit(&s->key, memory_order_acquire) != it->key ||
	    spend_window_of(now_s, b->conf->window_s) != it->window)
		return; /* another tenant's now, or the window has turned: the next sync tells */
	uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire), next;
	do {
		int64_t since = atomic_load_explicit(&s->pending, memory_order_relaxed);
		uint64_t spent = since >= 0		    ? total + (uint64_t)since
				 : (uint64_t)-since > total ? 0
							    : total - (uint64_t)-since;
		next = spend_word_at(it->window, spent);
	} while (!atomic_compare_exchange_weak_explicit(&s->word, &w, next, memory_order_acq_rel,
							memory_order_acquire));
}
