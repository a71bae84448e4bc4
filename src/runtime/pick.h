/*
 * pick.h - choosing a backend of a pool for one request, and what each answer (or failed
 * connect) says about a backend: its latency, a passive mark, outlier ejection (a run of
 * 5xx answers, or a latency far above its peers', takes it out for a while, never more than
 * a bounded share of the pool at once, and once per episode: answers to requests that were
 * in flight when it was taken out neither take it out again nor lengthen its time out,
 * policy/outlier.h); and the pool's retry budget.
 */
#ifndef ACCELNET_RUNTIME_PICK_H
#define ACCELNET_RUNTIME_PICK_H

#include "runtime/pool.h"

#include <stdint.h>

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
	/* balance: llm: how long since it first passed up a free slot to wait for its busy
	 * home (0: never): what max_wait_ms counts */
	uint32_t declined_ms;
	int home_only;	  /* a freed slot looking for the waiter whose prefix it holds */
	uint32_t *missed; /* out, with work: the blocks the chosen backend must compute */
	uint32_t *ticks;  /* out, with work: its index clock's ticks they took (llm_picked) */
	uint32_t *work;	  /* out, may be NULL: its expected time there, added to the
			   * backend's work until llm_done() */
	int *would_wait;  /* out, may be NULL: set when NULL means "wait", not "nothing" */
	int *wait_for;	  /* out, may be NULL: with "wait", the index of the backend awaited */
	/* balance: llm: the backend this request is counted waiting for (llm_wait_for()), whose
	 * count it is not behind; NULL: none */
	const struct backend *home;
	unsigned queued; /* requests in the pool's queue now */
	uint64_t model;	 /* models_hash() of the request's "model", when has_model */
	int has_model;
	/* pools[].session: the conversation's stick_key(), when has_session; its backend is
	 * preferred while eligible, and with session_learn the pick is remembered for it */
	uint64_t session;
	uint8_t has_session, session_learn;
	/* out, may be NULL: the decision read back by the policy (lb_ops.explain) */
	struct lb_explain *explain;
};

/*
 * Choose a backend of <p> for one request: the session's backend when it has one and that
 * backend is eligible, else the balancer's choice. On success the backend's in-flight count is
 * already raised; the caller lowers it when done. NULL when no backend is eligible, or when
 * the policy judges it better to wait for a busy backend (then some backend is busy).
 */
struct backend *pool_pick(struct pool_rt *p, uint64_t now_ms, uint64_t rnd,
			  const struct pick_hint *h);

/* The pool's retry budget, full (at start). */
void pool_retry_init(struct pool_rt *p);
/* May a request of <p> be retried now? Takes one retry from the budget when it may. */
int pool_retry_allowed(struct pool_rt *p);
/* Every request adds its share (retry_budget_pct) to the budget. */
void pool_retry_earn(struct pool_rt *p);

/* A connection to <b> failed: keep it out of rotation for the pool's fail_timeout_ms. */
void backend_mark_failed(struct backend *b, uint64_t now_ms);
/*
 * A response head from <b> arrived <ttfb_us> after the request went out, with <status>.
 * Feeds the latency estimate and histogram, and outlier ejection (a run of 5xx, or latency
 * far above the pool's other backends). Called once per response, by any worker.
 */
void backend_observe(struct pool_rt *p, struct backend *b, uint64_t now_ms, uint64_t ttfb_us,
		     int status);

#endif
