/*
 * carry.c - carrying backend state across a reload (see carry.h).
 */
#include "proxy/carry.h"
#include "proxy/llm.h"

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

static struct backend *backend_named(struct pool_rt *p, const char *name)
{
	for (size_t i = 0; i < p->nbackends; i++)
		if (!p->backends[i].conf->discover && strcmp(p->backends[i].name, name) == 0)
			return &p->backends[i];
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

static void carry_backend(struct pool_rt *to_pool, struct backend *to, struct backend *from)
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
	/* one count of requests in flight for both: <to>'s own is not in use yet */
	free(to->share);
	to->share = from->share;
	atomic_store_explicit(&to->share->notify, to_pool, memory_order_release);
}

size_t carry_runtime(struct runtime *to, struct runtime *from)
{
	size_t carried = 0;
	/* a share the new config no longer has a backend for: no queue to tell */
	for (size_t i = 0; i < from->npools; i++)
		for (size_t j = 0; j < from->pools[i].nbackends; j++)
			atomic_store_explicit(&from->pools[i].backends[j].share->notify, NULL,
					      memory_order_release);
	for (size_t i = 0; i < to->npools; i++) {
		struct pool_rt *tp = &to->pools[i];
		struct pool_rt *fp = pool_named(from, tp->conf->name);
		if (!fp)
			continue;
		for (size_t j = 0; j < tp->nbackends; j++) {
			struct backend *tb = &tp->backends[j];
			struct backend *fb =
			    tb->conf->discover ? NULL : backend_named(fp, tb->name);
			if (fb) {
				carry_backend(tp, tb, fb);
				carried++;
			}
		}
	}
	return carried;
}

void carry_notify(struct runtime *rt)
{
	for (size_t i = 0; i < rt->npools; i++)
		for (size_t j = 0; j < rt->pools[i].nbackends; j++)
			atomic_store_explicit(&rt->pools[i].backends[j].share->notify,
					      &rt->pools[i], memory_order_release);
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
