/*
 * runtime.h - live state of pools and backends, shared by every worker thread.
 *
 * The configuration says what the backends are; the runtime says how they are doing:
 * whether active checks find them up, whether a refused connection keeps them out for a
 * while (passive marking), how many requests each has in flight, and counters for the
 * admin endpoint. Every field that threads share is an atomic; nothing here takes a lock.
 * pool_pick() turns that state into the candidates a balancer sees and asks the pool's
 * policy for one.
 */
#ifndef ACCELNET_PROXY_RUNTIME_H
#define ACCELNET_PROXY_RUNTIME_H

#include "conf/conf-t.h"
#include "http/parse.h"
#include "proxy/queue.h"

#include <stdatomic.h>
#include <stdint.h>

#define POOL_MAX_BACKENDS 256

struct backend {
	const struct conf_backend *conf;
	const struct conf_pool *pool;
	size_t id; /* index across all pools, for per-worker arrays */
	char name[72];
	atomic_int up;			    /* active checks: 1 up, 0 down */
	atomic_uint_fast64_t down_until_ms; /* passive: out of rotation until then */
	atomic_uint inflight;
	atomic_uint_fast64_t requests, connect_failures, retries;
	atomic_uint_fast64_t responses[6]; /* by status class: [2] is 2xx; [0] aborted */
	/* health-check bookkeeping: the main thread only */
	unsigned hc_ok, hc_fail;
};

struct pool_rt {
	const struct conf_pool *conf;
	struct backend *backends;
	size_t nbackends;
	atomic_uint_fast64_t ticket;	  /* one per pick, shared by all workers */
	atomic_uint_fast64_t unavailable; /* requests turned away: no backend, or queue full */
	struct pool_queue queue;	  /* requests waiting for a slot */
};

struct runtime {
	const struct conf *conf;
	struct pool_rt *pools;
	size_t npools;
	size_t nbackends;
};

int runtime_create(const struct conf *conf, struct runtime **out);
void runtime_destroy(struct runtime *rt);

/* Up, not passively marked out, and under its concurrency cap. */
int backend_eligible(const struct backend *b, uint64_t now_ms);
/* A connection to <b> failed: keep it out of rotation for the pool's fail_timeout_ms. */
void backend_mark_failed(struct backend *b, uint64_t now_ms);

/*
 * Choose a backend of <p> for one request, never <exclude> (may be NULL). On success the
 * backend's in-flight count is already raised; the caller lowers it when done. NULL when
 * no backend is eligible.
 */
struct backend *pool_pick(struct pool_rt *p, uint64_t now_ms, uint64_t rnd,
			  const struct backend *exclude);

/* The first route of <conf> matching <req>, or NULL. */
const struct conf_route *route_match(const struct conf *conf, const struct http_head *req);

#endif
