/*
 * runtime.c - building the shared runtime from a config, choosing backends, and keeping
 * what each backend's answers say about it (latency, failures, ejection).
 *
 * It also declares, once, every metric the admin endpoint shows (proxy_metric_defs below):
 * the registry built from that table holds the counters per thread, and the table's read
 * callbacks give the live state (up, in flight, latency, queue length) at scrape time. Both
 * /metrics and /status are written from it.
 */
#include "proxy/runtime.h"
#include "proxy/cluster_stats.h"
#include "conf/schema_discovery.h"
#include "proxy/llm.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/rand.h"
#include "cache/store.h"
#include "conf/tls.h"
#include "guard/apikeys.h"
#include "obs/accesslog.h"
#include "obs/kvevent.h"
#include "obs/process.h"
#include "policy/outlier.h"
#include "policy/prefix_index.h"
#include "policy/qdisc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define RETRY_TOKEN 1000	    /* one retry, in budget units */
#define RETRY_BUDGET_MAX 10000	    /* at most ten retries saved up */
#define SLOW_START_FLOOR 0.1	    /* a backend just back still sees this share of picks */
#define LATENCY_OUTLIER_MIN_US 1000 /* below a millisecond, latency is never an outlier */
#define SAMPLE_CLIP 3		    /* a sample counts as at most this many usual latencies */
#define BASE_WEIGHT 16		    /* usual latency: each sample moves it 1/16 of the way */

#define SPARE_SHARDS 4 /* beyond two per worker: main thread, health checks, helpers */

static const char *const class_names[PM_CLASSES] = {"aborted", "1xx", "2xx", "3xx", "4xx", "5xx"};

static const char *const kind_names[PM_KINDS] = {"prompt", "completion"};

static const char *const kvevent_names[KVEVENT_KINDS] = {
    [KVEVENT_STORED] = "stored", [KVEVENT_REMOVED] = "removed", [KVEVENT_CLEARED] = "cleared"};

/* A backend with kv_events whose pool keeps no index of its own (llm.cache_blocks) gets one
 * of this many blocks. */
#define KV_EVENTS_INDEX_BLOCKS 65536

#define TENANT_FOLD "other" /* the tenant series past metrics.max_tenants */

enum {
	SPACE_BACKEND,
	SPACE_POOL,
	SPACE_LISTENER,
	SPACE_PROCESS,
	SPACE_ROUTE,
	SPACE_TENANT,
	SPACE_COUNT
};

static const struct backend *be_at(const void *ctx, size_t i)
{
	return ((const struct runtime *)ctx)->backend_by_id[i];
}

static const struct pool_rt *pool_at(const void *ctx, size_t i)
{
	return &((const struct runtime *)ctx)->pools[i];
}

#define RELAXED(x) ((double)atomic_load_explicit(&(x), memory_order_relaxed))

static const char *read_be_address(const void *ctx, size_t i)
{
	const struct backend *b = be_at(ctx, i);
	if (!b->conf->discover)
		return b->name;
	return b->addr_text[atomic_load_explicit(&b->addr_at, memory_order_acquire) & 1];
}

static const char *const source_names[] = {
    [BACKEND_FROM_CONFIG] = "config", [BACKEND_FROM_DNS] = "dns", [BACKEND_FROM_API] = "api"};

static const char *read_be_source(const void *ctx, size_t i)
{
	return source_names[be_at(ctx, i)->source];
}

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

static const char *read_be_state_name(const void *ctx, size_t i)
{
	return backend_state_name(be_at(ctx, i));
}

static double read_be_state(const void *ctx, size_t i)
{
	const struct backend *b = be_at(ctx, i);
	if (b->source != BACKEND_FROM_DNS && !backend_present(b))
		return BACKEND_STATES; /* removing */
	return RELAXED(b->admin);
}

/* A spare slot holding nothing is left out of /status and /metrics. */
static int be_live(const void *ctx, size_t i)
{
	return !backend_slot_free(be_at(ctx, i));
}

static double read_maintenance(const void *ctx, size_t i)
{
	(void)i;
	return RELAXED(((const struct runtime *)ctx)->maintenance) > 0;
}

static double read_be_weight(const void *ctx, size_t i)
{
	return RELAXED(be_at(ctx, i)->weight);
}

static double read_be_present(const void *ctx, size_t i)
{
	return backend_present(be_at(ctx, i));
}

/*
 * Up: with a health: block, what the active checks last found; without one, what the traffic
 * found (passive): down from a failed connect until the backend answers again.
 */
static double read_be_up(const void *ctx, size_t i)
{
	const struct backend *b = be_at(ctx, i);
	if (b->pool->health.enabled)
		return RELAXED(b->up);
	return !atomic_load_explicit(&b->connect_failed, memory_order_relaxed);
}

static double read_be_eligible(const void *ctx, size_t i)
{
	return backend_eligible(be_at(ctx, i), clock_now_ms());
}

static double read_be_ejected(const void *ctx, size_t i)
{
	const struct backend *b = be_at(ctx, i);
	/* (a backend the admin API took out, or an empty slot, is not ejected) */
	return atomic_load(&b->up) && backend_present(b) && !atomic_load(&b->admin) &&
	       !backend_usable(b, clock_now_ms());
}

static double read_be_inflight(const void *ctx, size_t i)
{
	return RELAXED(be_at(ctx, i)->share->inflight);
}

static double read_be_max_concurrency(const void *ctx, size_t i)
{
	return backend_cap(be_at(ctx, i));
}

static double read_be_latency(const void *ctx, size_t i)
{
	return backend_latency_us(be_at(ctx, i), clock_now_ms()) / 1e6;
}

static double read_be_reported_load(const void *ctx, size_t i)
{
	return RELAXED(be_at(ctx, i)->reported_load);
}

/* balance: llm: what the pick sees of a backend (0 for other balancers). */
static struct lb_candidate llm_seen(const void *ctx, size_t i)
{
	struct lb_candidate c = {0};
	const struct backend *b = be_at(ctx, i);
	if (b->llm)
		llm_candidate(b->llm, NULL, 0, &c);
	return c;
}

static double read_be_llm_base(const void *ctx, size_t i)
{
	return llm_seen(ctx, i).base_us / 1e6;
}

static double read_be_llm_block(const void *ctx, size_t i)
{
	return llm_seen(ctx, i).block_us / 1e6;
}

static double read_be_llm_work(const void *ctx, size_t i)
{
	const struct llm_backend *l = be_at(ctx, i)->llm;
	return l ? RELAXED(l->work_us) / 1e6 : 0;
}

static double read_be_llm_index(const void *ctx, size_t i)
{
	const struct llm_backend *l = be_at(ctx, i)->llm;
	return l ? (double)prefix_index_count(l->prefix) : 0;
}

