/*
 * carry.c - carrying backend state across a reload (see carry.h).
 */
#include "control/carry.h"
#include "core/clock.h"
#include "policy/stick.h"
#include "runtime/llm.h"

#include <stdlib.h>
#include <string.h>

#define COPY(to, from, field)                                                                      \
	atomic_store_explicit(&(to)->field,                                                        \
			      atomic_load_explicit(&(from)->field, memory_order_relaxed),          \
			      memory_order_relaxed)

static struct pool_rt *pool_named(struct runtime *rt, const char *name)
{
	for (size_t i = 0; i < rt->npools; i++)
		if (strcmp(rt->pools[i].conf->name, name) == 0)
			return &rt->pools[i];
	return NULL;
}

/* <b>'s namesake in <p>: a fixed backend at the same address, or the same slot of the same
 * discovered name ("NAME#k") */
static struct backend *backend_namesake(struct pool_rt *p, const struct backend *b)
{
	for (size_t i = 0; i < p->nbackends; i++) {
		const struct backend *o = &p->backends[i];
		if (!o->conf->discover != !b->conf->discover || strcmp(o->name, b->name))
			continue;
		if (!b->conf->discover || (o->conf->discover == b->conf->discover &&
					   !strcmp(o->conf->discover_name, b->conf->discover_name)))
			return &p->backends[i];
	}
	return NULL;
}

/* What the prefix index of <from> holds, into <to>'s (when both keep one of one size). */
static void carry_prefix(struct backend *to, const struct backend *from)
{
	if (to->llm && from->llm)
		prefix_index_copy(to->llm->prefix, from->llm->prefix);
	else if (to->kv_prefix && from->kv_prefix && !to->llm && !from->llm)
		prefix_index_copy(to->kv_prefix, from->kv_prefix);
}

static void carry_backend(struct backend *to, struct backend *from)
{
	COPY(to, from, up);
	COPY(to, from, down_until_ms);
	COPY(to, from, connect_failed);
	COPY(to, from, back_ms);
	COPY(to, from, ewma_us);
	COPY(to, from, base_us);
	COPY(to, from, ewma_ms);
	COPY(to, from, fails_in_row);
	COPY(to, from, reported_load);
	COPY(to, from, reported_ms);
	COPY(to, from, ejections_in_row);
	COPY(to, from, ejected_ms);
	COPY(to, from, engine_waiting);
	COPY(to, from, engine_running);
	COPY(to, from, engine_kv_ppm);
	to->hc_ok = from->hc_ok;
	to->hc_fail = from->hc_fail;
	carry_prefix(to, from);
	COPY(to, from, lora.base); /* where its engine has its LoRA adapters (policy/lora.h) */
	COPY(to, from, lora.max);
	COPY(to, from, lora.active);
	COPY(to, from, lora.n);
	for (size_t i = 0; i < LORA_REMEMBER; i++)
		COPY(to, from, lora.hash[i]);
	/* one count of requests in flight for both: <to>'s own is not in use yet */
	free(to->share);
	to->share = from->share;
}

/* A discovery slot: also the address the name last gave it, so a reload while DNS cannot
 * answer keeps the last answer, as discovery itself does. */
static void carry_slot(struct backend *to, const struct backend *from)
{
	int at = atomic_load(&from->addr_at) & 1;
	to->addr = from->addr;
	memcpy(to->addr_text[at], from->addr_text[at], sizeof(to->addr_text[at]));
	atomic_store(&to->addr_at, at);
	COPY(to, from, weight);
	COPY(to, from, present);
}

/* map[i]: the index in <tp> of <fp>'s backend i, -1 when <tp> has none of it. */
static void session_map(const struct pool_rt *tp, const struct pool_rt *fp, int *map)
{
	for (size_t i = 0; i < fp->nbackends; i++) {
		struct backend *tb = backend_namesake((struct pool_rt *)tp, &fp->backends[i]);
		map[i] = tb && !backend_slot_free(tb) ? (int)(tb - tp->backends) : -1;
	}
}

