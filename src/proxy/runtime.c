/*
 * runtime.c - building the shared runtime from a config, and choosing backends.
 */
#include "proxy/runtime.h"
#include "core/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int runtime_create(const struct conf *conf, struct runtime **out)
{
	struct runtime *rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->conf = conf;
	rt->npools = conf->npools;
	rt->pools = calloc(conf->npools, sizeof(*rt->pools));
	if (!rt->pools)
		goto fail;
	for (size_t i = 0; i < conf->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		const struct conf_pool *pc = &conf->pools[i];
		p->conf = pc;
		p->nbackends = pc->nbackends;
		pool_queue_init(&p->queue);
		p->backends = calloc(pc->nbackends, sizeof(*p->backends));
		if (!p->backends)
			goto fail;
		for (size_t j = 0; j < pc->nbackends; j++) {
			struct backend *b = &p->backends[j];
			b->conf = &pc->backends[j];
			b->pool = pc;
			b->id = rt->nbackends++;
			snprintf(b->name, sizeof(b->name), "%s", pc->backends[j].ep.address);
			atomic_init(&b->up, 1);
		}
	}
	*out = rt;
	return 0;
fail:
	runtime_destroy(rt);
	return -ENOMEM;
}

void runtime_destroy(struct runtime *rt)
{
	if (!rt)
		return;
	for (size_t i = 0; rt->pools && i < rt->npools; i++) {
		free(rt->pools[i].backends);
		if (rt->pools[i].conf)
			pool_queue_destroy(&rt->pools[i].queue);
	}
	free(rt->pools);
	free(rt);
}

int backend_eligible(const struct backend *b, uint64_t now_ms)
{
	unsigned cap = b->conf->max_concurrency;
	return atomic_load_explicit(&b->up, memory_order_relaxed) &&
	       now_ms >= atomic_load_explicit(&b->down_until_ms, memory_order_relaxed) &&
	       (!cap || atomic_load_explicit(&b->inflight, memory_order_relaxed) < cap);
}

void backend_mark_failed(struct backend *b, uint64_t now_ms)
{
	atomic_fetch_add_explicit(&b->connect_failures, 1, memory_order_relaxed);
	atomic_store_explicit(&b->down_until_ms, now_ms + b->pool->fail_timeout_ms,
			      memory_order_relaxed);
}

struct backend *pool_pick(struct pool_rt *p, uint64_t now_ms, uint64_t rnd,
			  const struct backend *exclude)
{
	struct lb_candidate cand[POOL_MAX_BACKENDS];
	size_t n = p->nbackends;
	ASSERT(n <= POOL_MAX_BACKENDS);
	for (size_t i = 0; i < n; i++) {
		const struct backend *b = &p->backends[i];
		cand[i].weight = b->conf->weight;
		cand[i].inflight = atomic_load_explicit(&b->inflight, memory_order_relaxed);
		cand[i].eligible = b != exclude && backend_eligible(b, now_ms);
	}
	for (size_t attempt = 0; attempt < n; attempt++) {
		uint64_t ticket = atomic_fetch_add_explicit(&p->ticket, 1, memory_order_relaxed);
		int idx = p->conf->balance->pick(&p->conf->lb, cand, n, ticket, rnd);
		if (idx < 0)
			break;
		struct backend *b = &p->backends[idx];
		unsigned cap = b->conf->max_concurrency;
		unsigned before = atomic_fetch_add_explicit(&b->inflight, 1, memory_order_relaxed);
		if (cap && before >= cap) {
			/* another worker took the last slot since we looked: pick again */
			atomic_fetch_sub_explicit(&b->inflight, 1, memory_order_relaxed);
			cand[idx].eligible = 0;
			rnd = rnd * 6364136223846793005u + 1442695040888963407u;
			continue;
		}
		atomic_fetch_add_explicit(&b->requests, 1, memory_order_relaxed);
		return b;
	}
	return NULL;
}
