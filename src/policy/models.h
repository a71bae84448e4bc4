/*
 * models.h - which backends of a pool serve which model: the set a pick filters by.
 *
 * A backend may list the models (and LoRA adapters) it serves (pools[].backends[].models);
 * one that lists none serves any model. For a request naming model M, a pool's candidates
 * are the backends that list M when any does ("prefer the backend that has the adapter
 * loaded": strictly, even while they are busy or down), else the backends that list
 * nothing; when neither exists no backend of the pool serves M (404). A request naming no
 * model may go to any backend. The set is built once per config: per model name a bitmask
 * of the backends listing it, sorted by the name's 64-bit hash, so a pick does one binary
 * search and a bit test per backend, and allocates nothing.
 */
#ifndef ACCELNET_POLICY_MODELS_H
#define ACCELNET_POLICY_MODELS_H

#include "policy/lb.h"

#include <stddef.h>
#include <stdint.h>

#define MODELS_MASK_WORDS ((LB_MAX_BACKENDS + 63) / 64)

struct model_entry {
	uint64_t hash;			  /* models_hash() of the name */
	uint64_t mask[MODELS_MASK_WORDS]; /* the backends that list it */
};

struct model_set {
	struct model_entry *e; /* sorted by hash; NULL when no backend lists a model */
	size_t n;
	uint64_t any[MODELS_MASK_WORDS]; /* the backends that list nothing */
};

/* The hash models are known by: of the name s[0..n). */
uint64_t models_hash(const char *s, size_t n);

/*
 * Build <s> for <nbackends> (at most LB_MAX_BACKENDS) whose model names are names[i][0 ..
 * counts[i]). 0 or -ENOMEM. Free with models_free().
 */
int models_build(struct model_set *s, char *const *const *names, const size_t *counts,
		 size_t nbackends);
void models_free(struct model_set *s);

/*
 * The backends that may serve the model of hash <h>: a mask of MODELS_MASK_WORDS words
 * (all zero: none does), or NULL when the pool filters nothing (no backend lists models).
 */
const uint64_t *models_mask(const struct model_set *s, uint64_t h);

static inline int models_mask_has(const uint64_t *mask, size_t i)
{
	return (int)(mask[i / 64] >> (i % 64) & 1);
}

/* Does some backend serve the model of hash <h>? */
int models_served(const struct model_set *s, uint64_t h);

#endif
