/*
 * lb.h - load-balancing policies as const ops tables.
 *
 * A policy is a pure function: given a snapshot of the pool's backends (weight, requests in
 * flight, concurrency cap, measured latency, eligible or busy) and what the caller draws for
 * this one pick -- a ticket that increases by one per pick across all threads, a random
 * number, the request's affinity key, how many requests queue ahead of it -- it returns the
 * index of the backend to use, LB_NONE when no backend can take it, or LB_WAIT when it is
 * better to wait for a busy backend's slot than to take a free one now. Nothing here touches
 * sockets, clocks or shared memory, so the unit tests drive every policy with plain arrays.
 * A policy that needs precomputed state (the smooth weighted round-robin schedule, a hash
 * ring) builds it once per configuration in prepare().
 *
 * A policy that reads config keys of its own (a bounded-load factor, wait_for_faster)
 * declares them in its ops table as plain data (policy/opt.h), with lb_state as where their
 * values go; conf/ reads and checks them from that declaration.
 *
 * A policy may also explain a decision after the fact (explain(): each candidate's estimate
 * and why the answer won, struct lb_explain), for callers that show decisions to operators;
 * the pick itself never records anything.
 *
 * Adding a policy: one new lb_NAME.c defining a const struct lb_ops (and its options), and
 * one line in the table in lb.c.
 */
#ifndef ACCELNET_POLICY_LB_H
#define ACCELNET_POLICY_LB_H

#include "policy/opt.h"

#include <stddef.h>
#include <stdint.h>

struct lb_candidate {
	unsigned weight;     /* >= 1 */
	unsigned inflight;   /* requests in service now */
	unsigned slots;	     /* its concurrency cap; 0: none */
	uint32_t latency_us; /* peak-EWMA time to first byte; 0: not measured (lb_ops.latency) */
	uint8_t eligible;    /* up, under its concurrency cap, not already tried */
	uint8_t busy;	     /* up but at its cap: it will free a slot */
	/* lb_ops.blocks: what the caller knows of the prompt on this backend */
	uint32_t hit_blocks; /* blocks of this prompt its prefix cache holds */
	uint32_t base_us;    /* its fitted time to first token with everything cached */
	uint32_t block_us;   /* ... plus this per block it must compute */
	uint32_t service_us; /* its mean time to serve a whole request */
	uint64_t id;	     /* llm: a hash of its address, the same at every instance */
	unsigned waiting;    /* requests queued for it by earlier picks (LB_WAIT), not this one */
};

/* What the caller supplies for one pick. */
struct lb_draw {
	uint64_t ticket;  /* one per pick, shared by all threads */
	uint64_t rnd;	  /* fresh random bits */
	uint64_t key;	  /* the request's affinity hash, when has_key (llm: the prompt's first
			   * block's, which names a new prompt) */
	unsigned waiting; /* requests that queue ahead of this one */
	uint8_t has_key;
	uint32_t blocks; /* lb_ops.blocks: the prompt's whole blocks (0: no prompt) */
	/* llm: how long it has waited for a busy backend since it first passed up a free slot
	 * for it (max_wait_ms counts this, not its time in a line where no slot was free) */
	uint32_t waited_ms;
	uint8_t home_only; /* llm: take a slot only on a backend that holds part of the prompt */
	unsigned queued;   /* llm: requests in the pool's queue now */
	int *wait_for;	   /* out, may be NULL: with LB_WAIT, the backend waited for */
};

enum { LB_NONE = -1, LB_WAIT = -2 };

#define LB_MAX_BACKENDS 256 /* per pool: candidate arrays are sized for this */

/* A point on a consistent-hash ring. */
struct lb_point {
	uint64_t hash;
	uint32_t backend;
};

/* Per-pool state built from the configuration; owned by the pool's config. */
struct lb_state {
	uint32_t *schedule; /* smooth-WRR order of backend indices, one period long */
	uint32_t nschedule;
	struct lb_point *ring; /* consistent hash: sorted by hash */
	uint32_t nring;
	/* options, read from the config by the policy's declaration (lb_ops.opts) */
	unsigned load_factor_pct; /* bounded load: at most this % of the mean in flight */
	unsigned wait_for_faster; /* peak-ewma: may answer LB_WAIT */
	unsigned block_bytes;	  /* llm: prompt block size (http_prompt_blocks) */
	unsigned cache_blocks;	  /* llm: what one backend's prefix cache holds, in blocks */
	unsigned max_wait_ms;	  /* llm: waiting for the home backend stops after this */
	unsigned explain;	  /* llm: its decisions shown in a response header */
};

/*
 * Why a pick came out as it did, as the policy's explain() reads it after the pick (never
 * during it: a pick costs the same whether or not anyone asks). The reasons are read from
 * the outcome against the estimates, not from the pick's own branches, so a policy that
 * decides otherwise later still gets a truthful LB_WHY_OTHER rather than a stale story.
 */