static double read_be_llm_prompt_blocks(const void *ctx, size_t i)
{
	const struct llm_backend *l = be_at(ctx, i)->llm;
	return l ? RELAXED(l->prompt_blocks) : 0;
}

static double read_be_llm_missed_blocks(const void *ctx, size_t i)
{
	const struct llm_backend *l = be_at(ctx, i)->llm;
	return l ? RELAXED(l->missed_blocks) : 0;
}

static double read_be_engine_waiting(const void *ctx, size_t i)
{
	return RELAXED(be_at(ctx, i)->engine_waiting);
}

static double read_be_engine_running(const void *ctx, size_t i)
{
	return RELAXED(be_at(ctx, i)->engine_running);
}

static double read_be_engine_kv_usage(const void *ctx, size_t i)
{
	return RELAXED(be_at(ctx, i)->engine_kv_ppm) / 1e6;
}

static double read_be_kv_blocks(const void *ctx, size_t i)
{
	const struct backend *b = be_at(ctx, i);
	return b->kv_prefix ? (double)prefix_index_count(b->kv_prefix) : 0;
}

static double read_cpu(const void *ctx, size_t i)
{
	(void)ctx, (void)i;
	return process_cpu_seconds();
}

static double read_resident(const void *ctx, size_t i)
{
	(void)ctx, (void)i;
	return process_resident_bytes();
}

static double read_virtual(const void *ctx, size_t i)
{
	(void)ctx, (void)i;
	return process_virtual_bytes();
}

static double read_open_fds(const void *ctx, size_t i)
{
	(void)ctx, (void)i;
	return process_open_fds();
}

static double read_max_fds(const void *ctx, size_t i)
{
	(void)ctx, (void)i;
	return process_max_fds();
}

static double read_alog_dropped(const void *ctx, size_t i)
{
	const struct runtime *rt = ctx;
	(void)i;
	return (double)accesslog_dropped(rt->alog);
}

static const char *const tunnel_way_names[TUNNEL_WAYS] = {"to_backend", "to_client"};
static const char *const tunnel_end_names[TUNNEL_ENDS] = {"closed", "idle", "drain", "error"};

static double read_tunnels(const void *ctx, size_t i)
{
	(void)i;
	return RELAXED(((const struct runtime *)ctx)->tunnels);
}

static double read_config_generation(const void *ctx, size_t i)
{
	(void)i;
	return ((const struct runtime *)ctx)->generation;
}

static double read_config_reloads(const void *ctx, size_t i)
{
	const struct runtime *rt = ctx;
	(void)i;
	return rt->reloads ? (double)rt->reloads->ok : 0;
}

static double read_config_reload_failures(const void *ctx, size_t i)
{
	const struct runtime *rt = ctx;
	(void)i;
	return rt->reloads ? (double)rt->reloads->failed : 0;
}

static const char *const cache_result_names[CACHE_RESULTS] = {
    "hit",	   "stale",  "stale_if_error", "collapsed", "miss",
    "revalidated", "bypass", "method",	       "request",   "pass",
};
static const char *const cache_evict_names[CACHE_EVICT_REASONS] = {"space", "purge", "replaced"};

static double read_cache(const struct runtime *rt, enum proxy_metric id, size_t i)
{
	struct cache_store_stats st;
	if (!rt->cache)
		return 0;
	cache_store_stats(rt->cache, &st);
	switch (id) {
	case PM_PROCESS_CACHE_BYTES:
		return (double)st.bytes;
	case PM_PROCESS_CACHE_OBJECTS:
		return (double)st.objects;
	default:
		return (double)(i == CACHE_EVICT_SPACE	 ? st.evicted_space
				: i == CACHE_EVICT_PURGE ? st.evicted_purge
							 : st.evicted_replaced);
	}
}

static double read_cache_bytes(const void *ctx, size_t i)
{
	return read_cache(ctx, PM_PROCESS_CACHE_BYTES, i);
}

static double read_cache_objects(const void *ctx, size_t i)
{
	return read_cache(ctx, PM_PROCESS_CACHE_OBJECTS, i);
}

static double read_cache_evictions(const void *ctx, size_t i)
{
	return read_cache(ctx, PM_PROCESS_CACHE_EVICTIONS, i);
}

static double read_cluster(const void *ctx, enum proxy_metric id)
{
	const struct cluster_stats *st = ((const struct runtime *)ctx)->cluster;
	if (!st)
		return 0;
	switch (id) {
	case PM_PROCESS_CLUSTER_UP:
		return atomic_load(&st->up);
	case PM_PROCESS_CLUSTER_INSTANCES:
		return atomic_load(&st->instances);
	case PM_PROCESS_CLUSTER_SYNCS:
		return (double)atomic_load(&st->syncs);
	case PM_PROCESS_CLUSTER_FAILED:
		return (double)atomic_load(&st->failed);
	case PM_PROCESS_CLUSTER_PREFIXES_SENT:
		return (double)atomic_load(&st->sent);
	case PM_PROCESS_CLUSTER_PREFIXES_RECEIVED:
		return (double)atomic_load(&st->received);
	default:
		return (double)atomic_load(&st->keys);
	}
}

static double read_cluster_up(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_UP);
}

static double read_cluster_instances(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_INSTANCES);
}

static double read_cluster_syncs(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_SYNCS);
}

static double read_cluster_failed(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_FAILED);
}

static double read_cluster_keys(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_KEYS);
}

static double read_cluster_sent(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_PREFIXES_SENT);
}

static double read_cluster_received(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_PREFIXES_RECEIVED);
}

static const char *read_pool_name(const void *ctx, size_t i)
{
	return pool_at(ctx, i)->conf->name;
}

static const char *read_pool_balance(const void *ctx, size_t i)
{
	return pool_at(ctx, i)->conf->balance->name;
}

static const char *read_pool_discipline(const void *ctx, size_t i)
{
	return pool_at(ctx, i)->conf->queue_discipline->name;
}

static double read_pool_queue_length(const void *ctx, size_t i)
{
	return pool_queue_len((struct pool_queue *)&pool_at(ctx, i)->queue);
}

static const char *read_listen_address(const void *ctx, size_t i)
{
	const struct runtime *rt = ctx;
	return rt->conf->listens[i].address;
}

static const char *const shed_names[SHED_REASONS] = {
    [SHED_PER_IP] = "max_connections_per_ip",
    [SHED_ACCEPT_RATE] = "accept_rate_per_ip",
    [SHED_MEMORY] = "max_buffer_memory",
};

static double read_buffer_bytes(const void *ctx, size_t i)
{
	const struct runtime *rt = ctx;
	(void)i;
	return rt->buffer_bytes ? (double)rt->buffer_bytes(rt->buffer_arg) : 0;
}

static const char *read_route_name(const void *ctx, size_t i)
{
	return ((const struct runtime *)ctx)->route_labels[i];
}

static const char *tenant_label(const void *ctx, size_t i, size_t k)
{
	(void)k;
	return names_at(((const struct runtime *)ctx)->tenants, i);
}

