/*
 * llm.h - what balance: llm keeps per backend and per request (policy/lb_llm.c decides).
 *
 * Per backend: a prefix index (policy/prefix_index.h) of the prompt blocks its KV cache
 * holds, fed by the prompts sent to it (or, when exact is set, by the engine's own events:
 * then routing adds its guesses apart, as pending blocks (policy/prefix_pending.h) that the
 * events confirm or that expire, so that a request close behind a similar one finds its
 * blocks before the engine has reported them), and a fit of its time to first token against the
 * blocks it had to compute (policy/ttft_fit.h), its mean time from first byte to end, and
 * the expected service times of the requests it serves for us now (each one's prefill as
 * fitted for the blocks it missed, plus the mean decode), which the pick reads as plain
 * atomics: how soon a slot frees depends on what holds the slots. Until a backend's own samples
 * suffice for a line, the pool's fit over all its backends stands in (backends of a pool are mostly
 * alike), and before that the prior. Per request: the prompt's block hashes, read from the buffered
 * body once, in an array lent by the worker (kept for reuse: no allocation per request once
 * warm), held until the response head (a queued or retried request is picked for again),
 * then given back.
 */
#ifndef ACCELNET_RUNTIME_LLM_H
#define ACCELNET_RUNTIME_LLM_H

#include "http/jsonview.h"
#include "policy/lb.h"
#include "policy/prefix_feed.h"
#include "policy/prefix_index.h"
#include "policy/prefix_pending.h"
#include "policy/ttft_fit.h"

#include <stdatomic.h>
#include <stdint.h>

#define LLM_MAX_BLOCKS 1024 /* blocks read from one prompt: 256 KiB at 256-byte blocks */
/* With kv_events: how long the blocks a pick sent stay pending without the engine's
 * BlockStored (its queue, its prefill and the events' batching, with room to spare), and the
 * table's room, per block of the index (a backend's blocks in flight are a small share of
 * its cache) */
#define LLM_PENDING_MS 5000
#define LLM_PENDING_SHARE 4 /* cache_blocks / 4 entries, and at least LLM_MAX_BLOCKS */

/* A fit of time to first token, shared by the workers. */
struct llm_fit {
	atomic_flag busy;     /* one sample at a time; a sample meeting another is dropped */
	struct ttft_fit fit;  /* under busy */
	int ready;	      /* under busy: ttft_fit_ready() */
	atomic_uint base_us;  /* the solved line, for the pick */
	atomic_uint block_us; /* ... */
};

struct llm_backend {
	struct prefix_index *prefix;
	/* kept by the engine's KV events: routing's guesses go to <pending> (control/kvsub.c
	 * clears it while the events' thread is lost) */
	_Atomic int exact;
	/* with the engine's events: the blocks sent there that they have not confirmed yet,
	 * read with the index while exact (control/kvsub.c confirms, drops and clears them);
	 * NULL without kv_events */
	struct prefix_pending *pending;
	struct llm_fit
	    *pool;	    /* the pool's fit over all its backends: used until its own is ready */
	struct llm_fit fit; /* its own */
	atomic_int own_ready;  /* its own fit has a line: the pick reads it, not the pool's */
	atomic_uint decode_us; /* EWMA of a request's time after its first byte (0: none yet) */
	atomic_uint_fast64_t work_us; /* the expected service times of what it serves for us */
	atomic_uint working;	      /* ... and how many requests that is */
	atomic_uint waiting; /* requests in its pool's queue waiting for it (llm_wait_for()) */
	atomic_uint_fast64_t missed_blocks, prompt_blocks; /* for /metrics and /status */
	struct prefix_feed *feed; /* cluster: what it learns, for the others; NULL: kept here */
};

/* A pool's shared fit. 0 or -ENOMEM. */
int llm_fit_new(struct llm_fit **out);
/* A backend's state in a pool balanced by llm (lb_state gives cache_blocks), sharing the
 * pool's fit <pool>. 0 or -ENOMEM. */
int llm_backend_new(const struct lb_state *st, struct llm_fit *pool, struct llm_backend **out);
void llm_backend_free(struct llm_backend *l);
/* <l>'s index is kept by its engine's events from now on (kv_events): exact, with a table of
 * the blocks the picks sent there pending. 0 or -ENOMEM. */
