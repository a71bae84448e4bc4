/*
 * cluster_stats.h - what /metrics shows of the cluster's sync (control/cluster.c writes it,
 * runtime/proxy_metric.c reads it): plain atomics, written by the sync thread only.
 */
#ifndef ACCELNET_RUNTIME_CLUSTER_STATS_H
#define ACCELNET_RUNTIME_CLUSTER_STATS_H

#include <stdatomic.h>
#include <stdint.h>

struct cluster_stats {
	atomic_int up;				/* the last sync went through */
	atomic_uint instances;			/* live instances, as Redis last counted them */
	atomic_uint_fast64_t syncs;		/* syncs that went through */
	atomic_uint_fast64_t failed;		/* syncs or connects that did not */
	atomic_uint_fast64_t keys;		/* keys carried by the syncs that went through */
	atomic_uint_fast64_t sent;		/* prompts' prefixes sent (balance: llm) */
	atomic_uint_fast64_t received;		/* ... and the other instances' taken in */
	atomic_uint_fast64_t sessions_sent;	/* sessions sent (pools[].session) */
	atomic_uint_fast64_t sessions_received; /* ... and the other instances' taken in */
};

#endif
