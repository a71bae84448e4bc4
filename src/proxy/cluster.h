/*
 * cluster.h - many instances, one policy (cluster:): the routes' per-tenant and per-route
 * request rates and tokens per minute shared through one Redis, on a thread of their own.
 *
 * The request path never waits on Redis: workers decide from their local buckets alone
 * (guard/ratelimit.h), which count what they pass. Every cluster.sync_ms this thread sends
 * those counts to Redis in one pipelined batch (a script per key, run by EVALSHA) and merges
 * the shared state Redis answers back into the local buckets (guard/rlsync.h has the
 * arithmetic and the overshoot bound). The same batch keeps this instance in a set of live
 * instances, whose size N is remembered.
 *
 * When Redis cannot be reached, refuses, or does not answer within cluster.timeout_ms, the
 * instance goes on alone: each shared limit is enforced locally at 1/N of its rate and burst
 * (N as Redis last counted; 1 when it never answered), no counts are kept for it, and the
 * thread tries again every sync (at most one connect per second). It logs once when Redis
 * goes away and once when it is back, and shows it in accelnet_cluster_redis_up.
 *
 * per_ip limits stay local: one client address usually meets one instance, and sharing
 * every address would cost a Redis key per client.
 */
#ifndef ACCELNET_PROXY_CLUSTER_H
#define ACCELNET_PROXY_CLUSTER_H

#include "conf/model.h"
#include "guard/limits.h"

#include <stdatomic.h>
#include <stdint.h>

/* What /metrics shows of the cluster (proxy/runtime.c). */
struct cluster_stats {
	atomic_int up;		     /* the last sync went through */
	atomic_uint instances;	     /* live instances, as Redis last counted them */
	atomic_uint_fast64_t syncs;  /* syncs that went through */
	atomic_uint_fast64_t failed; /* syncs or connects that did not */
	atomic_uint_fast64_t keys;   /* keys carried by the syncs that went through */
};

struct cluster;

/*
 * Share the limits of <conf>'s routes (<limits>, one per route) through conf->cluster's
 * Redis: marks them synced (before any worker takes from them) and starts the thread, which
 * tries Redis at once. No cluster: section: *out NULL, nothing done. 0, or -errno (said why).
 */
int cluster_start(const struct conf *conf, struct route_limits *limits, struct cluster **out);
/* Stop the thread (this instance leaves the live set when Redis is there). NULL: nothing. */
void cluster_stop(struct cluster *c);
const struct cluster_stats *cluster_stats(const struct cluster *c);

#endif
