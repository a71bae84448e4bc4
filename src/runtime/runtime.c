/*
 * runtime.c - building the shared runtime from a config: each pool's backends, the slots
 * of its discovered names and its spare ones, its queue, TLS context, TTFT fit and model
 * set; each backend's prefix index; the response cache; each tokenized model's health
 * (runtime/tokhealth.h); and the metrics' registry (runtime/proxy_metric.h).
 */
#include "runtime/runtime.h"
#include "runtime/llm.h"
#include "runtime/pick.h"
#include "runtime/pool.h"
#include "runtime/proxy_metric.h"
#include "runtime/tokhealth.h"
#include "conf/schema_discovery.h"
#include "conf/tls.h"
#include "core/log.h"
#include "cache/store.h"
#include "policy/prefix_index.h"
#include "policy/evict.h"
#include "policy/stick.h"
#include "tok/tokmodel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* A backend with kv_events whose pool keeps no index of its own (llm.cache_blocks) gets one
 * of this many blocks. */
#define KV_EVENTS_INDEX_BLOCKS 65536

/* pools[].tls: the context its backend connections share (checked when the config was). */
static int runtime_pool_tls(struct pool_rt *p)
{
	char err[300];
	int rc = conf_upstream_tls_build(p->conf->tls, &p->tls, err, sizeof(err));
	if (rc < 0) {
		log_error("pool %s: tls: %s", p->conf->name, err);
		return rc;
	}
	if (!p->conf->tls->verify)
		log_warn(
		    "pool %s: tls.verify is false: the backends' certificates are NOT checked; "
		    "anyone on the path to them can read and change this pool's traffic. Use "
		    "it only to try things out.",
		    p->conf->name);
	return 0;
}

/* The slots of <b>: max_backends for a discovered name, else 1. */
static size_t slot_count(const struct conf_backend *b)
{
	if (!b->discover)
		return 1;
	return b->discover_max ? b->discover_max : DISCOVER_MAX_DEFAULT;
}

/* The backends of <pc> at run time: its fixed ones, and every discovered name's slots. */
static size_t runtime_pool_slots(const struct conf_pool *pc)
{
	size_t n = 0;
	for (size_t j = 0; j < pc->nbackends; j++)
		n += slot_count(&pc->backends[j]);
	return n;
}

/* p->models from its backends' models lists. 0 or -ENOMEM. */
static int runtime_pool_models(struct pool_rt *p)
{
	char *const **names = calloc(p->nbackends, sizeof(*names));
	size_t *counts = calloc(p->nbackends, sizeof(*counts));
	int rc = -ENOMEM;
	if (names && counts) {
		for (size_t j = 0; j < p->nbackends; j++) {
			names[j] = p->backends[j].conf->models;
			counts[j] = p->backends[j].conf->nmodels;
		}
		rc = models_build(&p->models, names, counts, p->nbackends);
	}
	free(names);
	free(counts);
	return rc;
}

/*
 * A backend with kv_events keeps an exact prefix index, fed by its engine's events
 * (control/kvsub.c): in a pool balanced by llm, the one balancing reads (marked exact: routing
 * adds its guesses to a pending table beside it, which the events confirm); elsewhere one of its
 * own, of KV_EVENTS_INDEX_BLOCKS blocks.
 */
static int runtime_backend_engine(struct backend *b)
{
	if (!b->conf->kv_events)
		return 0;
	if (b->llm) {
		b->kv_prefix = b->llm->prefix;
		return llm_follow_events(b->llm);
	}
	return prefix_index_new(KV_EVENTS_INDEX_BLOCKS, &b->kv_prefix);
}