static const char *read_tenant_name(const void *ctx, size_t i)
{
	const char *name = tenant_label(ctx, i, 0);
	return name ? name : "";
}

#define BE .space = SPACE_BACKEND
#define ROUTE .space = SPACE_ROUTE
#define TENANT .space = SPACE_TENANT
#define POOL .space = SPACE_POOL
#define LISTENER .space = SPACE_LISTENER
#define JSON_ONLY(key, as) .type = METRIC_GAUGE, .json = key, .json_as = as

/* Every metric of the proxy, once: /metrics and /status both walk this table. */
static const struct metric_def proxy_metric_defs[PM_COUNT] = {
    [PM_BACKEND_ADDRESS] = {BE, JSON_ONLY("address", MJ_STRING), .read_str = read_be_address},
    [PM_BACKEND_SOURCE] = {BE, JSON_ONLY("source", MJ_STRING), .read_str = read_be_source},
    [PM_BACKEND_STATE_NAME] = {BE, JSON_ONLY("state", MJ_STRING), .read_str = read_be_state_name},
    [PM_BACKEND_WEIGHT] = {"accelnet_backend_weight", METRIC_GAUGE,
			   "the backend's weight: its config's, its SRV record's, or what the "
			   "admin API set",
			   NULL, BE, .json = "weight", .json_as = MJ_UINT, .read = read_be_weight},
    [PM_BACKEND_STATE] = {"accelnet_backend_admin_state", METRIC_GAUGE,
			  "what the admin API made of the backend: 0 enabled, 1 draining, 2 "
			  "disabled, 3 removing (no new requests but at 0; those in flight finish)",
			  NULL, BE, .read = read_be_state},
    [PM_BACKEND_PRESENT] = {"accelnet_backend_present", METRIC_GAUGE,
			    "1 if the backend takes new requests as far as discovery goes: a fixed "
			    "address, or one its name's DNS answer holds (0: an unused or "
			    "draining slot of backends.discover)",
			    NULL, BE, .json = "present", .json_as = MJ_BOOL,
			    .read = read_be_present},
    [PM_BACKEND_UP] = {"accelnet_backend_up", METRIC_GAUGE,
		       "1 if the backend is up: as active health checks find it when the pool "
		       "has health:, else 0 from a failed connect until it answers again",
		       NULL, BE, .json = "up", .json_as = MJ_BOOL, .read = read_be_up},
    [PM_BACKEND_ELIGIBLE] = {"accelnet_backend_eligible", METRIC_GAUGE,
			     "1 if the backend could take a request now: up, not ejected or "
			     "marked failed, and a slot free",
			     NULL, BE, .json = "eligible", .json_as = MJ_BOOL,
			     .read = read_be_eligible},
    [PM_BACKEND_EJECTED] = {"accelnet_backend_ejected", METRIC_GAUGE,
			    "1 while the backend is out of rotation though up (outlier "
			    "ejection or a failed connect's fail_timeout_ms)",
			    NULL, BE, .json = "ejected", .json_as = MJ_BOOL,
			    .read = read_be_ejected},
    [PM_BACKEND_INFLIGHT] = {"accelnet_backend_inflight", METRIC_GAUGE,
			     "requests in flight to the backend", NULL, BE, .json = "inflight",
			     .json_as = MJ_UINT, .read = read_be_inflight},
    [PM_BACKEND_MAX_CONCURRENCY] = {"accelnet_backend_slots", METRIC_GAUGE,
				    "request slots the backend has (max_concurrency; 0: no "
				    "limit); accelnet_backend_inflight are in use",
				    NULL, BE, .json = "max_concurrency", .json_as = MJ_UINT,
				    .read = read_be_max_concurrency},
    [PM_BACKEND_LATENCY] = {"accelnet_backend_latency_seconds", METRIC_GAUGE,
			    "peak-EWMA time to first byte, as balancing sees it", "seconds", BE,
			    .json = "latency_ms", .json_as = MJ_FIXED3, .json_scale = 1000,
			    .read = read_be_latency},
    [PM_BACKEND_REQUESTS] = {"accelnet_backend_requests_total", METRIC_COUNTER,
			     "requests sent to the backend", NULL, BE, .json = "requests",
			     .json_as = MJ_UINT},
    [PM_BACKEND_CONNECT_FAILURES] = {"accelnet_backend_connect_failures_total", METRIC_COUNTER,
				     "failed connects", NULL, BE, .json = "connect_failures",
				     .json_as = MJ_UINT},
    [PM_BACKEND_RETRIES] = {"accelnet_backend_retries_total", METRIC_COUNTER,
			    "requests retried elsewhere", NULL, BE, .json = "retries",
			    .json_as = MJ_UINT},
    [PM_BACKEND_EJECTIONS] = {"accelnet_backend_ejections_total", METRIC_COUNTER,
			      "times outlier detection took the backend out", NULL, BE,
			      .json = "ejections", .json_as = MJ_UINT},
    [PM_BACKEND_REPORTED_LOAD] = {"accelnet_backend_reported_load", METRIC_GAUGE,
				  "requests queued inside the backend, as it last reported", NULL,
				  BE, .json = "reported_load", .json_as = MJ_UINT,
				  .read = read_be_reported_load},
    [PM_BACKEND_HEDGED] = {"accelnet_backend_hedged_total", METRIC_COUNTER,
			   "requests on this backend that were also sent to another (hedging)",
			   "hedged", BE, .json = "hedged", .json_as = MJ_UINT},
    [PM_BACKEND_HEDGE_WINS] = {"accelnet_backend_hedge_wins_total", METRIC_COUNTER,
			       "hedged copies on this backend that answered first", NULL, BE,
			       .json = "hedge_wins", .json_as = MJ_UINT},
    [PM_BACKEND_LLM_BASE] = {"accelnet_backend_llm_ttft_base_seconds", METRIC_GAUGE,
			     "balance: llm: fitted time to first token with the whole prompt "
			     "cached",
			     "seconds", BE, .json = "llm_base_ms", .json_as = MJ_FIXED3,
			     .json_scale = 1000, .read = read_be_llm_base},
    [PM_BACKEND_LLM_BLOCK] = {"accelnet_backend_llm_ttft_per_block_seconds", METRIC_GAUGE,
			      "balance: llm: fitted time to first token added per prompt block "
			      "not cached",
			      "seconds", BE, .json = "llm_block_ms", .json_as = MJ_FIXED3,
			      .json_scale = 1000, .read = read_be_llm_block},
    [PM_BACKEND_LLM_WORK] = {"accelnet_backend_llm_work_seconds", METRIC_GAUGE,
			     "balance: llm: expected service time of the requests it serves for "
			     "us now",
			     "seconds", BE, .json = "llm_work_ms", .json_as = MJ_FIXED3,
			     .json_scale = 1000, .read = read_be_llm_work},
    [PM_BACKEND_LLM_INDEX] = {"accelnet_backend_llm_index_blocks", METRIC_GAUGE,
			      "balance: llm: prompt blocks its prefix cache is believed to hold",
			      NULL, BE, .json = "llm_index_blocks", .json_as = MJ_UINT,
			      .read = read_be_llm_index},
    [PM_BACKEND_LLM_PROMPT_BLOCKS] = {"accelnet_backend_llm_prompt_blocks_total", METRIC_COUNTER,
				      "balance: llm: prompt blocks of the requests sent to it",
				      NULL, BE, .json = "llm_prompt_blocks", .json_as = MJ_UINT,
				      .read = read_be_llm_prompt_blocks},
    [PM_BACKEND_LLM_MISSED_BLOCKS] = {"accelnet_backend_llm_missed_blocks_total", METRIC_COUNTER,
				      "balance: llm: ... of them not in its prefix cache as far as "
				      "we knew (1 - missed/prompt: the expected hit share)",
				      NULL, BE, .json = "llm_missed_blocks", .json_as = MJ_UINT,
				      .read = read_be_llm_missed_blocks},
    [PM_BACKEND_TTFB] = {"accelnet_backend_ttfb_seconds", METRIC_HISTOGRAM,
			 "request sent to response head (time to first token)", "seconds", BE,
			 .json = "ttfb_ms", .json_as = MJ_SUMMARY},
    [PM_BACKEND_GAP] = {"accelnet_backend_gap_seconds", METRIC_HISTOGRAM,
			"time between reads of a streamed response body", "seconds", BE,
			.json = "gap_ms", .json_as = MJ_SUMMARY},
    [PM_BACKEND_TTFT] = {"accelnet_backend_ttft_seconds", METRIC_HISTOGRAM,
			 "request sent to the first streamed token event (SSE data with text), "
			 "LLM routes",
			 "seconds", BE, .json = "ttft_ms", .json_as = MJ_SUMMARY},
    [PM_BACKEND_TOKEN_GAP] = {"accelnet_backend_token_gap_seconds", METRIC_HISTOGRAM,
			      "time between successive streamed token events, LLM routes",
			      "seconds", BE, .json = "token_gap_ms", .json_as = MJ_SUMMARY},
    [PM_BACKEND_RESPONSES] = {"accelnet_backend_responses_total", METRIC_COUNTER,
			      "responses by status class", NULL, BE, .sub_label = "class",
			      .sub_values = class_names, .nsub = PM_CLASSES, .json = "responses",
			      .json_as = MJ_UINT},
    [PM_BACKEND_TLS_FULL] = {"accelnet_backend_tls_handshakes_total", METRIC_COUNTER,
			     "full TLS handshakes with the backend (pools.tls)", NULL, BE,
			     .json = "tls_handshakes", .json_as = MJ_UINT},
    [PM_BACKEND_TLS_RESUMED] = {"accelnet_backend_tls_resumed_total", METRIC_COUNTER,
				"TLS handshakes with the backend that resumed a session", NULL, BE,
				.json = "tls_resumed", .json_as = MJ_UINT},
    [PM_BACKEND_TLS_FAILURES] = {"accelnet_backend_tls_failures_total", METRIC_COUNTER,
				 "failed TLS handshakes with the backend", NULL, BE,
				 .json = "tls_failures", .json_as = MJ_UINT},
    [PM_BACKEND_ENGINE_WAITING] = {"accelnet_backend_engine_waiting", METRIC_GAUGE,
				   "requests waiting in the engine behind the backend, by its own "
				   "metrics (pools.engine_metrics; all label sets summed)",
				   NULL, BE, .json = "engine.waiting", .json_as = MJ_UINT,
				   .read = read_be_engine_waiting},
    [PM_BACKEND_ENGINE_RUNNING] = {"accelnet_backend_engine_running", METRIC_GAUGE,
				   "requests running in the engine behind the backend, by its own "
				   "metrics (pools.engine_metrics; all label sets summed)",
				   NULL, BE, .json = "engine.running", .json_as = MJ_UINT,
				   .read = read_be_engine_running},
    [PM_BACKEND_ENGINE_KV_USAGE] = {"accelnet_backend_engine_kv_usage_ratio", METRIC_GAUGE,
				    "how full the engine's KV cache is, 0 to 1, by its own metrics "
				    "(pools.engine_metrics)",
				    "ratio", BE, .json = "engine.kv_usage", .json_as = MJ_FIXED3,
				    .read = read_be_engine_kv_usage},
    [PM_BACKEND_ENGINE_SCRAPES] = {"accelnet_backend_engine_scrapes_total", METRIC_COUNTER,
				   "scrapes of the engine's metrics that were read", NULL, BE,
				   .json = "engine.scrapes", .json_as = MJ_UINT},
    [PM_BACKEND_ENGINE_SCRAPE_FAILURES] = {"accelnet_backend_engine_scrape_failures_total",
					   METRIC_COUNTER,
					   "scrapes of the engine's metrics that failed (no "
					   "answer, not 200, too large, not Prometheus text, none "
					   "of the known gauges)",
					   NULL, BE, .json = "engine.scrape_failures",
					   .json_as = MJ_UINT},
    [PM_BACKEND_KV_EVENTS] = {"accelnet_backend_kv_events_total", METRIC_COUNTER,
			      "KV-cache events of the backend applied to its prefix index, by kind "
			      "(backends.kv_events)",
			      NULL, BE, .sub_label = "kind", .sub_values = kvevent_names,
			      .nsub = KVEVENT_KINDS, .json = "kv_events.applied",
			      .json_as = MJ_UINT},
    [PM_BACKEND_KV_GAPS] = {"accelnet_backend_kv_event_gaps_total", METRIC_COUNTER,
			    "times the backend's KV-cache events lost their thread (a sequence "
			    "gap, a reconnect): its prefix index was cleared",
			    NULL, BE, .json = "kv_events.gaps", .json_as = MJ_UINT},
    [PM_BACKEND_KV_MALFORMED] = {"accelnet_backend_kv_events_malformed_total", METRIC_COUNTER,
				 "KV-cache event messages of the backend dropped as malformed",
				 NULL, BE, .json = "kv_events.malformed", .json_as = MJ_UINT},
    [PM_BACKEND_KV_BLOCKS] = {"accelnet_backend_kv_events_blocks", METRIC_GAUGE,
			      "prompt blocks in the backend's KV cache by its KV-cache events "
			      "(backends.kv_events; 0 without)",
			      NULL, BE, .json = "kv_events.blocks", .json_as = MJ_UINT,
			      .read = read_be_kv_blocks},
    [PM_POOL_NAME] = {POOL, JSON_ONLY("name", MJ_STRING), .read_str = read_pool_name},
    [PM_POOL_BALANCE] = {POOL, JSON_ONLY("balance", MJ_STRING), .read_str = read_pool_balance},
    [PM_POOL_UNAVAILABLE] = {"accelnet_pool_unavailable_total", METRIC_COUNTER,
			     "requests turned away with no backend to serve them", NULL, POOL,
			     .json = "unavailable", .json_as = MJ_UINT},
    [PM_POOL_RETRIES_DENIED] = {"accelnet_pool_retries_denied_total", METRIC_COUNTER,
				"retries the retry budget turned down", NULL, POOL,
				.json = "retries_denied", .json_as = MJ_UINT},
    [PM_POOL_SPILLED_IN] = {"accelnet_pool_spilled_in_total", METRIC_COUNTER,
			    "requests moved here by a route's spillover", NULL, POOL,
			    .json = "spilled_in", .json_as = MJ_UINT},
    [PM_POOL_DISCOVERY_ANSWERS] = {"accelnet_pool_discovery_answers_total", METRIC_COUNTER,
				   "DNS answers applied to the pool's discovered backends "
				   "(backends.discover), empty ones included",
				   NULL, POOL, .json = "discovery.answers", .json_as = MJ_UINT},
    [PM_POOL_DISCOVERY_FAILURES] = {"accelnet_pool_discovery_failures_total", METRIC_COUNTER,
				    "resolutions of a discovered name that failed (timeout, "
				    "SERVFAIL, refused): the last answer was kept",
				    NULL, POOL, .json = "discovery.failures", .json_as = MJ_UINT},
    [PM_POOL_DISCOVERY_DROPPED] = {"accelnet_pool_discovery_dropped_total", METRIC_COUNTER,
				   "addresses in a DNS answer left out for want of a free slot "
				   "(backends.max_backends)",
				   NULL, POOL, .json = "discovery.dropped", .json_as = MJ_UINT},
    [PM_POOL_QUEUE_DISCIPLINE] = {POOL, JSON_ONLY("queue.discipline", MJ_STRING),
				  .read_str = read_pool_discipline},
    [PM_POOL_QUEUE_LENGTH] = {"accelnet_pool_queue_length", METRIC_GAUGE,
			      "requests waiting for a backend slot", NULL, POOL,
			      .json = "queue.length", .json_as = MJ_UINT,
			      .read = read_pool_queue_length},
    [PM_POOL_QUEUE_ENQUEUED] = {"accelnet_pool_queue_enqueued_total", METRIC_COUNTER,
				"requests that waited in the queue (each leaves it as granted, "
				"displaced, timed out, spilled or withdrawn)",
				NULL, POOL, .json = "queue.enqueued", .json_as = MJ_UINT},
    [PM_POOL_QUEUE_GRANTED] = {"accelnet_pool_queue_granted_total", METRIC_COUNTER,
			       "queued requests granted a backend slot", NULL, POOL,
			       .json = "queue.granted", .json_as = MJ_UINT},
    [PM_POOL_QUEUE_TIMEOUTS] = {"accelnet_pool_queue_timeouts_total", METRIC_COUNTER,
				"queued requests turned away after queue.timeout_ms", NULL, POOL,
				.json = "queue.timeouts", .json_as = MJ_UINT},
    [PM_POOL_QUEUE_OVERFLOWS] = {"accelnet_pool_queue_overflows_total", METRIC_COUNTER,
				 "requests that found the queue full (never enqueued, or taking "
				 "a displaced request's place)",
				 NULL, POOL, .json = "queue.overflows", .json_as = MJ_UINT},
    [PM_POOL_QUEUE_DISPLACED] = {"accelnet_pool_queue_displaced_total", METRIC_COUNTER,
				 "queued requests pushed out of a full queue for a request of a "
				 "tenant with fewer waiting",
				 NULL, POOL, .json = "queue.displaced", .json_as = MJ_UINT},
    [PM_POOL_QUEUE_SPILLED] = {"accelnet_pool_queue_spilled_total", METRIC_COUNTER,
			       "queued requests moved on to the route's spillover pool", NULL, POOL,
			       .json = "queue.spilled", .json_as = MJ_UINT},
    [PM_POOL_QUEUE_WITHDRAWN] = {"accelnet_pool_queue_withdrawn_total", METRIC_COUNTER,
				 "queued requests whose client went away while they waited", NULL,
				 POOL, .json = "queue.withdrawn", .json_as = MJ_UINT},
    [PM_POOL_QUEUE_WAIT] = {"accelnet_pool_queue_wait_seconds", METRIC_HISTOGRAM,
			    "time from queueing to a granted backend slot", "seconds", POOL,
			    .json = "queue.wait_ms", .json_as = MJ_SUMMARY},
    [PM_LISTENER_ADDRESS] = {LISTENER, JSON_ONLY("address", MJ_STRING),
			     .read_str = read_listen_address},
    [PM_LISTENER_SHED] = {"accelnet_listener_shed_total", METRIC_COUNTER,
			  "client connections closed as they were accepted, by the limit that "
			  "turned them away",
			  NULL, LISTENER, .sub_label = "limit", .sub_values = shed_names,
			  .nsub = SHED_REASONS, .json = "shed", .json_as = MJ_UINT},
    [PM_PROCESS_MAINTENANCE] = {"accelnet_maintenance", METRIC_GAUGE,
				"1 while the proxy is in maintenance (admin API): new requests are "
				"answered 503 with Retry-After, those in flight finish",
				NULL, .space = SPACE_PROCESS, .json = "maintenance",
				.json_as = MJ_BOOL, .read = read_maintenance},
    [PM_PROCESS_BUFFER_BYTES] = {"accelnet_buffer_bytes", METRIC_GAUGE,
				 "bytes of connection buffers lent out now, all workers "
				 "(limits.max_buffer_memory)",
				 "bytes", .space = SPACE_PROCESS, .json = "buffer_bytes",
				 .json_as = MJ_UINT, .read = read_buffer_bytes},
    [PM_PROCESS_CPU] = {"process_cpu_seconds_total", METRIC_COUNTER,
			"user and system CPU time spent, all threads", "seconds",
			.space = SPACE_PROCESS, .json = "cpu_seconds", .json_as = MJ_FIXED3,
			.read = read_cpu, .real = 1},
    [PM_PROCESS_RESIDENT] = {"process_resident_memory_bytes", METRIC_GAUGE, "resident memory size",
			     "bytes", .space = SPACE_PROCESS, .json = "resident_bytes",
			     .json_as = MJ_UINT, .read = read_resident},
    [PM_PROCESS_VIRTUAL] = {"process_virtual_memory_bytes", METRIC_GAUGE, "virtual memory size",
			    "bytes", .space = SPACE_PROCESS, .json = "virtual_bytes",
			    .json_as = MJ_UINT, .read = read_virtual},
    [PM_PROCESS_OPEN_FDS] = {"process_open_fds", METRIC_GAUGE, "open file descriptors", NULL,
			     .space = SPACE_PROCESS, .json = "open_fds", .json_as = MJ_UINT,
			     .read = read_open_fds},
    [PM_PROCESS_MAX_FDS] = {"process_max_fds", METRIC_GAUGE,
			    "most open file descriptors allowed (RLIMIT_NOFILE)", NULL,
			    .space = SPACE_PROCESS, .json = "max_fds", .json_as = MJ_UINT,
			    .read = read_max_fds},
    [PM_PROCESS_ALOG_DROPPED] = {"accelnet_access_log_dropped_total", METRIC_COUNTER,
				 "access log lines dropped: a worker's ring was full or a write "
				 "failed (access_log)",
				 NULL, .space = SPACE_PROCESS, .json = "access_log_dropped",
				 .json_as = MJ_UINT, .read = read_alog_dropped},
    [PM_PROCESS_CONFIG_GENERATION] = {"accelnet_config_generation", METRIC_GAUGE,
				      "the configuration serving new requests: 0 as started, one "
				      "more per reload (SIGHUP)",
				      NULL, .space = SPACE_PROCESS, .json = "config_generation",
				      .json_as = MJ_UINT, .read = read_config_generation},
    [PM_PROCESS_CONFIG_RELOADS] = {"accelnet_config_reloads_total", METRIC_COUNTER,
				   "reloads that put a new configuration in use", NULL,
				   .space = SPACE_PROCESS, .json = "config_reloads",
				   .json_as = MJ_UINT, .read = read_config_reloads},
    [PM_PROCESS_CONFIG_RELOAD_FAILURES] = {"accelnet_config_reload_failures_total", METRIC_COUNTER,
					   "reloads refused (a bad file: the log says where); the "
					   "running configuration stayed",
					   NULL, .space = SPACE_PROCESS,
					   .json = "config_reload_failures", .json_as = MJ_UINT,
					   .read = read_config_reload_failures},
    [PM_PROCESS_CACHE_BYTES] = {"accelnet_cache_bytes", METRIC_GAUGE,
				"bytes the response cache holds (cache.memory)", "bytes",
				.space = SPACE_PROCESS, .json = "cache_bytes", .json_as = MJ_UINT,
				.read = read_cache_bytes},
    [PM_PROCESS_CACHE_OBJECTS] = {"accelnet_cache_objects", METRIC_GAUGE,
				  "responses the cache holds (and fills under way)", NULL,
				  .space = SPACE_PROCESS, .json = "cache_objects",
				  .json_as = MJ_UINT, .read = read_cache_objects},
    [PM_PROCESS_CACHE_EVICTIONS] = {"accelnet_cache_evictions_total", METRIC_COUNTER,
				    "stored responses let go: for room (the eviction policy), "
				    "purged or invalidated, replaced by a newer copy",
				    NULL, .space = SPACE_PROCESS, .sub_label = "reason",
				    .sub_values = cache_evict_names, .nsub = CACHE_EVICT_REASONS,
				    .json = "cache_evictions", .json_as = MJ_UINT,
				    .read = read_cache_evictions},
    [PM_PROCESS_CLUSTER_UP] = {"accelnet_cluster_redis_up", METRIC_GAUGE,
			       "1 while the limits are shared through Redis (cluster), 0 while "
			       "this instance enforces them alone",
			       NULL, .space = SPACE_PROCESS, .json = "cluster_redis_up",
			       .json_as = MJ_UINT, .read = read_cluster_up},
    [PM_PROCESS_CLUSTER_INSTANCES] = {"accelnet_cluster_instances", METRIC_GAUGE,
				      "live instances sharing the limits, as Redis last "
				      "counted them",
				      NULL, .space = SPACE_PROCESS, .json = "cluster_instances",
				      .json_as = MJ_UINT, .read = read_cluster_instances},
    [PM_PROCESS_CLUSTER_SYNCS] = {"accelnet_cluster_syncs_total", METRIC_COUNTER,
				  "syncs of the shared limits with Redis that went through", NULL,
				  .space = SPACE_PROCESS, .json = "cluster_syncs",
				  .json_as = MJ_UINT, .read = read_cluster_syncs},
    [PM_PROCESS_CLUSTER_FAILED] = {"accelnet_cluster_sync_failures_total", METRIC_COUNTER,
				   "syncs or connects to Redis that failed or timed out", NULL,
				   .space = SPACE_PROCESS, .json = "cluster_sync_failures",
				   .json_as = MJ_UINT, .read = read_cluster_failed},
    [PM_PROCESS_CLUSTER_KEYS] = {"accelnet_cluster_keys_synced_total", METRIC_COUNTER,
				 "limit keys (route, limit, tenant) carried by the syncs", NULL,
				 .space = SPACE_PROCESS, .json = "cluster_keys_synced",
				 .json_as = MJ_UINT, .read = read_cluster_keys},
    [PM_PROCESS_CLUSTER_PREFIXES_SENT] = {"accelnet_cluster_prefixes_sent_total", METRIC_COUNTER,
					  "prompts' first blocks sent to the other instances "
					  "(balance: llm without kv_events)",
					  NULL, .space = SPACE_PROCESS,
					  .json = "cluster_prefixes_sent", .json_as = MJ_UINT,
					  .read = read_cluster_sent},
    [PM_PROCESS_CLUSTER_PREFIXES_RECEIVED] = {"accelnet_cluster_prefixes_received_total",
					      METRIC_COUNTER,
					      "the other instances' prompts taken into this one's "
					      "prefix indexes",
					      NULL, .space = SPACE_PROCESS,
					      .json = "cluster_prefixes_received",
					      .json_as = MJ_UINT, .read = read_cluster_received},
    [PM_PROCESS_TUNNELS_OPEN] =
	{"accelnet_tunnels_open", METRIC_GAUGE,
	 "WebSocket tunnels open now (routes.websocket, limits.max_tunnels)", NULL,
	 .space = SPACE_PROCESS, .json = "tunnels_open", .json_as = MJ_UINT, .read = read_tunnels},
    [PM_PROCESS_TUNNEL_BYTES] = {"accelnet_tunnel_bytes_total", METRIC_COUNTER,
				 "bytes relayed through WebSocket tunnels, by direction", "bytes",
				 .space = SPACE_PROCESS, .sub_label = "direction",
				 .sub_values = tunnel_way_names, .nsub = TUNNEL_WAYS,
				 .json = "tunnel_bytes", .json_as = MJ_UINT},
    [PM_PROCESS_TUNNELS_CLOSED] =
	{"accelnet_tunnels_closed_total", METRIC_COUNTER,
	 "WebSocket tunnels ended: closed by either side, idle past "
	 "timeouts.tunnel_idle_ms, cut by a drain (timeouts.tunnel_drain_ms), "
	 "or a failed read or write",
	 NULL, .space = SPACE_PROCESS, .sub_label = "reason", .sub_values = tunnel_end_names,
	 .nsub = TUNNEL_ENDS, .json = "tunnels_closed", .json_as = MJ_UINT},
    [PM_ROUTE_NAME] = {ROUTE, JSON_ONLY("name", MJ_STRING), .read_str = read_route_name},
    [PM_ROUTE_REQUESTS] = {"accelnet_route_requests_total", METRIC_COUNTER,
			   "requests by the status class the client got (aborted: cut before "
			   "the whole response)",
			   "requests", ROUTE, .sub_label = "class", .sub_values = class_names,
			   .nsub = PM_CLASSES, .json = "requests", .json_as = MJ_UINT},
    [PM_ROUTE_DURATION] = {"accelnet_route_request_duration_seconds", METRIC_HISTOGRAM,
			   "request head read to the exchange's end (a stream's last byte)",
			   "seconds", ROUTE, .json = "duration_ms", .json_as = MJ_SUMMARY},
    [PM_ROUTE_TTFT] = {"accelnet_route_ttft_seconds", METRIC_HISTOGRAM,
		       "request sent to the first streamed token event (SSE data with text)",
		       "seconds", ROUTE, .json = "ttft_ms", .json_as = MJ_SUMMARY},
    [PM_ROUTE_TOKEN_GAP] = {"accelnet_route_token_gap_seconds", METRIC_HISTOGRAM,
			    "time between successive streamed token events", "seconds", ROUTE,
			    .json = "token_gap_ms", .json_as = MJ_SUMMARY},
    [PM_ROUTE_TOKENS] = {"accelnet_route_tokens_total", METRIC_COUNTER,
			 "LLM tokens: prompt and completion from the response's usage, "
			 "completion counted from streamed events without one",
			 "tokens", ROUTE, .sub_label = "kind", .sub_values = kind_names,
			 .nsub = PM_KINDS, .json = "tokens", .json_as = MJ_UINT},
    [PM_ROUTE_CACHE] = {"accelnet_route_cache_total", METRIC_COUNTER,
			"requests by what the response cache did (Cache-Status): hit, stale, "
			"stale_if_error, collapsed (served from another request's fill), miss, "
			"revalidated, bypass, method (unsafe: invalidates), request (its "
			"Cache-Control asked for the origin), pass (not storable lately)",
			NULL, ROUTE, .sub_label = "result", .sub_values = cache_result_names,
			.nsub = CACHE_RESULTS, .json = "cache", .json_as = MJ_UINT},
    [PM_TENANT_NAME] = {TENANT, JSON_ONLY("name", MJ_STRING), .read_str = read_tenant_name},
    [PM_TENANT_REQUESTS] = {"accelnet_tenant_requests_total", METRIC_COUNTER,
			    "requests of an authenticated tenant by the status class it got "
			    "(past metrics.max_tenants: tenant other)",
			    "requests", TENANT, .sub_label = "class", .sub_values = class_names,
			    .nsub = PM_CLASSES, .json = "requests", .json_as = MJ_UINT},
    [PM_TENANT_TOKENS] = {"accelnet_tenant_tokens_total", METRIC_COUNTER,
			  "LLM tokens of an authenticated tenant, as accelnet_route_tokens_total",
			  "tokens", TENANT, .sub_label = "kind", .sub_values = kind_names,
			  .nsub = PM_KINDS, .json = "tokens", .json_as = MJ_UINT},
};