/* The sessions of <fp>'s table into <tp>'s: what it holds now, and from now on what its
 * workers learn (carry_follow). */
static void carry_sessions(struct pool_rt *tp, struct pool_rt *fp, uint32_t now_s)
{
	int map[LB_MAX_BACKENDS];
	if (!tp->stick || !fp->stick || fp->nbackends > LB_MAX_BACKENDS)
		return;
	session_map(tp, fp, map);
	stick_follow(fp->stick);
	stick_copy(tp->stick, fp->stick, map, fp->nbackends, now_s);
}

void carry_follow(struct runtime *to, struct runtime *from)
{
	uint32_t now_s = (uint32_t)(clock_now_ms() / 1000);
	int map[LB_MAX_BACKENDS];
	for (size_t i = 0; i < from->npools; i++) {
		struct pool_rt *fp = &from->pools[i];
		struct pool_rt *tp = pool_named(to, fp->conf->name);
		uint64_t key;
		unsigned idx;
		if (!tp || !tp->stick || !fp->stick || !fp->stick->followed ||
		    fp->nbackends > LB_MAX_BACKENDS)
			continue;
		session_map(tp, fp, map);
		while (stick_feed_take(fp->stick, &fp->stick->follow, &key, &idx))
			if (idx < fp->nbackends && map[idx] >= 0)
				stick_put(tp->stick, key, (unsigned)map[idx], now_s, 1);
	}
}

size_t carry_runtime(struct runtime *to, struct runtime *from)
{
	size_t carried = 0;
	for (size_t i = 0; i < to->npools; i++) {
		struct pool_rt *tp = &to->pools[i];
		struct pool_rt *fp = pool_named(from, tp->conf->name);
		if (fp)
			carry_sessions(tp, fp, (uint32_t)(clock_now_ms() / 1000));
		if (fp && atomic_load(&fp->lora_seen))
			atomic_store(&tp->lora_seen, 1);
		for (size_t j = 0; fp && j < tp->nbackends; j++) {
			struct backend *tb = &tp->backends[j];
			struct backend *fb = backend_namesake(fp, tb);
			if (!fb || backend_slot_free(tb)) /* (an API spare slot left empty) */
				continue;
			carry_backend(tb, fb);
			if (tb->conf->discover)
				carry_slot(tb, fb);
			carried++;
		}
	}
	carry_join(to);
	return carried;
}

void carry_join(struct runtime *rt)
{
	size_t at = rt->generation % SHARE_POOLS;
	for (size_t i = 0; i < rt->npools; i++)
		for (size_t j = 0; j < rt->pools[i].nbackends; j++)
			atomic_store_explicit(&rt->pools[i].backends[j].share->pools[at],
					      &rt->pools[i], memory_order_release);
}

void carry_leave(struct runtime *rt)
{
	size_t at = rt->generation % SHARE_POOLS;
	for (size_t i = 0; i < rt->npools; i++)
		for (size_t j = 0; j < rt->pools[i].nbackends; j++) {
			struct pool_rt *mine = &rt->pools[i];
			atomic_compare_exchange_strong(&rt->pools[i].backends[j].share->pools[at],
						       &mine, NULL);
		}
}

static int share_held(struct runtime *const *live, size_t n, const struct backend_share *s)
{
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < live[k]->npools; i++)
			for (size_t j = 0; j < live[k]->pools[i].nbackends; j++)
				if (live[k]->pools[i].backends[j].share == s)
					return 1;
	return 0;
}

void carry_release(struct runtime *dying, struct runtime *const *live, size_t n)
{
	for (size_t i = 0; i < dying->npools; i++)
		for (size_t j = 0; j < dying->pools[i].nbackends; j++) {
			struct backend *b = &dying->pools[i].backends[j];
			if (b->share && share_held(live, n, b->share))
				b->share = NULL; /* theirs now */
		}
}