int runtime_create(const struct conf *conf, struct runtime **out)
{
	int rc = -ENOMEM;
	struct runtime *rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->conf = conf;
	if (!(rt->tokhealth = calloc(conf->ntokmodels + 1, sizeof(*rt->tokhealth))))
		goto fail;
	for (size_t i = 0; i < conf->ntokmodels; i++)
		tokhealth_init(&rt->tokhealth[i], !conf->tokmodels[i].tm->has_chat);
	rt->npools = conf->npools;
	rt->pools = calloc(conf->npools, sizeof(*rt->pools));
	if (!rt->pools)
		goto fail;
	for (size_t i = 0; i < conf->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		const struct conf_pool *pc = &conf->pools[i];
		p->conf = pc;
		p->index = i;
		p->nbackends = runtime_pool_slots(pc) + pc->spare_backends;
		p->spare_conf = (struct conf_backend){.weight = 1};
		if (pool_queue_init(&p->queue, pc) < 0) {
			p->conf = NULL; /* nothing to destroy */
			goto fail;
		}
		pool_retry_init(p);
		if (pc->tls && (rc = runtime_pool_tls(p)) < 0)
			goto fail;
		rc = -ENOMEM;
		p->backends = calloc(p->nbackends, sizeof(*p->backends));
		if (!p->backends || (pc->balance->blocks && llm_fit_new(&p->llm) < 0) ||
		    (pc->session.enabled &&
		     stick_table_new(pc->session.max_entries, pc->session.ttl_s, &p->stick) < 0))
			goto fail;
		for (size_t j = 0, k = 0, slot = 0; j < p->nbackends; j++) {
			struct backend *b = &p->backends[j];
			const struct conf_backend *cb =
			    k < pc->nbackends ? &pc->backends[k] : &p->spare_conf;
			b->conf = cb;
			b->pool = pc;
			b->id = rt->nbackends++;
			b->tls = p->tls;
			if (!(b->share = calloc(1, sizeof(*b->share))))
				goto fail;
			atomic_init(&b->up, 1);
			atomic_init(&b->weight, cb->weight);
			atomic_init(&b->max_conc, cb->max_concurrency);
			if (k >= pc->nbackends) { /* a spare slot, empty until the API fills it */
				b->source = BACKEND_FROM_API;
				snprintf(b->name, sizeof(b->name), "%s#spare%zu", pc->name,
					 j - runtime_pool_slots(pc));
			} else if (cb->discover) {
				b->source =
				    BACKEND_FROM_DNS; /* a slot, empty until the name resolves */
				snprintf(b->name, sizeof(b->name), "%.60s#%zu", cb->ep.address,
					 slot);
				if (++slot == slot_count(cb))
					k++, slot = 0;
			} else {
				snprintf(b->name, sizeof(b->name), "%s", cb->ep.address);
				b->addr = cb->ep.addr;
				atomic_init(&b->addr_hash,
					    XXH3_64bits(cb->ep.address, strlen(cb->ep.address)));
				atomic_init(&b->present, 1);
				k++;
			}
			if (pc->balance->blocks && llm_backend_new(&pc->lb, p->llm, &b->llm) < 0)
				goto fail;
			int erc = runtime_backend_engine(b);
			if (erc < 0) {
				rc = erc;
				goto fail;
			}
		}
		if (pc->has_models && runtime_pool_models(p) < 0)
			goto fail;
	}
	if (conf->cache.on) {
		struct cache_store_conf cc = {
		    .memory = conf->cache.memory,
		    .max_object = conf->cache.max_object,
		    .shards = conf->cache.shards,
		    .evict = evict_find(conf->cache.eviction ? conf->cache.eviction : "sieve"),
		};
		if ((rc = cache_store_new(&cc, &rt->cache)) < 0)
			goto fail;
	}
	if ((rc = proxy_metric_create(rt)) < 0)
		goto fail;
	*out = rt;
	return 0;
fail:
	runtime_destroy(rt);
	return rc;
}

void runtime_destroy(struct runtime *rt)
{
	if (!rt)
		return;
	for (size_t i = 0; rt->pools && i < rt->npools; i++) {
		for (size_t j = 0; rt->pools[i].backends && j < rt->pools[i].nbackends; j++) {
			struct backend *b = &rt->pools[i].backends[j];
			if (b->kv_prefix && !b->llm)
				prefix_index_free(b->kv_prefix); /* its own, not its llm's */
			llm_backend_free(b->llm);
			free(b->share); /* NULL when a newer runtime holds it (control/carry.c) */
		}
		free(rt->pools[i].backends);
		free(rt->pools[i].llm);
		stick_table_free(rt->pools[i].stick);
		models_free(&rt->pools[i].models);
		net_tls_ctx_free(rt->pools[i].tls);
		if (rt->pools[i].conf)
			pool_queue_destroy(&rt->pools[i].queue);
	}
	free(rt->pools);
	cache_store_free(rt->cache);
	proxy_metric_destroy(rt);
	free(rt->tokhealth);
	free(rt);
}