int llm_follow_events(struct llm_backend *l);
/* Share what <l> learns from routing with other instances (control/cluster.c): give it a feed,
 * before any worker routes. 0 (also when its index is the engine's: nothing to share) or
 * -ENOMEM. */
int llm_share(struct llm_backend *l);

/* A queued request that was counted waiting for <from> is now waiting for <to> (either may
 * be NULL: it joins or leaves the count). Called under its pool's queue lock. */
void llm_wait_for(struct llm_backend *from, struct llm_backend *to);
/* Fill the llm fields of <c> for the backend of <l> and the request's blocks. */
void llm_candidate(const struct llm_backend *l, const uint64_t *blocks, uint32_t n,
		   struct lb_candidate *c);
/*
 * The request with the <n> blocks <blocks> went to the backend of <l>, which holds <hit> of
 * them: the time it is expected to take there is added to the backend's work and returned,
 * for llm_done() to take back, and the prompt goes into the backend's index now (unless the
 * engine's own events keep it), and to the other instances (cluster). Now, not at the answer:
 * the engine takes the prompt in as it arrives, and a request close behind it with the same
 * prefix finds it there; an index that learned only at the first token sent such requests
 * elsewhere for a whole prefill, each copying the prefix into another cache (scenario 9: 57 %
 * of blocks hit instead of 83 %; and through three instances, 60 % where one had 82 %).
 * When the engine's events keep the index, the blocks past <hit> go to its pending table
 * instead, for the same reason: the events come only after the engine admitted the prompt.
 * *<ticks> (may be NULL): the index clock's ticks that insert took, for llm_unpicked().
 */
uint32_t llm_picked(struct llm_backend *l, const uint64_t *blocks, uint32_t n, uint32_t hit,
		    uint32_t *ticks);
/* That request got no answer from the backend (it failed, was refused with 400 or more, was
 * cancelled or moved to a hedge): the blocks its pick added, the last <missed> of the <n>,
 * are taken out of this instance's index (or its pending table) again, and the index clock
 * turns back by the
 * <ticks> its pick's insert took (llm_picked's *ticks), so that a prompt without an answer
 * ages nothing (those held before stay; other instances keep what they were told until it
 * ages out there). */
void llm_unpicked(struct llm_backend *l, const uint64_t *blocks, uint32_t n, uint32_t missed,
		  uint32_t ticks);
void llm_done(struct llm_backend *l, uint32_t work_us);
/* Its backend answered (status below 400) after <us>, with <missed> of the prompt's <n> blocks
 * to compute: a request with a prompt is a sample for the fit; and when not <picked> (its
 * pick did not record it: a hedge's copy) the prompt goes into the index and to the other
 * instances now. */
void llm_answered(struct llm_backend *l, const uint64_t *blocks, uint32_t n, uint32_t missed,
		  uint64_t us, int picked);
/* The two halves of llm_answered, for an answer whose first token comes after its head (an
 * event stream: vLLM, SGLang and TGI send the head at once and the first event after the
 * prefill): its prompt is in the cache now; its time to first token is known later. */
void llm_cached(struct llm_backend *l, const uint64_t *blocks, uint32_t n, int picked);
void llm_first_token(struct llm_backend *l, uint32_t n, uint32_t missed, uint64_t us);
/* A request took <decode_us> from its first byte to its end there. */
void llm_observe_decode(struct llm_backend *l, uint64_t decode_us);

/* Scope the <n> block hashes of the body <body> by its model and cache_salt, as its strict
 * view <v> found them (none when the view was not read: a body the proxy could not hold whole
 * is scoped by nothing), in place. */
void llm_scope_blocks(uint64_t *blocks, uint32_t n, const struct json_view *v, const char *body);

/* A worker's spare block arrays. */
struct llm_spares {
	void *head;
};
/* An array of LLM_MAX_BLOCKS hashes, or NULL (out of memory). */
uint64_t *llm_blocks_get(struct llm_spares *s);
void llm_blocks_put(struct llm_spares *s, uint64_t *blocks);
void llm_spares_free(struct llm_spares *s);

#endif
