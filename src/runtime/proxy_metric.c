/*
 * proxy_metric.c - every metric the admin endpoint shows, declared once (proxy_metric_defs
 * below): the registry built from that table holds the counters per thread, and the table's
 * read callbacks give the live state (up, in flight, latency, queue length) at scrape time.
 * Both /metrics and /status are written from it.
 */
#include "runtime/proxy_metric.h"
#include "runtime/cluster_stats.h"
#include "runtime/llm.h"
#include "cache/store.h"
#include "core/clock.h"
#include "core/loop.h"
#include "guard/apikeys.h"
#include "obs/accesslog.h"
#include "obs/kvevent.h"
#include "obs/process.h"
#include "policy/lb.h"
#include "policy/prefix_index.h"
#include "policy/qdisc.h"
#include "runtime/tokhealth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define SPARE_SHARDS 4 /* beyond two per worker: main thread, health checks, helpers */

static const char *const class_names[PM_CLASSES] = {"aborted", "1xx", "2xx", "3xx", "4xx", "5xx"};

static const char *const kind_names[PM_KINDS] = {"prompt", "completion"};

#define WHY_NAME(name, text) [LB_WHY_##name] = text,
static const char *const why_names[LB_WHYS] = {LB_WHY_LIST(WHY_NAME)};
#undef WHY_NAME

static const char *const kvevent_names[KVEVENT_KINDS] = {
    [KVEVENT_STORED] = "stored", [KVEVENT_REMOVED] = "removed", [KVEVENT_CLEARED] = "cleared"};

#define KV_REPLAY_NAME(name, label, text) [KV_REPLAY_##name] = label,
static const char *const kv_replay_names[KV_REPLAY_OUTCOMES] = {KV_REPLAY_LIST(KV_REPLAY_NAME)};
#undef KV_REPLAY_NAME

#define PD_FAIL_NAME(name, label, text) [PD_FAIL_##name] = label,
static const char *const pd_fail_names[PD_FAILS] = {PD_FAIL_LIST(PD_FAIL_NAME)};
#undef PD_FAIL_NAME

#define TOK_KEYED_NAME(name, label) [TOK_KEYED_##name] = label,
static const char *const tok_keyed_names[TOK_KEYEDS] = {TOK_KEYED_LIST(TOK_KEYED_NAME)};
#undef TOK_KEYED_NAME

#define H2_DEFENCE_NAME(name, label) [H2_DEFENCE_##name] = label,
static const char *const h2_defence_names[H2_DEFENCES] = {H2_DEFENCE_LIST(H2_DEFENCE_NAME)};
#define CLIENT_PROTO_NAME(name, label) [CLIENT_PROTO_##name] = label,
const char *const client_proto_names[CLIENT_PROTOS] = {CLIENT_PROTO_LIST(CLIENT_PROTO_NAME)};
#undef H2_DEFENCE_NAME

#define TENANT_FOLD "other" /* the tenant series past metrics.max_tenants */

enum {
	SPACE_BACKEND,
	SPACE_POOL,
	SPACE_LISTENER,
	SPACE_PROCESS,
	SPACE_ROUTE,
	SPACE_TENANT,
	SPACE_MODEL,
	SPACE_TOKMODEL,
	SPACE_COUNT
};
_Static_assert(sizeof(((struct runtime *)0)->metric_spaces) ==
		   SPACE_COUNT * sizeof(struct metric_space),
	       "a metric space for each SPACE_*");

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

static double read_be_kv_pending(const void *ctx, size_t i)
{
	const struct backend *b = be_at(ctx, i);
	return b->llm && b->llm->pending && b->kv_prefix == b->llm->prefix
		   ? (double)prefix_pending_count(b->llm->pending, clock_now_ms())
		   : 0;
}

static double read_be_kv_next_seq(const void *ctx, size_t i)
{
	const struct backend *b = be_at(ctx, i);
	return (double)atomic_load_explicit(&b->kv_next_seq, memory_order_relaxed);
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

/* 1 for the back end the event loops run on (series i: loop_backend_names[1 + i]) */
static double read_event_loop(const void *ctx, size_t i)
{
	(void)ctx;
	const char *in_use = loop_backend_in_use();
	return in_use && !strcmp(in_use, loop_backend_names[1 + i]);
}

static double read_alog_dropped(const void *ctx, size_t i)
{
	const struct runtime *rt = ctx;
	(void)i;
	return (double)accesslog_dropped(rt->alog);
}

static const char *const tunnel_way_names[TUNNEL_WAYS] = {"to_backend", "to_client"};
static const char *const l4_way_names[L4_WAYS] = {"to_backend", "to_client"};
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
	case PM_PROCESS_CLUSTER_SESSIONS_SENT:
		return (double)atomic_load(&st->sessions_sent);
	case PM_PROCESS_CLUSTER_SESSIONS_RECEIVED:
		return (double)atomic_load(&st->sessions_received);
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

static double read_cluster_sessions_sent(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_SESSIONS_SENT);
}

