/*
 * runtime.h - live state of pools and backends, shared by every worker thread.
 *
 * The configuration says what the backends are; the runtime says how they are doing:
 * whether active checks find them up, whether a refused connection keeps them out for a
 * while (passive marking), how many requests each has in flight, and counters for the
 * admin endpoint. Every field that threads share is an atomic; nothing here takes a lock.
 * pool_pick() turns that state into the candidates a balancer sees and asks the pool's
 * policy for one.
 *
 * Besides up and down, a backend has a measured latency (a peak-EWMA of its time to first
 * byte, which latency-aware balancing reads), a ramp after it comes back (slow start: it
 * sees a growing share of picks), and outlier ejection: a run of 5xx answers, or a latency
 * far above its peers', takes it out for a while, never more than a bounded share of the
 * pool at once, and once per episode: answers to requests that were in flight when it was
 * taken out neither take it out again nor lengthen its time out (policy/outlier.h).
 *
 * What the admin endpoint shows is declared once, in runtime.c's table of enum proxy_metric
 * (obs/metrics.h): counters live in the registry's per-thread shards (bump them with
 * metrics_add(metrics_shard_self(rt->metrics), PM_..., series, n)), gauges are read from the
 * atomics below at scrape time. A backend's series is its id; a pool's, its index; a
 * response's, backend id * PM_CLASSES + status class; a route's, its index in conf->routes;
 * a tenant's, what names_intern(rt->tenants, ...) answers. No counter here is a shared
 * atomic: each worker bumps its own shard, summed when scraped.
 */
#ifndef ACCELNET_PROXY_RUNTIME_H
#define ACCELNET_PROXY_RUNTIME_H

#include "conf/model.h"
#include "http/parse.h"
#include "obs/hist.h"
#include "obs/metrics.h"
#include "obs/names.h"
#include "policy/models.h"
#include "proxy/queue.h"

struct cache_store;
struct cluster_stats;

#include <stdatomic.h>
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
	PM_BACKEND_RESPONSES, /* series: backend id * PM_CLASSES + class */
	PM_BACKEND_TLS_FULL,
	PM_BACKEND_TLS_RESUMED,
	PM_BACKEND_TLS_FAILURES,
	/* per backend: what the engine behind it says (proxy/scrape.c, proxy/kvsub.c) */
	PM_BACKEND_ENGINE_WAITING,
	PM_BACKEND_ENGINE_RUNNING,
	PM_BACKEND_ENGINE_KV_USAGE,
	PM_BACKEND_ENGINE_SCRAPES,
	PM_BACKEND_ENGINE_SCRAPE_FAILURES,
	PM_BACKEND_KV_EVENTS, /* series: backend id * KVEVENT_KINDS + enum kvevent_kind */
	PM_BACKEND_KV_GAPS,
	PM_BACKEND_KV_MALFORMED,
	PM_BACKEND_KV_BLOCKS,
	/* per pool */
	PM_POOL_NAME,
	PM_POOL_BALANCE,
	PM_POOL_UNAVAILABLE,
	PM_POOL_RETRIES_DENIED,
	PM_POOL_SPILLED_IN,
	PM_POOL_DISCOVERY_ANSWERS, /* backends[].discover (proxy/discover.c) */
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
	PM_PROCESS_ALOG_DROPPED,
	PM_PROCESS_CONFIG_GENERATION,
	PM_PROCESS_CONFIG_RELOADS,
	PM_PROCESS_CONFIG_RELOAD_FAILURES,
	PM_PROCESS_CACHE_BYTES,
	PM_PROCESS_CACHE_OBJECTS,
	PM_PROCESS_CACHE_EVICTIONS, /* series: enum cache_evict_reason */
	PM_PROCESS_CLUSTER_UP,	    /* cluster: (proxy/cluster.h) */
	PM_PROCESS_CLUSTER_INSTANCES,
	PM_PROCESS_CLUSTER_SYNCS,
	PM_PROCESS_CLUSTER_FAILED,
	PM_PROCESS_CLUSTER_KEYS,
	PM_PROCESS_CLUSTER_PREFIXES_SENT,
	PM_PROCESS_CLUSTER_PREFIXES_RECEIVED,
	PM_PROCESS_TUNNELS_OPEN,   /* WebSocket tunnels (proxy/tunnel.h) */
	PM_PROCESS_TUNNEL_BYTES,   /* series: enum tunnel_way */
	PM_PROCESS_TUNNELS_CLOSED, /* series: enum tunnel_end */
	/* per route (proxy/tally.c) */
	PM_ROUTE_NAME,
	PM_ROUTE_REQUESTS, /* series: route index * PM_CLASSES + class */
	PM_ROUTE_DURATION,
	PM_ROUTE_TTFT,
	PM_ROUTE_TOKEN_GAP,
	PM_ROUTE_TOKENS, /* series: route index * PM_KINDS + enum token_kind */
	PM_ROUTE_CACHE,	 /* series: route index * CACHE_RESULTS + what Cache-Status said - 1 */
	/* per tenant: series from rt->tenants (obs/names.h), the last one "other" */
	PM_TENANT_NAME,
	PM_TENANT_REQUESTS, /* series: tenant * PM_CLASSES + class */
	PM_TENANT_TOKENS,   /* series: tenant * PM_KINDS + enum token_kind */
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

