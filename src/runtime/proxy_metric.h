/*
 * proxy_metric.h - every metric of the proxy, declared once: enum proxy_metric names them in
 * the order /metrics and /status show them, and proxy_metric.c's table says what each is
 * (obs/metrics.h). Counters live in the registry's per-thread shards (bump them with
 * backend_count(), pool_count() below, or metrics_add(metrics_shard_self(rt->metrics),
 * PM_..., series, n)); gauges are read from the runtime's atomics at scrape time. A
 * backend's series is its id; a pool's, its index; a response's, backend id * PM_CLASSES +
 * status class; a route's, its index in conf->routes; a tenant's, what
 * names_intern(rt->tenants, ...) answers; a model with a tokenizer's, its index in
 * conf->tokmodels (times TOK_KEYEDS, plus how its prompt was keyed). No counter here is a shared
 * atomic: each worker bumps its own shard, summed when scraped.
 */
#ifndef ACCELNET_RUNTIME_PROXY_METRIC_H
#define ACCELNET_RUNTIME_PROXY_METRIC_H

#include "obs/metrics.h"
#include "runtime/pool.h"

#include <stdint.h>

/* The proxy's metrics, in the order /metrics and /status show them. */
enum proxy_metric {
	/* per backend */
	PM_BACKEND_ADDRESS,
	PM_BACKEND_SOURCE,
	PM_BACKEND_STATE_NAME,
	PM_BACKEND_WEIGHT,
	PM_BACKEND_STATE,
	PM_BACKEND_PRESENT,
	PM_BACKEND_UP,
	PM_BACKEND_ELIGIBLE,
	PM_BACKEND_EJECTED,
	PM_BACKEND_INFLIGHT,
	PM_BACKEND_MAX_CONCURRENCY,
	PM_BACKEND_LATENCY,
	PM_BACKEND_REQUESTS,
	PM_BACKEND_CONNECT_FAILURES,
	PM_BACKEND_RETRIES,
	PM_BACKEND_EJECTIONS,
	PM_BACKEND_REPORTED_LOAD,
	PM_BACKEND_HEDGED,
	PM_BACKEND_HEDGE_WINS,
	PM_BACKEND_TTFB,
	PM_BACKEND_GAP,
	PM_BACKEND_TTFT,
	PM_BACKEND_TOKEN_GAP,
	PM_BACKEND_LLM_BASE,
	PM_BACKEND_LLM_BLOCK,
	PM_BACKEND_LLM_WORK,
	PM_BACKEND_LLM_INDEX,
	PM_BACKEND_LLM_PROMPT_BLOCKS,
	PM_BACKEND_LLM_MISSED_BLOCKS,
	/* per backend: balance: llm's predictions against what happened (proxy/llm_explain.c) */
	PM_BACKEND_LLM_PREDICT_DECISIONS, /* series: backend id * LB_WHYS + enum lb_why */
	PM_BACKEND_LLM_PREDICT_TTFT,
	PM_BACKEND_LLM_PREDICT_MEASURED_TTFT,
	PM_BACKEND_LLM_PREDICT_TTFT_ERROR,
	PM_BACKEND_LLM_PREDICT_REPORTS,
	PM_BACKEND_LLM_PREDICT_HIT_BLOCKS,
	PM_BACKEND_LLM_PREDICT_REPORTED_BLOCKS,
	PM_BACKEND_RESPONSES, /* series: backend id * PM_CLASSES + class */
	PM_BACKEND_TLS_FULL,
	PM_BACKEND_TLS_RESUMED,
	PM_BACKEND_TLS_FAILURES,
	PM_BACKEND_L4_CONNECTIONS, /* listen[].mode: tcp (proxy/l4.h) */
	PM_BACKEND_L4_BYTES,	   /* series: backend id * L4_WAYS + enum l4_way */
	/* per backend: what the engine behind it says (control/scrape.c, control/kvsub.c) */
	PM_BACKEND_ENGINE_WAITING,
	PM_BACKEND_ENGINE_RUNNING,
	PM_BACKEND_ENGINE_KV_USAGE,
	PM_BACKEND_ENGINE_SCRAPES,
	PM_BACKEND_ENGINE_SCRAPE_FAILURES,
	PM_BACKEND_KV_EVENTS, /* series: backend id * KVEVENT_KINDS + enum kvevent_kind */
	PM_BACKEND_KV_GAPS,
	PM_BACKEND_KV_MALFORMED,
	PM_BACKEND_KV_BLOCKS,
	PM_BACKEND_KV_PENDING,
	PM_BACKEND_KV_NEXT_SEQ,
	PM_BACKEND_KV_REPLAYS, /* series: backend id * KV_REPLAY_OUTCOMES + enum kv_replay */
	/* per pool */
	PM_POOL_NAME,
	PM_POOL_BALANCE,
	PM_POOL_UNAVAILABLE,
	PM_POOL_RETRIES_DENIED,
	PM_POOL_SPILLED_IN,
	PM_POOL_SESSION_HITS, /* pools[].session (runtime/pick.c) */
	PM_POOL_SESSION_MOVES,
	PM_POOL_PD_PREFILLS,	     /* pools[].disaggregation, on the decode pool (proxy/pd.c) */
	PM_POOL_PD_PREFILL_FAILURES, /* series: pool index * PD_FAILS + enum pd_fail */
	PM_POOL_PD_RETRIES,
	PM_POOL_PD_FALLBACKS,
	PM_POOL_PD_SKIPPED,
	PM_POOL_PD_KV_PARAMS,
	PM_POOL_DISCOVERY_ANSWERS, /* backends[].discover (control/discover.c) */
	PM_POOL_DISCOVERY_FAILURES,
	PM_POOL_DISCOVERY_DROPPED,
	PM_POOL_QUEUE_DISCIPLINE,
	PM_POOL_QUEUE_LENGTH,
	PM_POOL_QUEUE_ENQUEUED,
	PM_POOL_QUEUE_GRANTED,
	PM_POOL_QUEUE_TIMEOUTS,
	PM_POOL_QUEUE_OVERFLOWS,
	PM_POOL_QUEUE_DISPLACED,
	PM_POOL_QUEUE_SPILLED,
	PM_POOL_QUEUE_WITHDRAWN,
	PM_POOL_QUEUE_WAIT,
	/* per listener */
	PM_LISTENER_ADDRESS,
	PM_LISTENER_SHED, /* series: listener index * SHED_REASONS + enum shed_reason */
	/* the process (one series) */
	PM_PROCESS_MAINTENANCE,
	PM_PROCESS_BUFFER_BYTES,
	PM_PROCESS_CPU,
	PM_PROCESS_RESIDENT,
	PM_PROCESS_VIRTUAL,
	PM_PROCESS_OPEN_FDS,
	PM_PROCESS_MAX_FDS,
	PM_PROCESS_EVENT_LOOP, /* series: epoll, io_uring (core/loop.h's names after "auto") */
	PM_PROCESS_ALOG_DROPPED,
	PM_PROCESS_CONFIG_GENERATION,
	PM_PROCESS_CONFIG_RELOADS,
	PM_PROCESS_CONFIG_RELOAD_FAILURES,
	PM_PROCESS_CACHE_BYTES,
	PM_PROCESS_CACHE_OBJECTS,
	PM_PROCESS_CACHE_EVICTIONS, /* series: enum cache_evict_reason */
	PM_PROCESS_CLUSTER_UP,	    /* cluster: (control/cluster.h) */
	PM_PROCESS_CLUSTER_INSTANCES,
	PM_PROCESS_CLUSTER_SYNCS,
	PM_PROCESS_CLUSTER_FAILED,
	PM_PROCESS_CLUSTER_KEYS,
	PM_PROCESS_CLUSTER_PREFIXES_SENT,
	PM_PROCESS_CLUSTER_PREFIXES_RECEIVED,
	PM_PROCESS_CLUSTER_SESSIONS_SENT,
	PM_PROCESS_CLUSTER_SESSIONS_RECEIVED,
	PM_PROCESS_TUNNELS_OPEN,    /* WebSocket tunnels (proxy/tunnel.h) */
	PM_PROCESS_TUNNEL_BYTES,    /* series: enum tunnel_way */
	PM_PROCESS_TUNNELS_CLOSED,  /* series: enum tunnel_end */
	PM_PROCESS_SPLICED_BYTES,   /* response body bytes moved by splice (proxy/splice_body.h) */
	PM_PROCESS_H2_DEFENCES,	    /* series: enum h2_defence (proxy/h2.c) */
	PM_PROCESS_CLIENT_REQUESTS, /* series: enum client_proto (proxy/exchange.c) */
	/* per route (proxy/tally.c) */
	PM_ROUTE_NAME,
	PM_ROUTE_REQUESTS, /* series: route index * PM_CLASSES + class */
	PM_ROUTE_DURATION,
	PM_ROUTE_TTFT,
	PM_ROUTE_TOKEN_GAP,
	PM_ROUTE_TOKENS, /* series: route index * PM_KINDS + enum token_kind */
	PM_ROUTE_CACHE,	 /* series: route index * CACHE_RESULTS + what Cache-Status said - 1 */
	PM_ROUTE_SPEND,	 /* micro-units at prices: (proxy/spend.c) */
	/* requests refused for want of a budget slot, streams the budget ended (proxy/spend.c) */
	PM_ROUTE_BUDGET_FULL,
	PM_ROUTE_BUDGET_CUT,
	/* per tenant: series from rt->tenants (obs/names.h), the last one "other" */
	PM_TENANT_NAME,
	PM_TENANT_REQUESTS, /* series: tenant * PM_CLASSES + class */
	PM_TENANT_TOKENS,   /* series: tenant * PM_KINDS + enum token_kind */
	PM_TENANT_SPEND,    /* micro-units (proxy/spend.c) */
	/* per priced model: series conf->prices' index (proxy/spend.c) */
	PM_MODEL_NAME,
	PM_MODEL_SPEND, /* micro-units */
	/* per model with a tokenizer (models:): series its index in conf->tokmodels */
	PM_TOKMODEL_NAME,
	PM_TOKMODEL_TOKENIZER,	   /* "up", "degraded", "failing" (runtime/tokhealth.h) */
	PM_TOKMODEL_TOKENIZER_UP,  /* 1 up or degraded, 0 failing */
	PM_TOKMODEL_DEGRADED,	   /* 1: its chats are keyed on text */
	PM_TOKMODEL_WINDOW_TRIED,  /* /status: the prompts of tokhealth's last window ... */
	PM_TOKMODEL_WINDOW_FAILED, /* ... and those of them that failed */
	PM_TOKMODEL_PROMPTS,	   /* series: model index * TOK_KEYEDS + enum tok_keyed */
	PM_COUNT
};