/* The label spaces of <rt>'s series, and its registry over proxy_metric_defs. */
static int runtime_create_metrics(struct runtime *rt)
{
	struct metric_space *spaces = rt->metric_spaces;
	const struct conf *conf = rt->conf;
	rt->backend_by_id = calloc(rt->nbackends + 1, sizeof(*rt->backend_by_id));
	rt->pool_labels = calloc(rt->npools + 1, sizeof(*rt->pool_labels));
	rt->backend_labels = calloc(2 * rt->nbackends + 1, sizeof(*rt->backend_labels));
	rt->backend_pool = calloc(rt->nbackends + 1, sizeof(*rt->backend_pool));
	rt->listen_labels = calloc(conf->nlistens + 1, sizeof(*rt->listen_labels));
	rt->route_labels = calloc(conf->nroutes + 1, sizeof(*rt->route_labels));
	rt->route_index = calloc(conf->nroutes + 1, sizeof(*rt->route_index));
	if (!rt->backend_by_id || !rt->pool_labels || !rt->backend_labels || !rt->backend_pool ||
	    !rt->listen_labels || !rt->route_labels || !rt->route_index ||
	    names_create(conf->metrics.max_tenants, APIKEYS_TENANT_MAX, TENANT_FOLD, &rt->tenants) <
		0)
		return -ENOMEM;
	for (size_t i = 0; i < conf->nroutes; i++) {
		snprintf(rt->route_index[i], sizeof(rt->route_index[i]), "%zu", i);
		rt->route_labels[i] =
		    conf->routes[i].name ? conf->routes[i].name : rt->route_index[i];
	}
	for (size_t i = 0; i < conf->nlistens; i++)
		rt->listen_labels[i] = conf->listens[i].address;
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		rt->pool_labels[i] = p->conf->name;
		for (size_t j = 0; j < p->nbackends; j++) {
			struct backend *b = &p->backends[j];
			rt->backend_by_id[b->id] = b;
			rt->backend_labels[2 * b->id] = p->conf->name;
			rt->backend_labels[2 * b->id + 1] = b->name;
			rt->backend_pool[b->id] = i;
		}
	}
	spaces[SPACE_BACKEND] = (struct metric_space){.json = "backends",
						      .labels = {"pool", "backend"},
						      .nlabels = 2,
						      .n = rt->nbackends,
						      .values = rt->backend_labels,
						      .parent = SPACE_POOL,
						      .parent_of = rt->backend_pool,
						      .live = be_live};
	spaces[SPACE_POOL] = (struct metric_space){.json = "pools",
						   .labels = {"pool"},
						   .nlabels = 1,
						   .n = rt->npools,
						   .values = rt->pool_labels,
						   .parent = -1};
	spaces[SPACE_LISTENER] = (struct metric_space){.json = "listeners",
						       .labels = {"listen"},
						       .nlabels = 1,
						       .n = conf->nlistens,
						       .values = rt->listen_labels,
						       .parent = -1};
	spaces[SPACE_PROCESS] = (struct metric_space){.json = "process", .n = 1, .parent = -1};
	spaces[SPACE_ROUTE] = (struct metric_space){.json = "routes",
						    .labels = {"route"},
						    .nlabels = 1,
						    .n = conf->nroutes,
						    .values = rt->route_labels,
						    .parent = -1};
	spaces[SPACE_TENANT] = (struct metric_space){.json = "tenants",
						     .labels = {"tenant"},
						     .nlabels = 1,
						     .n = names_max(rt->tenants) + 1,
						     .label = tenant_label,
						     .parent = -1};
	struct metrics_config mc = {.defs = proxy_metric_defs,
				    .ndefs = PM_COUNT,
				    .spaces = spaces,
				    .nspaces = SPACE_COUNT,
				    .nshards = conf->workers,
				    .nspare = 2 * (size_t)conf->workers + SPARE_SHARDS,
				    .ctx = rt};
	int rc = metrics_create(&mc, &rt->metrics);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < rt->npools; i++) {
		rt->pools[i].metrics = rt->metrics;
		for (size_t j = 0; j < rt->pools[i].nbackends; j++)
			rt->pools[i].backends[j].metrics = rt->metrics;
	}
	return 0;
}

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

