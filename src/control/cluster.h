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
 * Spend budgets (routes.budget) go the same way: every sync sends what each tenant spent here
 * since the last in the current window, Redis adds it to the tenant's total for that window
 * (one counter per route, window and tenant, expiring after the window) and answers the
 * total, which becomes the tenant's spend here plus what came since (guard/budget.h). A count
 * whose sync failed goes back to be sent again, and while Redis is away each instance keeps
 * counting and enforces the whole budget on what it knows: spend is sent late, not dropped
 * (but what came in the last sync interval before the thread stops is not sent).
 *
 * per_ip limits stay local: one client address usually meets one instance, and sharing
 * every address would cost a Redis key per client.
 *
 * balance: llm pools whose backends learn their prefixes from routing (no kv_events) share
 * what they learn: every sync sends the prompts answered since (every block, in entries of
 * PREFIX_FEED_BLOCKS, from each backend's feed, policy/prefix_feed.h) to a Redis stream per pool,
 * and reads the other instances' entries from it into its own indexes, so a conversation whose
 * turns reach different instances still finds its prefix's backend. An instance that starts reads
 * the stream's recent history (it holds about the last 10,000 entries per pool; a long prompt
 * takes several).
 *
 * A backend's max_concurrency is the backend's, not each instance's: every sync sends the
 * requests this instance has in flight to each capped backend and those waiting here for it,
 * and Redis deals the backend's slots out between the instances (in proportion to what each
 * wants, never one slot to two; the deal is run again four times a sync while slots move);
 * what this instance is not dealt the pick counts against the cap (runtime/pool.h:
 * elsewhere), so a backend the others fill is full here too and this instance's requests wait
 * in its own queue, not inside the engine.
 *
 * Pools with session: share where each conversation went the same way (a stream per pool of
 * session hashes and backend names), so a conversation whose turns reach different
 * instances stays on its backend once a sync has passed (cluster.sync_ms).
 */
#ifndef ACCELNET_CONTROL_CLUSTER_H
#define ACCELNET_CONTROL_CLUSTER_H

#include "conf/model.h"
#include "guard/budget.h"
#include "guard/limits.h"
#include "runtime/cluster_stats.h"
#include "runtime/pool.h"

#include <stdatomic.h>
#include <stdint.h>

struct cluster;

/*
 * Share the limits and budgets of <conf>'s routes (<limits>, <budgets>, one per route) and
 * what <rt>'s llm pools learn of their backends' prefixes through conf->cluster's Redis:
 * marks the limits and budgets synced
 * and gives the backends their feeds (before any worker runs) and starts the thread, which
 * tries Redis at once. No cluster: section: *out NULL, nothing done. 0, or -errno (said why).
 */
int cluster_start(const struct conf *conf, struct runtime *rt, struct route_limits *limits,
		  struct route_budget *budgets, struct cluster **out);
/* Stop the thread (this instance leaves the live set when Redis is there): waits for its turn
 * under way, at most about twice cluster.timeout_ms against a Redis that does not answer.
 * NULL: nothing. */
void cluster_stop(struct cluster *c);
const struct cluster_stats *cluster_stats(const struct cluster *c);

#endif
