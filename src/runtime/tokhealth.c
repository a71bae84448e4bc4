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

enum tokhealth_state tokhealth_tick(struct tokhealth *h, uint64_t tried, uint64_t failed,
				    tokhealth_plain_fn plain, void *arg)
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
	int most;      /* the window says the tokenizer fails */
	if (t < TOKHEALTH_MIN_TRIED)
		most = 0;
	else if (!h->failing && !h->texts_failing)
		most = f * 2 > t;
	else
		most = f * 4 > t;
	/* ... and it fails on a plain text too, or the failures were the texts' */
	h->failing = most && !plain(arg);
	h->texts_failing = most && !h->failing;
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