/* A tunnel's two ways, and why tunnels end (proxy/tunnel.h). */
enum tunnel_way { TUNNEL_TO_BACKEND, TUNNEL_TO_CLIENT, TUNNEL_WAYS };
enum tunnel_end {
	TUNNEL_END_CLOSED,
	TUNNEL_END_IDLE,
	TUNNEL_END_DRAIN,
	TUNNEL_END_ERROR,
	TUNNEL_ENDS
};

/* The tokens of an LLM response, by kind. */
enum token_kind { TOKENS_PROMPT, TOKENS_COMPLETION, PM_KINDS };

/* Why a new client connection was closed as it was accepted (proxy/shed.h). */
enum shed_reason {
	SHED_PER_IP,	  /* limits.max_connections_per_ip */
	SHED_ACCEPT_RATE, /* limits.accept_rate_per_ip */
	SHED_MEMORY,	  /* limits.max_buffer_memory */
	SHED_REASONS
};

#define PM_CLASSES 6 /* response classes: [0] aborted, [1] 1xx ... [5] 5xx */

struct ssl_ctx_st;
struct prefix_index;
struct pool_rt;

/*
 * What the generations of the config (a reload builds a new runtime beside the old one,
 * proxy.c) share of one backend that stays in them: its requests in flight, so its
 * max_concurrency (an accelerator's slots) holds across a reload while the old
 * generation's streams finish; and the pools that hold it, one per live generation (at
 * generation % SHARE_POOLS), whose queues all hear when one of its slots frees: a request
 * may wait for it in any of them. Owned by the main thread, which frees it with the last
 * runtime that holds it (proxy/carry.h).
 */
#define SHARE_POOLS 8
struct backend_share {
	atomic_uint inflight;
	_Atomic(struct pool_rt *) pools[SHARE_POOLS];
};

/* Where a backend slot comes from: the config's list, a discovered name's slots, or the
 * pool's spare ones (pools[].spare_backends), which the admin API fills (proxy/manage.h). */
enum backend_source { BACKEND_FROM_CONFIG, BACKEND_FROM_DNS, BACKEND_FROM_API };

/* What the admin API made of a backend (proxy/manage.h); anything but ENABLED takes no new
 * requests, while those in flight finish. */
enum backend_admin {
	BACKEND_ENABLED,
	BACKEND_DRAINING, /* drain: taken out softly, meant to come back */
	BACKEND_DISABLED, /* disable: out, its idle connections closed */
	BACKEND_STATES
};