/* p->models from its backends' models lists. 0 or -ENOMEM. */
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
 * (proxy/kvsub.c): in a pool balanced by llm, the one balancing reads (marked exact: routing
 * adds no guesses to it); elsewhere one of its own, of KV_EVENTS_INDEX_BLOCKS blocks.
 */
static int runtime_backend_engine(struct backend *b)
{
	if (!b->conf->kv_events)
		return 0;
	if (b->llm) {
		b->llm->exact = 1;
		b->kv_prefix = b->llm->prefix;
		return 0;
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
		atomic_init(&p->retry_tokens, RETRY_BUDGET_MAX);
		if (pc->tls && (rc = runtime_pool_tls(p)) < 0)
			goto fail;
		rc = -ENOMEM;
		p->backends = calloc(p->nbackends, sizeof(*p->backends));
		if (!p->backends || (pc->balance->blocks && llm_fit_new(&p->llm) < 0))
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
	if ((rc = runtime_create_metrics(rt)) < 0)
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
			free(b->share); /* NULL when a newer runtime holds it (proxy.c) */
		}
		free(rt->pools[i].backends);
		free(rt->pools[i].llm);
		models_free(&rt->pools[i].models);
		net_tls_ctx_free(rt->pools[i].tls);
		if (rt->pools[i].conf)
			pool_queue_destroy(&rt->pools[i].queue);
	}
	free(rt->pools);
	cache_store_free(rt->cache);
	metrics_destroy(rt->metrics);
	free(rt->backend_by_id);
	free(rt->pool_labels);
	free(rt->listen_labels);
	free(rt->route_labels);
	free(rt->route_index);
	names_destroy(rt->tenants);
	free(rt->backend_labels);
	free(rt->backend_pool);
	free(rt);
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
	       (!cap || atomic_load_explicit(&b->share->inflight, memory_order_relaxed) < cap);
}

