/*
 * pick.c - choosing backends, keeping what each backend's answers say about it (latency,
 * failures, ejection), and each pool's retry budget (see pick.h).
 */
#include "runtime/pick.h"
#include "runtime/llm.h"
#include "runtime/proxy_metric.h"
#include "core/check.h"
#include "core/log.h"
#include "core/rand.h"
#include "policy/outlier.h"
#include "policy/stick.h"

#include <math.h>
#include <stdlib.h>

#define RETRY_TOKEN 1000	    /* one retry, in budget units */
#define RETRY_BUDGET_MAX 10000	    /* at most ten retries saved up */
#define SLOW_START_FLOOR 0.1	    /* a backend just back still sees this share of picks */
#define LATENCY_OUTLIER_MIN_US 1000 /* below a millisecond, latency is never an outlier */
#define SAMPLE_CLIP 3		    /* a sample counts as at most this many usual latencies */
#define BASE_WEIGHT 16		    /* usual latency: each sample moves it 1/16 of the way */

void backend_mark_failed(struct backend *b, uint64_t now_ms)
{
	backend_count(b, PM_BACKEND_CONNECT_FAILURES, 1);
	atomic_store_explicit(&b->connect_failed, 1, memory_order_relaxed);
	atomic_store_explicit(&b->down_until_ms, now_ms + b->pool->fail_timeout_ms,
			      memory_order_relaxed);
}

/* Share of picks that may see <b> now: 1, or less while it ramps up after coming back. */
static double slow_start_share(const struct backend *b, uint64_t now_ms)
{
	unsigned ramp = b->pool->slow_start_ms;
	if (!ramp)
		return 1;
	uint64_t back = atomic_load_explicit(&b->back_ms, memory_order_relaxed);
	uint64_t down = atomic_load_explicit(&b->down_until_ms, memory_order_relaxed);
	if (down > back)
		back = down; /* a passive mark or an ejection ended then */
	if (!back || now_ms >= back + ramp || now_ms < back)
		return 1;
	double share = (double)(now_ms - back) / ramp;
	return share < SLOW_START_FLOOR ? SLOW_START_FLOOR : share;
}

/*
 * Take <b> out for a while, if the pool can spare it, on an answer to a request sent at
 * <sent_ms>: once per episode (policy/outlier.h), not again for each answer that was in
 * flight when it was taken out.
 */