struct backend {
	const struct conf_backend *conf;
	const struct conf_pool *pool;
	size_t id;     /* index across all pools, for per-worker arrays */
	char name[72]; /* its address; a discovered one's slot: "NAME#k", fixed */
	/*
	 * Where it listens: conf->ep's address, or for a slot of a name with discover what the
	 * name last resolved to (proxy/discover.c). A slot is <present> while the name's
	 * answer holds its address; it leaves (present 0: drained, no new picks) and is filled
	 * again only by the main thread, and only once no request is in flight to it, so no
	 * worker reads <addr> while it changes: pool_pick raises inflight, then checks present
	 * (both seq_cst), and the main thread clears present, then checks inflight. <gen>
	 * changes with the address: idle connections made before are closed, not reused.
	 */
	struct net_addr addr;
	atomic_int present;
	atomic_uint gen;
	atomic_uint weight;	    /* conf's, the SRV record's, or the admin API's */
	atomic_uint max_conc;	    /* its slots: conf's max_concurrency or the API's; 0: no cap */
	atomic_int admin;	    /* enum backend_admin: the admin API's word */
	enum backend_source source; /* fixed at start */
	unsigned api_set;	    /* MANAGE_SET_* the API changed (manage.h): the main thread's */
	/* its address as text for /status; [addr_at] is current (two, so a reader is never
	 * handed the one being rewritten) */
	char addr_text[2][64];
	atomic_int addr_at;
	atomic_int up;			    /* active checks: 1 up, 0 down */
	atomic_uint_fast64_t down_until_ms; /* passive: out of rotation until then */
	atomic_int connect_failed;	    /* passive: the last connect failed, no answer since */
	atomic_uint_fast64_t back_ms;	    /* when it last came back up: slow start */
	struct backend_share *share;	    /* its requests in flight, across reloads */
	atomic_uint_fast32_t ewma_us;	    /* peak-EWMA time to first byte */
	atomic_uint_fast32_t base_us;	    /* its usual latency: a slow plain EWMA */
	atomic_uint_fast64_t ewma_ms;	    /* ... as of this time */
	atomic_uint fails_in_row;	    /* consecutive 5xx answers */
	atomic_uint reported_load;	    /* its own queue depth, as it last said */
	atomic_uint_fast64_t reported_ms;   /* ... when it said so */
	atomic_uint ejections_in_row;	    /* ejected again soon after the last: longer */
	atomic_uint_fast64_t ejected_ms;    /* when it was last ejected (0: never) */
	struct metrics *metrics;	    /* the runtime's registry */
	struct ssl_ctx_st *tls;		    /* its pool's TLS context (pools.tls); NULL: plain */
	struct llm_backend *llm; /* balance: llm: its prefix index and fit (proxy/llm.h) */
	/* health-check bookkeeping: the main thread only */
	unsigned hc_ok, hc_fail;
	/* what its engine last said in its own metrics (pools.engine_metrics): the main thread
	 * writes them, /metrics reads them */
	atomic_uint engine_waiting, engine_running;
	atomic_uint engine_kv_ppm; /* KV-cache usage, parts per million */
	/* backends.kv_events: the prefix index its engine's KV events keep (proxy/kvsub.c):
	 * its llm's (then llm->exact), or one of its own; NULL without kv_events */
	struct prefix_index *kv_prefix;
};

struct pool_rt {
	const struct conf_pool *conf;
	struct ssl_ctx_st *tls; /* pools[].tls: the client context of its backend connections */
	struct backend *backends;
	size_t nbackends;
	size_t index;			  /* its series in the registry */
	struct metrics *metrics;	  /* the runtime's registry */
	atomic_uint_fast64_t ticket;	  /* one per pick, shared by all workers */
	atomic_int_fast64_t retry_tokens; /* retry budget, in thousandths of a retry */
	struct pool_queue queue;	  /* requests waiting for a slot */
	struct llm_fit *llm;		  /* balance: llm: its backends' TTFT fit (proxy/llm.h) */
	struct model_set models;	  /* which backends serve which model (models.h) */
	struct conf_backend spare_conf;	  /* what the spare slots' conf points to: defaults */
};

/* Reloads so far (proxy.c's, across generations; the main thread writes and reads them). */
struct runtime_reloads {
	uint64_t ok, failed;
};

struct runtime {
	const struct conf *conf;
	unsigned generation;		       /* of the configuration (0 at start, then reloads) */
	const struct runtime_reloads *reloads; /* NULL: not counted (the demo) */
	struct pool_rt *pools;
	size_t npools;
	size_t nbackends;
	struct backend **backend_by_id;
	struct metrics *metrics; /* every counter the admin endpoint shows (runtime.c's table) */
	/* label values and parents of the registry's series: pool, and pool + backend */
	const char **pool_labels, **backend_labels, **listen_labels, **route_labels;
	char (*route_index)[24]; /* the labels of routes without a name: their index */
	size_t *backend_pool;
	struct name_table *tenants; /* tenants met so far, metrics.max_tenants, then "other" */
	/* backends, pools, listeners, the process, routes, tenants */
	struct metric_space metric_spaces[6];
	/* the bytes of buffers the workers have lent (proxy/shed.h), set once they exist */
	uint64_t (*buffer_bytes)(const void *arg);
	const void *buffer_arg;
	const struct accesslog *alog; /* access_log: its dropped lines are a metric; NULL: off */
	struct cache_store *cache;    /* the response cache (cache:), or NULL */
	const struct cluster_stats *cluster; /* cluster: its sync's state, or NULL */
	/* the admin API's maintenance: 0 off, else new requests are answered 503 with this
	 * Retry-After, in seconds (proxy/manage.h) */
	atomic_uint maintenance;
	atomic_uint tunnels; /* WebSocket tunnels open (limits.max_tunnels; proxy/tunnel.h) */
};

int runtime_create(const struct conf *conf, struct runtime **out);
void runtime_destroy(struct runtime *rt);

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

/* Is <b> in rotation as far as discovery goes: a fixed backend, or a slot whose address the
 * name's answer holds? */
