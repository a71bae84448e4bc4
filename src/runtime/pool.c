/*
 * pool.c - what a backend's live state says of it now: in rotation, eligible, its state's
 * name, its latency as time passes; what it and its engine report of their load; and a
 * discovered or added slot filled (see pool.h).
 */
#include "runtime/pool.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static const char *const admin_names[BACKEND_STATES] = {[BACKEND_ENABLED] = "enabled",
							[BACKEND_DRAINING] = "draining",
							[BACKEND_DISABLED] = "disabled"};

const char *backend_state_name(const struct backend *b)
{
	if (b->source != BACKEND_FROM_DNS && !backend_present(b))
		return atomic_load_explicit(&b->share->inflight, memory_order_relaxed) ? "removing"
										       : "removed";
	return admin_names[atomic_load_explicit(&b->admin, memory_order_relaxed) % BACKEND_STATES];
}

int backend_usable(const struct backend *b, uint64_t now_ms)
{
	return backend_present(b) && !atomic_load_explicit(&b->admin, memory_order_relaxed) &&
	       atomic_load_explicit(&b->up, memory_order_relaxed) &&
	       now_ms >= atomic_load_explicit(&b->down_until_ms, memory_order_relaxed);
}

int backend_eligible(const struct backend *b, uint64_t now_ms)
{
	unsigned cap = backend_cap(b);
	return backend_usable(b, now_ms) &&
	       (!cap || atomic_load_explicit(&b->share->inflight, memory_order_relaxed) +
				atomic_load_explicit(&b->elsewhere, memory_order_relaxed) <
			    cap);
}

void backend_came_back(struct backend *b, uint64_t now_ms)
{
	atomic_store_explicit(&b->back_ms, now_ms, memory_order_relaxed);
}

uint32_t backend_latency_us(const struct backend *b, uint64_t now_ms)
{
	uint32_t v = (uint32_t)atomic_load_explicit(&b->ewma_us, memory_order_relaxed);
	uint32_t base = (uint32_t)atomic_load_explicit(&b->base_us, memory_order_relaxed);
	uint64_t at = atomic_load_explicit(&b->ewma_ms, memory_order_relaxed);
	if (!v || now_ms <= at)
		return v;
	/* nothing measured since <at>: a peak fades back to the backend's usual latency */
	double w = exp(-(double)(now_ms - at) / b->pool->ewma_decay_ms);
	return (uint32_t)(base + ((double)v - base) * w);
}

void backend_report_load(struct backend *b, uint64_t now_ms, unsigned depth)
{
	atomic_store_explicit(&b->reported_load, depth, memory_order_relaxed);
	atomic_store_explicit(&b->reported_ms, now_ms, memory_order_relaxed);
}

void backend_report_engine(struct backend *b, uint64_t now_ms, double running, double waiting,
			   double kv_usage)
{
	double ours = atomic_load_explicit(&b->share->inflight, memory_order_relaxed);
	double others = running + waiting - ours;
	atomic_store_explicit(&b->engine_running,
			      running < UINT32_MAX ? (unsigned)running : UINT32_MAX,
			      memory_order_relaxed);
	atomic_store_explicit(&b->engine_waiting,
			      waiting < UINT32_MAX ? (unsigned)waiting : UINT32_MAX,
			      memory_order_relaxed);
	if (kv_usage >= 0)
		atomic_store_explicit(&b->engine_kv_ppm,
				      (unsigned)((kv_usage > 1 ? 1 : kv_usage) * 1e6 + 0.5),
				      memory_order_relaxed);
	backend_report_load(b, now_ms,
			    others <= 0		  ? 0
			    : others < UINT32_MAX ? (unsigned)others
						  : UINT32_MAX);
}

void backend_fill(struct backend *b, const struct net_addr *a, const char *text, unsigned weight,
		  uint64_t now_ms)
{
	b->addr = *a;
	int at = (atomic_load(&b->addr_at) & 1) ^ 1;
	snprintf(b->addr_text[at], sizeof(b->addr_text[at]), "%s", text);
	atomic_store_explicit(&b->addr_at, at, memory_order_release);
	atomic_store(&b->addr_hash, XXH3_64bits(text, strlen(text)));
	atomic_store(&b->weight, weight);
	/* nothing of what the slot held before holds for this one */
	atomic_store(&b->down_until_ms, 0);
	atomic_store(&b->connect_failed, 0);
	atomic_store(&b->fails_in_row, 0);
	atomic_store(&b->ejections_in_row, 0);
	atomic_store(&b->ejected_ms, 0);
	atomic_store(&b->ewma_us, 0);
	atomic_store(&b->base_us, 0);
	atomic_store(&b->ewma_ms, 0);
	atomic_store(&b->reported_ms, 0);
	b->hc_ok = b->hc_fail = 0;
	atomic_store(&b->up, 1);
	backend_came_back(b, now_ms); /* slow start, when the pool has one */
	atomic_fetch_add(&b->gen, 1);
	atomic_store_explicit(&b->present, 1, memory_order_seq_cst); /* last: published */
}