/* What the cache did for a request (proxy/caching.h enum cache_said, less "none"), and why
 * it let stored objects go. */
#define CACHE_RESULTS 10
enum cache_evict_reason {
	CACHE_EVICT_SPACE,
	CACHE_EVICT_PURGE,
	CACHE_EVICT_REPLACED,
	CACHE_EVICT_REASONS
};

/* The tokens of an LLM response, by kind. */
/* A tunnel's two ways, and why tunnels end (proxy/tunnel.h). */
enum tunnel_way { TUNNEL_TO_BACKEND, TUNNEL_TO_CLIENT, TUNNEL_WAYS };
/* PM_BACKEND_L4_BYTES: which way an L4 connection's bytes went (proxy/l4.h). */
enum l4_way { L4_TO_BACKEND, L4_TO_CLIENT, L4_WAYS };
enum tunnel_end {
	TUNNEL_END_CLOSED,
	TUNNEL_END_IDLE,
	TUNNEL_END_DRAIN,
	TUNNEL_END_ERROR,
	TUNNEL_ENDS
};

enum token_kind { TOKENS_PROMPT, TOKENS_COMPLETION, PM_KINDS };

/* What an HTTP/2 defence acted against (proxy/h2.c): the label value. */
#define H2_DEFENCE_LIST(X)                                                                         \
	X(RAPID_RESET, "rapid_reset")                                                              \
	X(CONTROL_FLOOD, "control_flood")                                                          \
	X(CONTINUATION_FLOOD, "continuation_flood")                                                \
	X(HEADER_LIST, "header_list")                                                              \
	X(SLOW_READER, "slow_reader")                                                              \
	X(STREAM_IDS, "stream_ids")