void backend_mark_failed(struct backend *b, uint64_t now_ms)
{
	backend_count(b, PM_BACKEND_CONNECT_FAILURES, 1);
	atomic_store_explicit(&b->connect_failed, 1, memory_order_relaxed);
	atomic_store_explicit(&b->down_until_ms, now_ms + b->pool->fail_timeout_ms,
			      memory_order_relaxed);
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
	if (cur && sample < cur) {
		/* below the peak: move toward the sample as time passes (racing updates from
		 * other workers may be lost; each is one sample among many) */
		uint64_t at = atomic_load_explicit(&b->ewma_ms, memory_order_relaxed);
		double w = exp(-(double)(now_ms > at ? now_ms - at : 0) / p->conf->ewma_decay_ms);
		v = (uint32_t)(cur * w + sample * (1 - w));
	}
	atomic_store_explicit(&b->base_us, base ? base : 1, memory_order_relaxed);
	atomic_store_explicit(&b->ewma_us, v ? v : 1, memory_order_relaxed);
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
	const struct lb_ops *lb = p->conf->balance;
	size_t n = p->nbackends;
	ASSERT(n <= LB_MAX_BACKENDS);
	uint64_t coin = rnd ^ 0x9e3779b97f4a7c15u;
	/* the backends that serve the request's model, when the pool's backends list models */
	const uint64_t *serving = h->has_model ? models_mask(&p->models, h->model) : NULL;
	for (size_t i = 0; i < n; i++) {
		const struct backend *b = &p->backends[i];
		unsigned cap = backend_cap(b);
		unsigned inflight = atomic_load_explicit(&b->share->inflight, memory_order_relaxed);
		unsigned others = reported_load(b, now_ms); /* a peer's figure: up to UINT32_MAX */
		int usable = b != h->exclude && (!serving || models_mask_has(serving, i)) &&
			     backend_usable(b, now_ms);
		double share = usable ? slow_start_share(b, now_ms) : 0;
		if (share < 1 && rand_unit(&coin) >= share)
			usable = 0; /* ramping up: not offered to this pick */
		cand[i] = (struct lb_candidate){
		    .weight = atomic_load_explicit(&b->weight, memory_order_relaxed),
		    /* ours, and others' (saturated: a wrapped sum would look idle) */
		    .inflight = others > UINT32_MAX - inflight ? UINT32_MAX : inflight + others,
		    .slots = cap,
		    .latency_us = lb->latency ? backend_latency_us(b, now_ms) : 0,
		    .eligible = usable && (!cap || inflight < cap),
		    .busy = usable && cap && inflight >= cap,
		};
		if (lb->blocks && (cand[i].eligible || cand[i].busy))
			llm_candidate(b->llm, h->blocks, h->nblocks, &cand[i]);
	}
	struct lb_draw d = {.rnd = rnd,
			    .key = h->key,
			    .has_key = (uint8_t)h->has_key,
			    .waiting = h->waiting,
			    .blocks = h->nblocks,
			    .waited_ms = h->waited_ms,
			    .home_only = (uint8_t)h->home_only};
	for (size_t attempt = 0; attempt < n; attempt++) {
		d.ticket = atomic_fetch_add_explicit(&p->ticket, 1, memory_order_relaxed);
		int idx = lb->pick(&p->conf->lb, cand, n, &d);
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
		if (cap && before >= cap) {
			/* another worker took the last slot since we looked: pick again */
			atomic_fetch_sub_explicit(&b->share->inflight, 1, memory_order_relaxed);
			cand[idx].eligible = 0;
			cand[idx].busy = 1;
			cand[idx].inflight = cap;
			d.rnd = rand_next(&d.rnd);
			continue;
		}
		backend_count(b, PM_BACKEND_REQUESTS, 1);
		if (lb->blocks && h->work) { /* (a hedge's copy is not counted as work) */
			*h->work = llm_picked(b->llm, h->nblocks, cand[idx].hit_blocks);
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

void backend_fill(struct backend *b, const struct net_addr *a, const char *text, unsigned weight,
		  uint64_t now_ms)
{
	b->addr = *a;
	int at = (atomic_load(&b->addr_at) & 1) ^ 1;
	snprintf(b->addr_text[at], sizeof(b->addr_text[at]), "%s", text);
	atomic_store_explicit(&b->addr_at, at, memory_order_release);
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
