/*
 * lb_hash.c - consistent hashing with bounded load, and prefix affinity on the same ring.
 *
 * Each backend owns points on a 64-bit ring (more points for more weight), placed by a hash
 * of its address, so adding or removing one backend moves only the keys it owned. A
 * request's key (a header, the client address, the path -- or, for prefix-affinity, the
 * start of the LLM prompt, so prompts that share a prefix meet the backend whose KV cache
 * holds it) names a point; the request goes to the first backend clockwise from it that is
 * eligible and below its bound: load_factor x the mean requests in flight per unit of
 * weight, counting this one, and never below 2 (Mirrokni et al., "Consistent Hashing with
 * Bounded Loads").
 * So the affinity yields when its backend is saturated, and the overflow goes to the same
 * next backend for the same key, which keeps some locality even then. If every backend is
 * above its bound the first eligible one on the walk takes it; without a key the request
 * goes to the less loaded of two random backends.
 *
 * prefix-affinity measures its bound against the OTHER backends: a backend takes the request
 * while it has fewer than load_factor x the mean in flight per unit of weight over the other
 * backends up (counting this request among theirs; never below 2). A miss costs a whole
 * prefill, so it holds on harder (300 %) -- and a factor that large over the mean of all
 * backends never binds on a small pool: that mean includes the home backend's own load, so
 * with 2 backends 300 % of it is 1.5 x everything in flight, with 3 it is all of it plus one,
 * and a hot prefix stayed on one backend however many waited there while the others idled
 * (unless max_concurrency stopped it). Against the others' mean the bound means the same on
 * any pool: a home carries at most about 3 x what its peers do before a prefix spills (2
 * backends, the other idle: the 4th request at once spills). With one backend up there is
 * nothing to spill to.
 */
#include "policy/lb.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define RING_POINTS_MAX 65536u
#define POINTS_PER_WEIGHT 64u
/* A bound never below this: at low load one request still finishing would otherwise push the
 * next one with the same key off its backend (at 1 in flight over 3 backends the mean is 2/3). */
#define HASH_MIN_BOUND 2u

static int point_cmp(const void *a, const void *b)
{
	const struct lb_point *x = a, *y = b;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return x->backend < y->backend ? -1 : x->backend > y->backend;
}

static int hash_prepare(struct lb_state *st, const unsigned *weights, const char *const *names,
			size_t n)
{
	uint64_t total_weight = 0;
	for (size_t i = 0; i < n; i++)
		total_weight += weights[i];
	if (!n || !total_weight)
		return -EINVAL;
	uint64_t per = POINTS_PER_WEIGHT;
	if (per * total_weight > RING_POINTS_MAX)
		per = RING_POINTS_MAX / total_weight ? RING_POINTS_MAX / total_weight : 1;
	uint64_t npoints = per * total_weight;
	struct lb_point *ring = malloc(npoints * sizeof(*ring));
	if (!ring)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		for (uint64_t v = 0; v < per * weights[i]; v++)
			ring[k++] = (struct lb_point){
			    .hash = XXH3_64bits_withSeed(names[i], strlen(names[i]), v),
			    .backend = (uint32_t)i,
			};
	qsort(ring, npoints, sizeof(*ring), point_cmp);
	st->ring = ring;
	st->nring = (uint32_t)npoints;
	if (!st->load_factor_pct)
		st->load_factor_pct = 125;
	return 0;
}

/* Index of the first ring point at or after <key>, wrapping to 0. */
static uint32_t ring_find(const struct lb_state *st, uint64_t key)
{
	uint32_t lo = 0, hi = st->nring;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (st->ring[mid].hash < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo == st->nring ? 0 : lo;
}

/* <i>'s bound: requests in flight below which it takes this one. <inflight> and <weight> are
 * the pool's (the backends up), <inflight> counting this request; <others>: measured against
 * the other backends' mean (prefix-affinity), else against the whole pool's (Mirrokni). */
static uint64_t hash_bound(const struct lb_state *st, const struct lb_candidate *ci,
			   uint64_t inflight, uint64_t weight, int others)
{
	if (others) {
		inflight -= ci->inflight;
		weight -= ci->weight;
		if (!weight)
			return UINT64_MAX; /* alone: nowhere to spill */
	}
	/* inflight < ceil(lf * total * w / W), in integers */
	uint64_t bound =
	    (st->load_factor_pct * inflight * ci->weight + 100 * weight - 1) / (100 * weight);
	return bound < HASH_MIN_BOUND ? HASH_MIN_BOUND : bound;
}

static int hash_walk(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		     const struct lb_draw *d, int others)
{
	if (!d->has_key || !st->nring)
		return lb_p2c.pick(st, c, n, d); /* nothing to be affine to */
	/* the bound, per unit of weight, over the backends that are up */
	uint64_t inflight = 1, weight = 0;
	for (size_t i = 0; i < n; i++)
		if (c[i].eligible || c[i].busy) {
			inflight += c[i].inflight;
			weight += c[i].weight;
		}
	if (!weight)
		return LB_NONE;
	int fallback = LB_NONE;
	uint64_t seen[LB_MAX_BACKENDS / 64] = {0}; /* backends already looked at */
	size_t distinct = 0;
	for (uint32_t k = 0, at = ring_find(st, d->key); k < st->nring && distinct < n; k++) {
		uint32_t i = st->ring[(at + k) % st->nring].backend;
		if (i >= LB_MAX_BACKENDS || (seen[i / 64] >> (i % 64)) & 1)
			continue;
		seen[i / 64] |= 1ull << (i % 64);
		distinct++;
		if (!c[i].eligible)
			continue;
		if (c[i].inflight < hash_bound(st, &c[i], inflight, weight, others))
			return (int)i;
		if (fallback == LB_NONE)
			fallback = (int)i;
	}
	return fallback;
}

static int hash_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		     const struct lb_draw *d)
{
	return hash_walk(st, c, n, d, 0);
}

static int prefix_pick(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		       const struct lb_draw *d)
{
	return hash_walk(st, c, n, d, 1);
}

/* hash.balance_factor: the bound, in percent of the mean load (see above). */
static const struct policy_opt hash_opts[] = {
    {"hash", "balance_factor", POLICY_OPT_UINT, offsetof(struct lb_state, load_factor_pct), 100,
     1000, 125},
    {NULL, NULL, 0, 0, 0, 0, 0},
};

/* A prefix-affinity miss costs a whole prefill: it holds on harder, against the others' mean
 * (see above). */
static const struct policy_opt prefix_opts[] = {
    {"hash", "balance_factor", POLICY_OPT_UINT, offsetof(struct lb_state, load_factor_pct), 100,
     1000, 300},
    {NULL, NULL, 0, 0, 0, 0, 0},
};

const struct lb_ops lb_consistent_hash = {
    .name = "consistent-hash",
    .prepare = hash_prepare,
    .pick = hash_pick,
    .opts = hash_opts,
    .keyed = 1,
};

const struct lb_ops lb_prefix_affinity = {
    .name = "prefix-affinity",
    .prepare = hash_prepare,
    .pick = prefix_pick,
    .opts = prefix_opts,
    .keyed = 1,
    .prompt = 1,
};
