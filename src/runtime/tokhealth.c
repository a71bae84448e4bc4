/*
 * tokhealth.c - a model's tokenizer state from a window of its counts (see tokhealth.h).
 */
#include "runtime/tokhealth.h"

#include <string.h>

void tokhealth_init(struct tokhealth *h, int degraded)
{
	memset(h, 0, sizeof(*h));
	h->degraded = degraded != 0;
	atomic_store_explicit(&h->state, degraded ? TOKHEALTH_DEGRADED : TOKHEALTH_UP,
			      memory_order_relaxed);
}

enum tokhealth_state tokhealth_tick(struct tokhealth *h, uint64_t tried, uint64_t failed)
{
	h->at = (h->at + 1) % (TOKHEALTH_WINDOW + 1);
	h->tried[h->at] = tried;
	h->failed[h->at] = failed;
	if (h->ticks < TOKHEALTH_WINDOW)
		h->ticks++;
	/* the oldest sample in the ring: <ticks> ago (before the first tick: zero counts) */
	unsigned old = (h->at + TOKHEALTH_WINDOW + 1 - h->ticks) % (TOKHEALTH_WINDOW + 1);
	uint64_t t = tried - h->tried[old], f = failed - h->failed[old];
	if (f > t)
		f = t; /* (the two are summed a moment apart) */
	if (t < TOKHEALTH_MIN_TRIED)
		h->failing = 0;
	else if (!h->failing)
		h->failing = f * 2 > t;
	else
		h->failing = f * 4 > t;
	enum tokhealth_state s = h->failing    ? TOKHEALTH_FAILING
				 : h->degraded ? TOKHEALTH_DEGRADED
					       : TOKHEALTH_UP;
	atomic_store_explicit(&h->win_tried, t, memory_order_relaxed);
	atomic_store_explicit(&h->win_failed, f, memory_order_relaxed);
	atomic_store_explicit(&h->state, s, memory_order_relaxed);
	return s;
}

const char *tokhealth_state_name(enum tokhealth_state s)
{
	return s == TOKHEALTH_FAILING ? "failing" : s == TOKHEALTH_DEGRADED ? "degraded" : "up";
}