static void backend_eject(struct pool_rt *p, struct backend *b, uint64_t now_ms, uint64_t sent_ms,
			  const char *why)
{
	const struct conf_outlier *o = &p->conf->outlier;
	uint64_t until = atomic_load_explicit(&b->down_until_ms, memory_order_relaxed);
	uint64_t last = atomic_load_explicit(&b->ejected_ms, memory_order_relaxed);
	if (!outlier_may_eject(now_ms, sent_ms, last, until))
		return;
	size_t out = 0, in_pool = 0; /* (empty slots are no part of the pool) */
	for (size_t i = 0; i < p->nbackends; i++) {
		out += now_ms <
		       atomic_load_explicit(&p->backends[i].down_until_ms, memory_order_relaxed);
		in_pool += backend_present(&p->backends[i]);
	}
	if ((out + 1) * 100 > (size_t)o->max_ejection_pct * in_pool)
		return; /* keep serving: too much of the pool is out already */
	unsigned times = atomic_load_explicit(&b->ejections_in_row, memory_order_relaxed);
	if (until && now_ms > until + 10ull * o->ejection_ms)
		times = 0; /* well behaved for a long while: forgive */
	if (times > 6)
		times = 6;
	uint64_t ms = (uint64_t)o->ejection_ms << times;
	atomic_store_explicit(&b->ejections_in_row, times + 1, memory_order_relaxed);
	atomic_store_explicit(&b->ejected_ms, now_ms, memory_order_relaxed);
	atomic_store_explicit(&b->down_until_ms, now_ms + ms, memory_order_relaxed);
	atomic_store_explicit(&b->fails_in_row, 0, memory_order_relaxed);
	backend_count(b, PM_BACKEND_EJECTIONS, 1);
	log_warn("backend %s of pool %s: ejected for %llu ms: %s", b->name, p->conf->name,
		 (unsigned long long)ms, why);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Is <lat> far above the median latency of the pool's other usable backends? */
static int latency_outlier(struct pool_rt *p, const struct backend *b, uint64_t now_ms,
			   uint32_t lat)
{
	unsigned factor = p->conf->outlier.latency_factor;
	uint32_t peers[LB_MAX_BACKENDS];
	size_t n = 0;
	if (!factor || lat < LATENCY_OUTLIER_MIN_US)
		return 0;
	for (size_t i = 0; i < p->nbackends; i++) {
		const struct backend *o = &p->backends[i];
		uint32_t l;
		if (o != b && backend_usable(o, now_ms) && (l = backend_latency_us(o, now_ms)))
			peers[n++] = l;
	}
	if (n < 2)
		return 0; /* with one peer, who is the outlier? */
	qsort(peers, n, sizeof(peers[0]), cmp_u32);
	return (uint64_t)lat > (uint64_t)factor * peers[n / 2];
}

void backend_observe(struct pool_rt *p, struct backend *b, uint64_t now_ms, uint64_t ttfb_us,
		     int status)
{
	const struct conf_outlier *o = &p->conf->outlier;
	uint32_t sample = ttfb_us > UINT32_MAX ? UINT32_MAX : ttfb_us ? (uint32_t)ttfb_us : 1;
	uint32_t base = (uint32_t)atomic_load_explicit(&b->base_us, memory_order_relaxed);
	/* one sample may raise the estimate to a few times the usual latency, no further: a
	 * request stuck through a stall says little about the next one (and a backend that
	 * stays slow raises its usual latency sample by sample) */
	if (base && sample > SAMPLE_CLIP * base)
		sample = SAMPLE_CLIP * base;
	base = base ? base + (uint32_t)(((int64_t)sample - base) / BASE_WEIGHT) : sample;
	uint32_t cur = backend_latency_us(b, now_ms);
	uint32_t v = sample;
	uint64_t at = atomic_load_explicit(&b->ewma_ms, memory_order_relaxed);
	if (cur && sample < cur) {
		/* below the peak: move toward the sample as time passes (racing updates from
		 * other workers may be lost; each is one sample among many); within the same
		 * millisecond the weight is exp(0), the estimate stays: no exp() a request */
		double w = now_ms > at ? exp(-(double)(now_ms - at) / p->conf->ewma_decay_ms) : 1;
		v = w == 1 ? cur : (uint32_t)(cur * w + sample * (1 - w));
	}
	/* stored only when they change: every worker's requests land here, and a store of
	 * the same value still takes the line from the other cores */
	base = base ? base : 1;
	v = v ? v : 1;
	if (atomic_load_explicit(&b->base_us, memory_order_relaxed) != base)
		atomic_store_explicit(&b->base_us, base, memory_order_relaxed);
	if (atomic_load_explicit(&b->ewma_us, memory_order_relaxed) != v)
		atomic_store_explicit(&b->ewma_us, v, memory_order_relaxed);
	if (at != now_ms)
		atomic_store_explicit(&b->ewma_ms, now_ms, memory_order_relaxed);
	backend_observe_us(b, PM_BACKEND_TTFB, ttfb_us);
	if (atomic_load_explicit(&b->connect_failed, memory_order_relaxed))
		atomic_store_explicit(&b->connect_failed, 0, memory_order_relaxed); /* it answers */

	/* when the request went out: an answer to one sent before the backend's last ejection
	 * was in flight through it, and says nothing new (policy/outlier.h) */
	uint64_t took_ms = ttfb_us / 1000;
	uint64_t sent_ms = now_ms > took_ms ? now_ms - took_ms : 0;
	if (status >= 500 && status < 600) {
		uint64_t last = atomic_load_explicit(&b->ejected_ms, memory_order_relaxed);
		if (!outlier_answer_is_news(sent_ms, last))
			return; /* not part of a new run */
		unsigned run = atomic_fetch_add_explicit(&b->fails_in_row, 1, memory_order_relaxed);
		if (o->consecutive_5xx && run + 1 >= o->consecutive_5xx)
			backend_eject(p, b, now_ms, sent_ms, "consecutive 5xx answers");
		return;
	}
	atomic_store_explicit(&b->fails_in_row, 0, memory_order_relaxed);
	if (latency_outlier(p, b, now_ms, v))
		backend_eject(p, b, now_ms, sent_ms, "latency far above its peers");
}

/*
 * How long a report of <b>'s load is believed: load_ttl_ms, and with engine_metrics at least
 * until the next scrape has had its time (a scrape reports once an interval).
 */
static uint64_t report_ttl_ms(const struct backend *b)
{
	const struct conf_engine_metrics *e = &b->pool->engine_metrics;
	uint64_t ttl = b->pool->load_ttl_ms;
	uint64_t scrape = e->enabled ? 2ull * e->interval_ms + e->timeout_ms : 0;
	return ttl > scrape ? ttl : scrape;
}

/* Requests queued inside <b> by its own word, while that word is fresh; else 0. */
static unsigned reported_load(const struct backend *b, uint64_t now_ms)
{
	uint64_t at = atomic_load_explicit(&b->reported_ms, memory_order_relaxed);
	if (!at || now_ms >= at + report_ttl_ms(b))
		return 0;
	return atomic_load_explicit(&b->reported_load, memory_order_relaxed);
}

struct backend *pool_pick(struct pool_rt *p, uint64_t now_ms, uint64_t rnd,
			  const struct pick_hint *h)
{
	struct lb_candidate cand[LB_MAX_BACKENDS];
	const struct lora_snap *lora[LB_MAX_BACKENDS];
	const struct lb_ops *lb = p->conf->balance;
	size_t n = p->nbackends;
	ASSERT(n <= LB_MAX_BACKENDS);
	uint64_t coin = rnd ^ 0x9e3779b97f4a7c15u;
	/* the backends that serve the request's model, when the pool's backends list models */
	const uint64_t *serving = h->has_model ? models_mask(&p->models, h->model) : NULL;
	int adapters = h->has_model && atomic_load_explicit(&p->lora_seen, memory_order_relaxed);
	for (size_t i = 0; i < n; i++) {
		const struct backend *b = &p->backends[i];
		unsigned cap = backend_cap(b);
		unsigned inflight = atomic_load_explicit(&b->share->inflight, memory_order_relaxed);
		unsigned others = reported_load(b, now_ms); /* a peer's figure: up to UINT32_MAX */
		/* cluster: the slots other instances hold there (control/cluster.c) */
		unsigned taken =
		    inflight + atomic_load_explicit(&b->elsewhere, memory_order_relaxed);
		int usable = b != h->exclude && (!serving || models_mask_has(serving, i)) &&
			     backend_usable(b, now_ms);
		double share = usable ? slow_start_share(b, now_ms) : 0;
		if (share < 1 && rand_unit(&coin) >= share)
			usable = 0; /* ramping up: not offered to this pick */
		cand[i] = (struct lb_candidate){
		    .weight = atomic_load_explicit(&b->weight, memory_order_relaxed),
		    /* ours, and others' (saturated: a wrapped sum would look idle) */
		    .inflight = others > UINT32_MAX - taken ? UINT32_MAX : taken + others,
		    .slots = cap,
		    .latency_us = lb->latency ? backend_latency_us(b, now_ms) : 0,
		    .eligible = usable && (!cap || taken < cap),
		    .busy = usable && cap && taken >= cap,
		};
		if (lb->blocks && (cand[i].eligible || cand[i].busy)) {
			llm_candidate(b->llm, h->blocks, h->nblocks, &cand[i]);
			cand[i].id = atomic_load_explicit(&b->addr_hash, memory_order_relaxed);
			if (b == h->home && cand[i].waiting)
				cand[i].waiting--; /* (not behind itself) */
		}
		if (adapters)
			lora[i] = &b->lora;
	}
	if (adapters) /* a LoRA adapter: its backends while they have room (policy/lora.h) */
		lora_prefer(lora, h->model, cand, n);
	/* llm: a prompt is named by its first block (the rendezvous of a new one) */
	int first = lb->blocks && h->nblocks;
	struct lb_draw d = {.rnd = rnd,
			    .key = first ? h->blocks[0] : h->key,
			    .has_key = (uint8_t)(first || h->has_key),
			    .waiting = h->waiting,
			    .blocks = h->nblocks,
			    .waited_ms = h->declined_ms,
			    .home_only = (uint8_t)h->home_only,
			    .queued = h->queued,
			    .wait_for = h->wait_for};
	/* the session's backend first, when it may take this request; else the balancer's */
	uint32_t now_s = (uint32_t)(now_ms / 1000), expires_s = 0;
	int stuck =
	    h->has_session && p->stick ? stick_get(p->stick, h->session, now_s, &expires_s) : -1;
	int prefer = stuck >= 0 && (size_t)stuck < n && cand[stuck].eligible ? stuck : -1;
	for (size_t attempt = 0; attempt < n; attempt++) {
		int idx = prefer, by_session = prefer >= 0;
		prefer = -1; /* (once: a lost race falls back to the balancer) */
		if (idx < 0) {
			d.ticket = atomic_fetch_add_explicit(&p->ticket, 1, memory_order_relaxed);
			idx = lb->pick(&p->conf->lb, cand, n, &d);
		}
		/* read back for whoever shows it: the last pick's stands (the session's backend
		 * is read as a pick's answer would be, and says why it was taken) */
		if (h->explain && lb->explain) {
			h->explain->where = p;
			h->explain->waited_ms = h->waited_ms;
			lb->explain(&p->conf->lb, cand, n, &d, idx, h->explain);
			if (by_session)
				h->explain->why = LB_WHY_SESSION;
		}
		if (idx < 0) {
			if (idx == LB_WAIT && h->would_wait)
				*h->would_wait = 1;
			break;
		}
		struct backend *b = &p->backends[idx];
		unsigned cap = backend_cap(b);
		/* seq_cst, then present: a slot discovery takes out either is seen gone here,
		 * or is seen busy there and not rewritten (struct backend) */
		unsigned before =
		    atomic_fetch_add_explicit(&b->share->inflight, 1, memory_order_seq_cst);
		if (!atomic_load_explicit(&b->present, memory_order_seq_cst)) {
			atomic_fetch_sub_explicit(&b->share->inflight, 1, memory_order_relaxed);
			cand[idx].eligible = cand[idx].busy = 0;
			continue;
		}
		if (cap &&
		    before + atomic_load_explicit(&b->elsewhere, memory_order_relaxed) >= cap) {
			/* another worker took the last slot since we looked: pick again */
			atomic_fetch_sub_explicit(&b->share->inflight, 1, memory_order_relaxed);
			cand[idx].eligible = 0;
			cand[idx].busy = 1;
			cand[idx].inflight = cap;
			d.rnd = rand_next(&d.rnd);
			continue;
		}
		backend_count(b, PM_BACKEND_REQUESTS, 1);
		if (stuck >= 0)
			pool_count(p, idx == stuck ? PM_POOL_SESSION_HITS : PM_POOL_SESSION_MOVES,
				   1);
		/* (re)stick: a new session, one that moved, or one half through its time */
		if (h->has_session && h->session_learn && p->stick &&
		    (idx != stuck || expires_s - now_s < p->stick->ttl_s / 2))
			stick_put(p->stick, h->session, (unsigned)idx, now_s, 1);
		if (lb->blocks && h->work) { /* (a hedge's copy is not counted as work) */
			*h->work = llm_picked(b->llm, h->blocks, h->nblocks, cand[idx].hit_blocks,
					      h->ticks);
			*h->missed = h->nblocks - cand[idx].hit_blocks;
		}
		return b;
	}
	return NULL;
}

int pool_retry_allowed(struct pool_rt *p)
{
	if (atomic_fetch_sub_explicit(&p->retry_tokens, RETRY_TOKEN, memory_order_relaxed) >=
	    RETRY_TOKEN)
		return 1;
	atomic_fetch_add_explicit(&p->retry_tokens, RETRY_TOKEN, memory_order_relaxed);
	pool_count(p, PM_POOL_RETRIES_DENIED, 1);
	return 0;
}

void pool_retry_earn(struct pool_rt *p)
{
	int_fast64_t earn = (int_fast64_t)p->conf->retry_budget_pct * RETRY_TOKEN / 100;
	if (atomic_load_explicit(&p->retry_tokens, memory_order_relaxed) < RETRY_BUDGET_MAX)
		atomic_fetch_add_explicit(&p->retry_tokens, earn, memory_order_relaxed);
}

void pool_retry_init(struct pool_rt *p)
{
	atomic_init(&p->retry_tokens, RETRY_BUDGET_MAX);
}