#define LB_WHY_LIST(X)                                                                             \
	X(NONE, "none")		    /* no backend could take it */                                 \
	X(LEAST, "least")	    /* the least expected time among the free backends */          \
	X(TIE_LOAD, "tie-load")	    /* ... tied with another: the less loaded */                   \
	X(TIE_DRAW, "tie-draw")	    /* ... tied in time and load: the draw */                      \
	X(RENDEZVOUS, "rendezvous") /* a new prompt: its hash's choice, about as quick */          \
	X(WAIT, "wait")		    /* a busy backend holds it and is quicker: wait for it */      \
	X(MAX_WAIT, "max-wait")	    /* waited max_wait_ms for a busy one: the best free slot */    \
	X(NO_PROMPT, "no-prompt")   /* no prompt: the least expected wait */                       \
	X(HOME, "home")		    /* a freed slot went to the waiter whose prefix it holds */    \
	X(SESSION, "session")	    /* the conversation's backend (pools[].session): no pick */    \
	X(OTHER, "other")	    /* none of these: the policy decided on something else */
#define LB_WHY_ENUM(name, text) LB_WHY_##name,
enum lb_why { LB_WHY_LIST(LB_WHY_ENUM) LB_WHYS };
#undef LB_WHY_ENUM

/* "least", "wait", ... for <why>. */
const char *lb_why_name(unsigned why);

#define LB_EXPLAIN_MAX 8 /* candidates kept per decision: the pick and the quickest others */

/* One candidate as the pick saw it, in microseconds. */
struct lb_estimate {
	uint16_t backend;    /* its index among the candidates */
	uint8_t busy;	     /* at its cap (not eligible) */
	uint32_t hit_blocks; /* blocks of the prompt its cache holds, as far as we know */
	uint32_t wait_us;    /* until a slot is its, or its share of the load */
	uint32_t base_us;    /* its fit: everything cached */
	uint32_t block_us;   /* ... plus this per block computed */
	uint32_t expect_us;  /* wait + base + block x missed blocks: its expected TTFT */
	uint32_t inflight, slots;
};

/* One decision: what the pick answered, why, and the candidates (the pick first). */
struct lb_explain {
	const void *where;  /* the caller's: whose candidates these were (a pool) */
	int result;	    /* the pick's answer: an index, LB_NONE, LB_WAIT */
	uint8_t why;	    /* enum lb_why */
	uint8_t waited;	    /* some pick for this request answered LB_WAIT before */
	uint8_t ncand;	    /* kept in cand[] */
	uint16_t nseen;	    /* candidates that were up (eligible or busy) */
	uint32_t blocks;    /* the prompt's blocks */
	uint32_t waited_ms; /* how long it had queued (the caller's, like where) */
	struct lb_estimate cand[LB_EXPLAIN_MAX];
};

struct lb_ops {
	const char *name;
	/* Build state for <n> backends with <weights> and stable <names>. 0 or -errno. May be
	 * NULL. */
	int (*prepare)(struct lb_state *st, const unsigned *weights, const char *const *names,
		       size_t n);
	/* Index of the chosen eligible candidate, LB_NONE, or LB_WAIT (never when no
	 * candidate is busy). */
	int (*pick)(const struct lb_state *st, const struct lb_candidate *c, size_t n,
		    const struct lb_draw *d);
	/* Fill <out> for the answer <result> pick() gave on the same arguments: each candidate's
	 * estimate and the reason. May be NULL (the policy explains nothing). */
	void (*explain)(const struct lb_state *st, const struct lb_candidate *c, size_t n,
			const struct lb_draw *d, int result, struct lb_explain *out);
	/* Its own config keys, values in struct lb_state; ended by a NULL name. May be NULL. */
	const struct policy_opt *opts;
	unsigned latency : 1; /* reads latency_us: the caller must fill it */
	unsigned keyed : 1;   /* reads key: the caller should hash the request (pool's hash:) */
	unsigned prompt : 1;  /* keyed by the prompt's start, not by hash.key */
	unsigned blocks : 1;  /* reads the prompt's blocks (hit_blocks...): the caller keeps a
			       * prefix index per backend and fills them */
};

/* The policy called <name>, or NULL. */
const struct lb_ops *lb_find(const char *name);
/* The <i>th registered policy, or NULL past the last: for walking their declarations. */
const struct lb_ops *lb_at(size_t i);
/* "round-robin, weighted-round-robin, ..." for error messages. */
const char *lb_names(void);
void lb_state_free(struct lb_state *st);

/* Is a loaded with fewer requests per unit of weight than b? */
static inline int lb_less_loaded(const struct lb_candidate *a, const struct lb_candidate *b)
{
	return (uint64_t)a->inflight * b->weight < (uint64_t)b->inflight * a->weight;
}

/*
 * Draw two distinct eligible candidates at random from <rnd> into *a and *b (the same one
 * when only one is eligible). Returns how many are eligible; *a and *b are unset at 0.
 */
size_t lb_draw_two(const struct lb_candidate *c, size_t n, uint64_t rnd, int *a, int *b);

extern const struct lb_ops lb_round_robin;
extern const struct lb_ops lb_weighted_round_robin;
extern const struct lb_ops lb_least_connections;
extern const struct lb_ops lb_p2c;
extern const struct lb_ops lb_peak_ewma;
extern const struct lb_ops lb_consistent_hash;
extern const struct lb_ops lb_prefix_affinity;
extern const struct lb_ops lb_llm;

#endif