static double read_cluster_sessions_received(const void *ctx, size_t i)
{
	(void)i;
	return read_cluster(ctx, PM_PROCESS_CLUSTER_SESSIONS_RECEIVED);
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
	return pool_queue_len(&pool_at(ctx, i)->queue);
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

static const char *model_label(const void *ctx, size_t i, size_t k)
{
	(void)k;
	return ((const struct runtime *)ctx)->conf->prices[i].model;
}

static const char *read_model_name(const void *ctx, size_t i)
{
	return model_label(ctx, i, 0);
}

static const struct tokhealth *tokhealth_at(const void *ctx, size_t i)
{
	return &((const struct runtime *)ctx)->tokhealth[i];
}

static const char *read_tokmodel_name(const void *ctx, size_t i)
{
	return ((const struct runtime *)ctx)->tokmodel_labels[i];
}

static const char *read_tokmodel_tokenizer(const void *ctx, size_t i)
{
	return tokhealth_state_name(tokhealth_state(tokhealth_at(ctx, i)));
}

static double read_tokmodel_up(const void *ctx, size_t i)
{
	return tokhealth_state(tokhealth_at(ctx, i)) != TOKHEALTH_FAILING;
}

static double read_tokmodel_degraded(const void *ctx, size_t i)
{
	return tokhealth_at(ctx, i)->degraded;
}

static double read_tokmodel_window_tried(const void *ctx, size_t i)
{
	return RELAXED(tokhealth_at(ctx, i)->win_tried);
}

static double read_tokmodel_window_failed(const void *ctx, size_t i)
{
	return RELAXED(tokhealth_at(ctx, i)->win_failed);
}

#define BE .space = SPACE_BACKEND
#define ROUTE .space = SPACE_ROUTE
#define TENANT .space = SPACE_TENANT
#define MODEL .space = SPACE_MODEL
#define TOKMODEL .space = SPACE_TOKMODEL
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
    [PM_BACKEND_LLM_PREDICT_DECISIONS] = {"accelnet_llm_predict_decisions_total", METRIC_COUNTER,
					  "balance: llm: decisions that sent a request to the "
					  "backend, by why it won",
					  NULL, BE, .sub_label = "reason", .sub_values = why_names,
					  .nsub = LB_WHYS},
    [PM_BACKEND_LLM_PREDICT_TTFT] = {"accelnet_llm_predict_ttft_seconds", METRIC_HISTOGRAM,
				     "balance: llm: the time to first token it expected of the "
				     "backend, for each answer whose first body byte came",
				     "seconds", BE},
    [PM_BACKEND_LLM_PREDICT_MEASURED_TTFT] = {"accelnet_llm_predict_measured_ttft_seconds",
					      METRIC_HISTOGRAM,
					      "balance: llm: ... and the time it took: request "
					      "sent to the response body's first byte",
					      "seconds", BE},
    [PM_BACKEND_LLM_PREDICT_TTFT_ERROR] = {"accelnet_llm_predict_ttft_error_seconds",
					   METRIC_HISTOGRAM,
					   "balance: llm: how far apart the two were, either way",
					   "seconds", BE},
    [PM_BACKEND_LLM_PREDICT_REPORTS] =
	{"accelnet_llm_predict_reports_total", METRIC_COUNTER,
	 "balance: llm: answers whose usage reported the engine's "
	 "cached prompt tokens (prompt_tokens_details.cached_tokens)",
	 NULL, BE},
    [PM_BACKEND_LLM_PREDICT_HIT_BLOCKS] = {"accelnet_llm_predict_hit_blocks_total", METRIC_COUNTER,
					   "balance: llm: prompt blocks it expected the backend's "
					   "cache to hold, over those answers",
					   NULL, BE},
    [PM_BACKEND_LLM_PREDICT_REPORTED_BLOCKS] = {"accelnet_llm_predict_reported_hit_blocks_total",
						METRIC_COUNTER,
						"balance: llm: ... and the blocks the engine "
						"reported cached (cached_tokens x 4 bytes / "
						"llm.block_bytes)",
						NULL, BE},
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
    [PM_BACKEND_L4_CONNECTIONS] = {"accelnet_backend_l4_connections_total", METRIC_COUNTER,
				   "listen[].mode: tcp connections relayed to the backend", NULL,
				   BE, .json = "l4_connections", .json_as = MJ_UINT},
    [PM_BACKEND_L4_BYTES] = {"accelnet_backend_l4_bytes_total", METRIC_COUNTER,
			     "bytes relayed through listen[].mode: tcp connections, by direction",
			     "bytes", BE, .sub_label = "direction", .sub_values = l4_way_names,
			     .nsub = L4_WAYS, .json = "l4_bytes", .json_as = MJ_UINT},
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
    [PM_BACKEND_KV_PENDING] = {"accelnet_backend_kv_events_pending", METRIC_GAUGE,
			       "prompt blocks balance: llm sent to the backend that its KV-cache "
			       "events have not confirmed yet, counted as held for a few seconds "
			       "(backends.kv_events; 0 without)",
			       NULL, BE, .json = "kv_events.pending", .json_as = MJ_UINT,
			       .read = read_be_kv_pending},
    [PM_BACKEND_KV_NEXT_SEQ] = {"accelnet_backend_kv_events_next_seq", METRIC_GAUGE,
				"the sequence number the backend's next KV-event batch should "
				"carry: one past the last batch applied whole (0 before the "
				"first); the engine's own count caught up with it means the "
				"index has seen all it said",
				NULL, BE, .json = "kv_events.next_seq", .json_as = MJ_UINT,
				.read = read_be_kv_next_seq},
    [PM_BACKEND_KV_REPLAYS] = {"accelnet_backend_kv_event_replays_total", METRIC_COUNTER,
			       "replays the backend's engine was asked for after a gap in its "
			       "KV-cache events (backends.kv_events_replay), by outcome: filled "
			       "(the index kept), else it was cleared",
			       NULL, BE, .sub_label = "outcome", .sub_values = kv_replay_names,
			       .nsub = KV_REPLAY_OUTCOMES, .json = "kv_events.replays",
			       .json_as = MJ_UINT},
    [PM_POOL_NAME] = {POOL, JSON_ONLY("name", MJ_STRING), .read_str = read_pool_name},
    [PM_POOL_BALANCE] = {POOL, JSON_ONLY("balance", MJ_STRING), .read_str = read_pool_balance},
    [PM_POOL_UNAVAILABLE] = {"accelnet_pool_unavailable_total", METRIC_COUNTER,
			     "requests turned away with no backend to serve them", NULL, POOL,
			     .json = "unavailable", .json_as = MJ_UINT},
    [PM_POOL_RETRIES_DENIED] = {"accelnet_pool_retries_denied_total", METRIC_COUNTER,
				"retries the retry budget turned down", NULL, POOL,
				.json = "retries_denied", .json_as = MJ_UINT},
    [PM_POOL_SESSION_HITS] = {"accelnet_pool_session_hits_total", METRIC_COUNTER,
			      "requests sent to their conversation's backend (pools.session)", NULL,
			      POOL, .json = "session_hits", .json_as = MJ_UINT},
    [PM_POOL_SESSION_MOVES] = {"accelnet_pool_session_moves_total", METRIC_COUNTER,
			       "requests whose conversation's backend could not take them, "
			       "sent elsewhere (the conversation moves)",
			       NULL, POOL, .json = "session_moves", .json_as = MJ_UINT},
    [PM_POOL_SPILLED_IN] = {"accelnet_pool_spilled_in_total", METRIC_COUNTER,
			    "requests moved here by a route's spillover", NULL, POOL,
			    .json = "spilled_in", .json_as = MJ_UINT},
    [PM_POOL_PD_PREFILLS] = {"accelnet_pool_pd_prefills_total", METRIC_COUNTER,
			     "prefill attempts of the pool's requests on its prefill pool "
			     "(pools.disaggregation), retries included",
			     NULL, POOL, .json = "pd.prefills", .json_as = MJ_UINT},
    [PM_POOL_PD_PREFILL_FAILURES] = {"accelnet_pool_pd_prefill_failures_total", METRIC_COUNTER,
				     "prefill attempts that failed, by reason", NULL, POOL,
				     .sub_label = "reason", .sub_values = pd_fail_names,
				     .nsub = PD_FAILS, .json = "pd.prefill_failures",
				     .json_as = MJ_UINT},
    [PM_POOL_PD_RETRIES] = {"accelnet_pool_pd_retries_total", METRIC_COUNTER,
			    "failed prefills tried again on another prefill backend", NULL, POOL,
			    .json = "pd.retries", .json_as = MJ_UINT},
    [PM_POOL_PD_FALLBACKS] = {"accelnet_pool_pd_fallbacks_total", METRIC_COUNTER,
			      "requests whose prefill failed for good, decoded in place "
			      "(on_prefill_failure: decode_only)",
			      NULL, POOL, .json = "pd.fallbacks", .json_as = MJ_UINT},
    [PM_POOL_PD_SKIPPED] = {"accelnet_pool_pd_skipped_total", METRIC_COUNTER,
			    "requests shorter than min_prompt_bytes, decoded in place without a "
			    "prefill",
			    NULL, POOL, .json = "pd.skipped", .json_as = MJ_UINT},
    [PM_POOL_PD_KV_PARAMS] = {"accelnet_pool_pd_kv_params_total", METRIC_COUNTER,
			      "decode requests sent with the KV-transfer parameters of their "
			      "prefill (vllm: kv_transfer_params; sglang: bootstrap_*)",
			      NULL, POOL, .json = "pd.kv_params", .json_as = MJ_UINT},
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
    [PM_PROCESS_EVENT_LOOP] = {"accelnet_event_loop", METRIC_GAUGE,
			       "1 for the back end the event loops run on (tune.io)", NULL,
			       .space = SPACE_PROCESS, .sub_label = "backend",
			       .sub_values = loop_backend_names + 1,
			       .nsub = LOOP_BACKEND_CHOICES - 1, .json = "event_loop",
			       .json_as = MJ_UINT, .read = read_event_loop},
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
    [PM_PROCESS_CLUSTER_SESSIONS_SENT] = {"accelnet_cluster_sessions_sent_total", METRIC_COUNTER,
					  "sessions (pools.session) sent to the other instances",
					  NULL, .space = SPACE_PROCESS,
					  .json = "cluster_sessions_sent", .json_as = MJ_UINT,
					  .read = read_cluster_sessions_sent},
    [PM_PROCESS_CLUSTER_SESSIONS_RECEIVED] = {"accelnet_cluster_sessions_received_total",
					      METRIC_COUNTER,
					      "the other instances' sessions taken into this one's "
					      "tables",
					      NULL, .space = SPACE_PROCESS,
					      .json = "cluster_sessions_received",
					      .json_as = MJ_UINT,
					      .read = read_cluster_sessions_received},
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
    [PM_PROCESS_SPLICED_BYTES] = {"accelnet_spliced_bytes_total", METRIC_COUNTER,
				  "response body bytes relayed by splice(2), never copied "
				  "through the proxy's buffers (tune.splice)",
				  "bytes", .space = SPACE_PROCESS, .json = "spliced_bytes",
				  .json_as = MJ_UINT},
    [PM_PROCESS_H2_DEFENCES] = {"accelnet_http2_defences_total", METRIC_COUNTER,
				"times an HTTP/2 defence acted: a connection ended with GOAWAY "
				"ENHANCE_YOUR_CALM (rapid_reset, control_flood, "
				"continuation_flood), a header list refused 431 (header_list), a "
				"stream cut for a client that took none of its response "
				"(slow_reader), a connection sent GOAWAY as its stream ids ran out "
				"(stream_ids)",
				NULL, .space = SPACE_PROCESS, .sub_label = "defence",
				.sub_values = h2_defence_names, .nsub = H2_DEFENCES,
				.json = "http2_defences", .json_as = MJ_UINT},
    [PM_PROCESS_CLIENT_REQUESTS] = {"accelnet_client_requests_total", METRIC_COUNTER,
				    "requests by the protocol the client spoke (HTTP/1.0, "
				    "HTTP/1.1, HTTP/2): the protocol mix",
				    "requests", .space = SPACE_PROCESS, .sub_label = "protocol",
				    .sub_values = client_proto_names, .nsub = CLIENT_PROTOS,
				    .json = "client_requests", .json_as = MJ_UINT},
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
    [PM_ROUTE_SPEND] = {"accelnet_route_spend_micros_total", METRIC_COUNTER,
			"what the route's requests cost at the configured prices (routes with a "
			"budget), in millionths of the prices' currency",
			"micros", ROUTE},
    [PM_ROUTE_BUDGET_FULL] = {"accelnet_route_budget_full_total", METRIC_COUNTER,
			      "requests refused 503 because the route's budget table had no slot "
			      "left for their tenant in this window",
			      NULL, ROUTE},
    [PM_ROUTE_BUDGET_CUT] = {"accelnet_route_budget_cut_total", METRIC_COUNTER,
			     "responses ended early because they outgrew their reservation and "
			     "their tenant's budget could not cover more",
			     NULL, ROUTE},
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
    [PM_TENANT_SPEND] = {"accelnet_tenant_spend_micros_total", METRIC_COUNTER,
			 "what an authenticated tenant's requests on routes with a budget cost at "
			 "the configured prices, in millionths of the prices' currency",
			 "micros", TENANT},
    [PM_MODEL_NAME] = {MODEL, JSON_ONLY("name", MJ_STRING), .read_str = read_model_name},
    [PM_MODEL_SPEND] = {"accelnet_model_spend_micros_total", METRIC_COUNTER,
			"what requests for a priced model on routes with a budget cost, in "
			"millionths of the prices' currency",
			"micros", MODEL, .json = "spend_micros", .json_as = MJ_UINT},
    [PM_TOKMODEL_NAME] = {TOKMODEL, JSON_ONLY("name", MJ_STRING), .read_str = read_tokmodel_name},
    [PM_TOKMODEL_TOKENIZER] = {TOKMODEL, JSON_ONLY("tokenizer", MJ_STRING),
			       .read_str = read_tokmodel_tokenizer},
    [PM_TOKMODEL_TOKENIZER_UP] =
	{"accelnet_model_tokenizer_up", METRIC_GAUGE,
	 "1 while the model's tokenizer works (degraded included), 0 while "
	 "it is failing: most of the prompts it was asked to encode in the "
	 "last 10 s failed (GET /readyz answers 503)",
	 NULL, TOKMODEL, .json = "tokenizer_up", .json_as = MJ_BOOL, .read = read_tokmodel_up},
    [PM_TOKMODEL_DEGRADED] = {"accelnet_model_tokenizer_degraded", METRIC_GAUGE,
			      "1 when the model has no chat format (its chat template is one "
			      "accelnet does not know, or it has none): its chat requests are "
			      "keyed on text, not tokens",
			      NULL, TOKMODEL, .json = "tokenizer_degraded", .json_as = MJ_BOOL,
			      .read = read_tokmodel_degraded},
    [PM_TOKMODEL_WINDOW_TRIED] = {TOKMODEL, JSON_ONLY("window.tried", MJ_UINT),
				  .read = read_tokmodel_window_tried},
    [PM_TOKMODEL_WINDOW_FAILED] = {TOKMODEL, JSON_ONLY("window.failed", MJ_UINT),
				   .read = read_tokmodel_window_failed},
    [PM_TOKMODEL_PROMPTS] =
	{"accelnet_model_prompts_total", METRIC_COUNTER,
	 "prompts of a model with a tokenizer by how balance: llm keyed them: "
	 "tokens, else on the text's bytes because the model has no chat format "
	 "(template_unknown), the chat format does not take the messages "
	 "(content_unsupported), the prompt is not one text or one list of ids "
	 "(prompt_unsupported), or the tokenizer failed on it (encode_failed)",
	 "prompts", TOKMODEL, .sub_label = "keyed", .sub_values = tok_keyed_names,
	 .nsub = TOK_KEYEDS, .json = "prompts", .json_as = MJ_UINT},
};