#define H2_DEFENCE_ENUM(name, label) H2_DEFENCE_##name,
enum h2_defence { H2_DEFENCE_LIST(H2_DEFENCE_ENUM) H2_DEFENCES };
#undef H2_DEFENCE_ENUM

/* The protocol a client's request came in (proxy/exchange.h): the label value. */
#define CLIENT_PROTO_LIST(X) X(HTTP10, "HTTP/1.0") X(HTTP11, "HTTP/1.1") X(HTTP2, "HTTP/2")
#define CLIENT_PROTO_ENUM(name, label) CLIENT_PROTO_##name,
enum client_proto { CLIENT_PROTO_LIST(CLIENT_PROTO_ENUM) CLIENT_PROTOS };
#undef CLIENT_PROTO_ENUM
extern const char *const client_proto_names[CLIENT_PROTOS];

/* Why a new client connection was closed as it was accepted (proxy/shed.h). */
enum shed_reason {
	SHED_PER_IP,	  /* limits.max_connections_per_ip */
	SHED_ACCEPT_RATE, /* limits.accept_rate_per_ip */
	SHED_MEMORY,	  /* limits.max_buffer_memory */
	SHED_REASONS
};

/* Why a prefill attempt failed (proxy/pd.c): the label value and the log's words. */
#define PD_FAIL_LIST(X)                                                                            \
	X(NO_BACKEND, "no_backend", "no backend free")                                             \
	X(CONNECT, "connect", "connect failed")                                                    \
	X(RESET, "reset", "reset")                                                                 \
	X(CLOSED, "closed", "closed the connection")                                               \
	X(STATUS, "status", "answered no 200")                                                     \
	X(MALFORMED, "malformed", "a malformed answer")                                            \
	X(NO_PARAMS, "no_params", "answered no kv_transfer_params the decode body can take")       \
	X(CONNECT_TIMEOUT, "connect_timeout", "not connected and sent within timeouts.connect_ms") \
	X(TIMEOUT, "timeout", "no answer within timeouts.first_byte_ms")