static inline int backend_present(const struct backend *b)
{
	return atomic_load_explicit(&b->present, memory_order_relaxed);
}

/* Its concurrency cap now: max_concurrency, or what the admin API set; 0: none. */
static inline unsigned backend_cap(const struct backend *b)
{
	return atomic_load_explicit(&b->max_conc, memory_order_relaxed);
}

/* Is <b> a spare slot holding nothing: no backend added, or one removed whose last request
 * has ended (the main thread's view; the slot may then be filled again)? */
static inline int backend_slot_free(const struct backend *b)
{
	return b->source == BACKEND_FROM_API && !backend_present(b) &&
	       !atomic_load_explicit(&b->share->inflight, memory_order_seq_cst);
}

/* Present, up, not passively marked out or ejected, and under its concurrency cap. */
int backend_eligible(const struct backend *b, uint64_t now_ms);
/* <b>'s state as /status and the admin API say it: "enabled", "draining", "disabled", or
 * "removing" / "removed" (taken out of its pool by the admin API, requests still in flight
 * or none). */
const char *backend_state_name(const struct backend *b);

/* Present, enabled (admin), up and not marked out or ejected (at its cap or not). */
int backend_usable(const struct backend *b, uint64_t now_ms);
/* A connection to <b> failed: keep it out of rotation for the pool's fail_timeout_ms. */
void backend_mark_failed(struct backend *b, uint64_t now_ms);
/* Make slot <b> (not present, nothing in flight) the backend at <a>, shown as <text>, with
 * <weight>, as new (health, marks, latency forgotten), and present it, last. Main thread. */
void backend_fill(struct backend *b, const struct net_addr *a, const char *text, unsigned weight,
		  uint64_t now_ms);
/* <b> came back into rotation at <now_ms> (health checks): start its slow start. */
void backend_came_back(struct backend *b, uint64_t now_ms);
/* Its peak-EWMA time to first byte as of <now_ms>, in microseconds; 0 when unmeasured. */
uint32_t backend_latency_us(const struct backend *b, uint64_t now_ms);

/*
 * A response head from <b> arrived <ttfb_us> after the request went out, with <status>.
 * Feeds the latency estimate and histogram, and outlier ejection (a run of 5xx, or latency
 * far above the pool's other backends). Called once per response, by any worker.
 */
void backend_observe(struct pool_rt *p, struct backend *b, uint64_t now_ms, uint64_t ttfb_us,
		     int status);

/* <b> said (in pools.load_header) that <depth> requests wait inside it. */
void backend_report_load(struct backend *b, uint64_t now_ms, unsigned depth);

/*
 * <b>'s engine said in its metrics (pools.engine_metrics) that <running> requests run and
 * <waiting> wait in it, and its KV cache is <kv_usage> full (0..1; negative: not said). What
 * is beyond our own requests in flight to it now is others' load, reported as
 * backend_report_load() does: the fresher of the two reports wins.
 */
void backend_report_engine(struct backend *b, uint64_t now_ms, double running, double waiting,
			   double kv_usage);

/* What one pick knows about its request. */
struct pick_hint {
	const struct backend *exclude; /* never this one (a retry); may be NULL */
	unsigned waiting;	       /* requests queued ahead of this one */
	uint64_t key;		       /* affinity hash, when has_key */
	int has_key;
	/* balance: llm */
	const uint64_t *blocks; /* the prompt's block hashes (http_prompt_blocks) */
	uint32_t nblocks;
	uint32_t waited_ms; /* how long it has queued */
	int home_only;	    /* a freed slot looking for the waiter whose prefix it holds */
	uint32_t *missed;   /* out, with work: the blocks the chosen backend must compute */
	uint32_t *work;	    /* out, may be NULL: its expected time there, added to the
			     * backend's work until llm_done() */
	int *would_wait;    /* out, may be NULL: set when NULL means "wait", not "nothing" */
	uint64_t model;	    /* models_hash() of the request's "model", when has_model */
	int has_model;
};

/*
 * Choose a backend of <p> for one request. On success the backend's in-flight count is
 * already raised; the caller lowers it when done. NULL when no backend is eligible, or when
 * the policy judges it better to wait for a busy backend (then some backend is busy).
 */
struct backend *pool_pick(struct pool_rt *p, uint64_t now_ms, uint64_t rnd,
			  const struct pick_hint *h);

/* May a request of <p> be retried now? Takes one retry from the budget when it may. */
int pool_retry_allowed(struct pool_rt *p);
/* Every request adds its share (retry_budget_pct) to the budget. */
void pool_retry_earn(struct pool_rt *p);

#endif
