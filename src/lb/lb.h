/*
 * lb.h - load-balancing policies as const ops tables.
 *
 * A policy is a pure function: given a snapshot of the pool's backends (weight, requests in
 * flight, eligible or not) and two numbers supplied by the caller -- a ticket that increases
 * by one per pick across all threads, and a random number -- it returns the index of the
 * backend to use. Nothing here touches sockets, clocks or shared memory, so the unit tests
 * drive every policy with plain arrays. A policy that needs precomputed state (the smooth
 * weighted round-robin schedule) builds it once per configuration in prepare().
 *
 * Adding a policy: one new lb_NAME.c defining a const struct lb_ops, and one line in the
 * table in lb.c.
 */
#ifndef ACCELNET_LB_LB_H
#define ACCELNET_LB_LB_H

#include <stddef.h>
#include <stdint.h>

struct lb_candidate {
	unsigned weight;   /* >= 1 */
	unsigned inflight; /* requests in service now */
	int eligible;	   /* up, under its concurrency cap, not already tried */
};

/* Per-pool state built from the configured weights; owned by the pool's config. */
struct lb_state {
	uint32_t *schedule; /* smooth-WRR order of backend indices, one period long */
	uint32_t nschedule;
};

struct lb_ops {
	const char *name;
	/* Build state for <n> backends with <weights>. 0 or -errno. May be NULL. */
	int (*prepare)(struct lb_state *st, const unsigned *weights, size_t n);
	/* Index of the chosen eligible candidate, or -1 when none is eligible. */
	int (*pick)(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		    uint64_t ticket, uint64_t rnd);
};

/* The policy called <name>, or NULL. */
const struct lb_ops *lb_find(const char *name);
/* "round-robin, weighted-round-robin, ..." for error messages. */
const char *lb_names(void);
void lb_state_free(struct lb_state *st);

/* Is a loaded with fewer requests per unit of weight than b? */
static inline int lb_less_loaded(const struct lb_candidate *a, const struct lb_candidate *b)
{
	return (uint64_t)a->inflight * b->weight < (uint64_t)b->inflight * a->weight;
}

extern const struct lb_ops lb_round_robin;
extern const struct lb_ops lb_weighted_round_robin;
extern const struct lb_ops lb_least_connections;
extern const struct lb_ops lb_p2c;

#endif
