/*
 * lora.h - which backends of a pool a request for a LoRA adapter should go to, from what
 * their engines say of their adapters: vLLM's vllm:lora_requests_info names the adapters of
 * the requests running and waiting in it and max_lora, how many distinct adapters one batch
 * may hold (control/scrape.c reads it, lora_fold() keeps it).
 *
 * Per backend a snapshot: the adapters active at its last scrape (running or waiting), those
 * seen active before that it is likely to hold still (most recent first: the engine keeps
 * adapters loaded and evicts the least recently used, so of max_lora in all the oldest beyond
 * that are forgotten), its max_lora, and its base model (the model_name label of its gauges).
 * One thread writes it (the scrapes), every worker reads it: its fields are relaxed atomics,
 * so a pick that reads it while a report is folded in may see parts of two reports (a
 * preference, never a bound: every count read is clamped to the array).
 *
 * For a request naming model M, each backend the pick may offer falls in a tier:
 *   HAS   M is active there, or remembered there while fewer than max_lora adapters run: it
 *         serves M without loading it;
 *   ROOM  fewer than max_lora distinct adapters run there: it can load M beside them;
 *   FULL  max_lora adapters run there (M waits until one of them is done, then swaps one
 *         out), or its engine says nothing of adapters.
 * The pick is restricted to the best tier that has an eligible backend (a free slot): adapter
 * requests go to the backends holding the adapter while they have room, then to backends that
 * can load it without pushing a running adapter out. When no tier has an eligible backend
 * nothing is restricted: the request waits as any other. M counts as an adapter when some
 * backend has it active or remembered; a name no backend has shown counts as one when it is no
 * backend's base model and some backend named its base model (otherwise it may be the base
 * model: no tier). A request naming no model, or a base model, is never restricted.
 *
 * What a client can do with it: name a model. Where an adapter is comes only from the engines'
 * own metrics, never from a request, so no name a client makes up can steer a request to a
 * backend of its choice; the static pools[].backends[].models filter (models.h) applies first.
 * Pure: no allocation, no state.
 */
#ifndef ACCELNET_POLICY_LORA_H
#define ACCELNET_POLICY_LORA_H

#include "policy/lb.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define LORA_REMEMBER 16 /* adapters kept per backend, active and remembered */

struct lora_snap {
	_Atomic uint64_t base; /* models_hash() of its base model's name; 0: unknown */
	atomic_uint max;       /* max_lora; 0: its engine says nothing of adapters */
	atomic_uint active;    /* hash[0..active): adapters with requests running or waiting */
	atomic_uint n;	       /* hash[active..n): seen active before, most recent first */
	_Atomic uint64_t hash[LORA_REMEMBER]; /* models_hash() of each adapter's name */
};

enum lora_tier { LORA_HAS, LORA_ROOM, LORA_FULL };

/*
 * A backend's scrape said that the adapters of hashes act[0..nact) are active (duplicates
 * allowed; at most LORA_REMEMBER are kept), with <max> (max_lora) and its base model <base>
 * (0: not said). Fold that into its snapshot <s> (zeroed at first), in place: the active ones
 * first, then those it held before and still remembers, at most max(max, active) in all.
 * One writer at a time.
 */
void lora_fold(struct lora_snap *s, const uint64_t *act, size_t nact, uint32_t max, uint64_t base);

/* The tier of the backend of <s> for model <m>. */
enum lora_tier lora_tier(const struct lora_snap *s, uint64_t m);

/*
 * Model <m> is requested of the <n> candidates, backend i's snapshot snap[i] (NULL: none, as
 * FULL). When <m> is an adapter (above), restrict cand[] to the best tier that has an eligible
 * candidate: the others are made neither eligible nor busy. Returns the tier chosen, or -1
 * when nothing was restricted.
 */
int lora_prefer(const struct lora_snap *const *snap, uint64_t m, struct lb_candidate *cand,
		size_t n);

#endif
