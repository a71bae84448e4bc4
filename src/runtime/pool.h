/*
 * pool.h - live state of pools and backends, shared by every worker thread.
 *
 * The configuration says what the backends are; the runtime says how they are doing:
 * whether active checks find them up, whether a refused connection keeps them out for a
 * while (passive marking), how many requests each has in flight, and counters for the
 * admin endpoint. Every field that threads share is an atomic; nothing here takes a lock.
 * struct runtime holds the pools of one generation of the config (runtime/runtime.h builds
 * it); runtime/pick.h turns their state into the candidates a balancer sees, and keeps what
 * each answer says of a backend; runtime/proxy_metric.h counts for the admin endpoint.
 *
 * Besides up and down, a backend has a measured latency (a peak-EWMA of its time to first
 * byte, which latency-aware balancing reads), a ramp after it comes back (slow start: it
 * sees a growing share of picks), and outlier ejection (runtime/pick.h).
 */
#ifndef ACCELNET_RUNTIME_POOL_H
#define ACCELNET_RUNTIME_POOL_H

#include "conf/model.h"
#include "http/parse.h"
#include "obs/hist.h"
#include "obs/metrics.h"
#include "obs/names.h"
#include "policy/models.h"
#include "policy/lora.h"
#include "runtime/queue.h"

struct cache_store;
struct cluster_stats;

#include <stdatomic.h>
#include <stdint.h>

struct ssl_ctx_st;
struct prefix_index;
struct pool_rt;
struct stick_table;

/*
 * What the generations of the config (a reload builds a new runtime beside the old one,
 * control/proxy.c) share of one backend that stays in them: its requests in flight, so its
 * max_concurrency (an accelerator's slots) holds across a reload while the old
 * generation's streams finish; and the pools that hold it, one per live generation (at
 * generation % SHARE_POOLS), whose queues all hear when one of its slots frees: a request
 * may wait for it in any of them. Owned by the main thread, which frees it with the last
 * runtime that holds it (control/carry.h).
 */
#define SHARE_POOLS 8
struct backend_share {
	atomic_uint inflight;
	_Atomic(struct pool_rt *) pools[SHARE_POOLS];
};

/* Where a backend slot comes from: the config's list, a discovered name's slots, or the
 * pool's spare ones (pools[].spare_backends), which the admin API fills (control/manage.h). */
enum backend_source { BACKEND_FROM_CONFIG, BACKEND_FROM_DNS, BACKEND_FROM_API };

/* What the admin API made of a backend (control/manage.h); anything but ENABLED takes no new
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
	 * name last resolved to (control/discover.c). A slot is <present> while the name's
	 * answer holds its address; it leaves (present 0: drained, no new picks) and is filled
	 * again only by the main thread, and only once no request is in flight to it, so no
	 * worker reads <addr> while it changes: pool_pick raises inflight, then checks present
	 * (both seq_cst), and the main thread clears present, then checks inflight. <gen>
	 * changes with the address: idle connections made before are closed, not reused.
	 */
	struct net_addr addr;
	/* a hash of its address as configured or filled in (backend_fill), the same at every
	 * instance: balance: llm's rendezvous for a new prompt */
	atomic_uint_fast64_t addr_hash;
	atomic_int present;
	atomic_uint gen;
	atomic_uint weight;	    /* conf's, the SRV record's, or the admin API's */
	atomic_uint max_conc;	    /* its slots: conf's max_concurrency or the API's; 0: no cap */
	atomic_uint elsewhere;	    /* cluster: of its slots, those other instances hold */
	atomic_uint others_waiting; /* cluster: requests waiting for it at other instances */
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
	struct llm_backend *llm; /* balance: llm: its prefix index and fit (runtime/llm.h) */
	/* health-check bookkeeping: the main thread only */
	unsigned hc_ok, hc_fail;
	/* what its engine last said in its own metrics (pools.engine_metrics): the main thread
	 * writes them, /metrics reads them */
	atomic_uint engine_waiting, engine_running;
	atomic_uint engine_kv_ppm; /* KV-cache usage, parts per million */
	/* backends.kv_events: the prefix index its engine's KV events keep (control/kvsub.c):
	 * its llm's (then llm->exact), or one of its own; NULL without kv_events */
	struct prefix_index *kv_prefix;
	/* ... and the sequence number its next batch should carry: one past the last one
	 * applied whole (0 before the first; the main thread writes it) */
	atomic_uint_fast64_t kv_next_seq;
	/* what its engine last said of its LoRA adapters (control/scrape.c writes it,
	 * policy/lora.h) */
	struct lora_snap lora;
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
	struct llm_fit *llm;		  /* balance: llm: its backends' TTFT fit (runtime/llm.h) */
	struct model_set models;	  /* which backends serve which model (models.h) */
	struct stick_table *stick;	  /* pools[].session: where each went (policy/stick.h) */
	atomic_uint lora_seen;		  /* some backend's engine said it serves LoRA adapters */
	struct conf_backend spare_conf;	  /* what the spare slots' conf points to: defaults */
};

/* Reloads so far (control/proxy.c's, across generations; the main thread writes and reads them). */
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
	struct metrics
	    *metrics; /* every counter the admin endpoint shows (runtime/proxy_metric.h) */
	/* label values and parents of the registry's series: pool, and pool + backend */
	const char **pool_labels, **backend_labels, **listen_labels, **route_labels;
	char (*route_index)[24]; /* the labels of routes without a name: their index */
	size_t *backend_pool;
	struct name_table *tenants;   /* tenants met so far, metrics.max_tenants, then "other" */
	const char **tokmodel_labels; /* the names of conf->tokmodels */
	/* backends, pools, listeners, the process, routes, tenants, priced and tokenized models */
	struct metric_space metric_spaces[8]; /* proxy_metric.c's SPACE_COUNT */
	/* per model of conf->tokmodels: is its tokenizer working (runtime/tokhealth.h)? */
	struct tokhealth *tokhealth;
	/* the bytes of buffers the workers have lent (proxy/shed.h), set once they exist */
	uint64_t (*buffer_bytes)(const void *arg);
	const void *buffer_arg;
	const struct accesslog *alog; /* access_log: its dropped lines are a metric; NULL: off */
	struct cache_store *cache;    /* the response cache (cache:), or NULL */
	const struct cluster_stats *cluster; /* cluster: its sync's state, or NULL */
	/* the admin API's maintenance: 0 off, else new requests are answered 503 with this
	 * Retry-After, in seconds (control/manage.h) */
	atomic_uint maintenance;
	atomic_uint stopping; /* the process drains to exit (SIGTERM): GET /readyz says 503 */
	atomic_uint tunnels;  /* WebSocket tunnels open (limits.max_tunnels; proxy/tunnel.h) */
};

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
/* Make slot <b> (not present, nothing in flight) the backend at <a>, shown as <text>, with
 * <weight>, as new (health, marks, latency forgotten), and present it, last. Main thread. */
void backend_fill(struct backend *b, const struct net_addr *a, const char *text, unsigned weight,
		  uint64_t now_ms);
/* <b> came back into rotation at <now_ms> (health checks): start its slow start. */
void backend_came_back(struct backend *b, uint64_t now_ms);
/* Its peak-EWMA time to first byte as of <now_ms>, in microseconds; 0 when unmeasured. */
uint32_t backend_latency_us(const struct backend *b, uint64_t now_ms);

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

#endif