/* The label spaces of <rt>'s series, and its registry over proxy_metric_defs. */
int proxy_metric_create(struct runtime *rt)
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
	rt->tokmodel_labels = calloc(conf->ntokmodels + 1, sizeof(*rt->tokmodel_labels));
	if (!rt->tokmodel_labels || !rt->backend_by_id || !rt->pool_labels || !rt->backend_labels ||
	    !rt->backend_pool || !rt->listen_labels || !rt->route_labels || !rt->route_index ||
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
	for (size_t i = 0; i < conf->ntokmodels; i++)
		rt->tokmodel_labels[i] = conf->tokmodels[i].name;
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
	spaces[SPACE_MODEL] = (struct metric_space){.json = "priced_models",
						    .labels = {"model"},
						    .nlabels = 1,
						    .n = conf->nprices,
						    .label = model_label,
						    .parent = -1};
	spaces[SPACE_TOKMODEL] = (struct metric_space){.json = "models",
						       .labels = {"model"},
						       .nlabels = 1,
						       .n = conf->ntokmodels,
						       .values = rt->tokmodel_labels,
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

void proxy_metric_destroy(struct runtime *rt)
{
	metrics_destroy(rt->metrics);
	free(rt->backend_by_id);
	free(rt->pool_labels);
	free(rt->listen_labels);
	free(rt->route_labels);
	free(rt->route_index);
	free(rt->tokmodel_labels);
	names_destroy(rt->tenants);
	free(rt->backend_labels);
	free(rt->backend_pool);
}