#define PD_FAIL_ENUM(name, label, text) PD_FAIL_##name,
enum pd_fail { PD_FAIL_LIST(PD_FAIL_ENUM) PD_FAILS };
#undef PD_FAIL_ENUM

/* How balance: llm keyed a prompt of a model with a tokenizer (proxy/tokroute.c): on its
 * tokens, or on its text's bytes and why; the label value. Only encode_failed says the
 * tokenizer broke (runtime/tokhealth.h); the others are the request's shape or the model's
 * chat template. */
#define TOK_KEYED_LIST(X)                                                                          \
	X(TOKENS, "tokens")                                                                        \
	X(TEMPLATE_UNKNOWN, "template_unknown")                                                    \
	X(CONTENT_UNSUPPORTED, "content_unsupported")                                              \
	X(PROMPT_UNSUPPORTED, "prompt_unsupported")                                                \
	X(ENCODE_FAILED, "encode_failed")
#define TOK_KEYED_ENUM(name, label) TOK_KEYED_##name,
enum tok_keyed { TOK_KEYED_LIST(TOK_KEYED_ENUM) TOK_KEYEDS };
#undef TOK_KEYED_ENUM

/* How a replay of KV events missed in a gap ended (control/kvsub.c): the label value and the
 * log's words. */
#define KV_REPLAY_LIST(X)                                                                          \
	X(FILLED, "filled", "the gap filled")                                                      \
	X(NOT_KEPT, "not_kept", "the engine no longer keeps the batches missed")                   \
	X(TIMEOUT, "timeout", "no whole answer in time")                                           \
	X(MALFORMED, "malformed", "a malformed answer")                                            \
	X(TOO_WIDE, "too_wide", "a gap wider than a replay may fill")                              \
	X(ABANDONED, "abandoned", "the connection to the publisher lost meanwhile")                \
	X(BACKOFF, "backoff", "a replay failed less than a second before: not asked")
#define KV_REPLAY_ENUM(name, label, text) KV_REPLAY_##name,
enum kv_replay { KV_REPLAY_LIST(KV_REPLAY_ENUM) KV_REPLAY_OUTCOMES };
#undef KV_REPLAY_ENUM

#define PM_CLASSES 6 /* response classes: [0] aborted, [1] 1xx ... [5] 5xx */

/*
 * Count for the admin endpoint, from any thread: <n> more of counter <id> (a PM_BACKEND_*
 * one) for <b>, or (a PM_POOL_* one) for <p>; a response of status class <cls>; a sample of
 * histogram <id>. Each goes to the calling thread's shard (metrics_shard_self): a worker
 * that bound its own shard writes it with plain stores, any other thread a spare or the
 * shared one.
 */
static inline void backend_count(struct backend *b, enum proxy_metric id, uint64_t n)
{
	metrics_add(metrics_shard_self(b->metrics), id, b->id, n);
}

static inline void backend_count_response(struct backend *b, int cls)
{
	metrics_add(metrics_shard_self(b->metrics), PM_BACKEND_RESPONSES,
		    b->id * PM_CLASSES + (size_t)cls, 1);
}

static inline void backend_observe_us(struct backend *b, enum proxy_metric id, uint64_t us)
{
	metrics_observe(metrics_shard_self(b->metrics), id, b->id, us);
}

static inline void pool_count(struct pool_rt *p, enum proxy_metric id, uint64_t n)
{
	metrics_add(metrics_shard_self(p->metrics), id, p->index, n);
}

static inline void pool_observe_us(struct pool_rt *p, enum proxy_metric id, uint64_t us)
{
	metrics_observe(metrics_shard_self(p->metrics), id, p->index, us);
}

/*
 * The registry of <rt> over the table, with its label spaces (pools, backends, listeners,
 * routes, tenants), made once its pools and backends are; each pool and backend is given it.
 * 0 or -ENOMEM. proxy_metric_destroy() frees what it made, also after a failure.
 */
int proxy_metric_create(struct runtime *rt);
void proxy_metric_destroy(struct runtime *rt);

#endif
