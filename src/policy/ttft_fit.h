/*
 * ttft_fit.h - learning what a prefill costs on one backend: time to first token against
 * the prompt blocks it had to compute.
 *
 * An inference engine's time to first token is, to a good approximation, a fixed part (the
 * request's overhead, one decode step) plus a part proportional to the prompt tokens it does
 * not hold in its prefix cache. The balancer `llm` needs both constants per backend and
 * must not be hand-tuned per benchmark, so they are fitted online: a least-squares line
 * through (blocks missed, microseconds to first byte) with exponential forgetting, so the
 * fit follows a backend whose speed changes. Before any sample it answers the prior
 * (TTFT_FIT_BASE_US, TTFT_FIT_BLOCK_US); until a few samples with misses of different sizes
 * have come, the prior's slope through the samples' mean (a line needs two distinct points).
 * The slope never goes negative and the fixed part never below zero: noise cannot make a
 * miss look cheap.
 * Pure arithmetic, no locks: the owner serialises add().
 */
#ifndef ACCELNET_POLICY_TTFT_FIT_H
#define ACCELNET_POLICY_TTFT_FIT_H

#include <stdint.h>

#define TTFT_FIT_BASE_US 20000 /* prior: 20 ms to the first token when all is cached */
#define TTFT_FIT_BLOCK_US 2000 /* prior: 2 ms per block to compute */

struct ttft_fit {
	double n, sm, smm, st, smt; /* decayed sums: weight, x, x^2, y, xy */
};

/* No samples: the prior. */
void ttft_fit_init(struct ttft_fit *f);
/* One sample: <missed> blocks computed, <us> to the first byte. */
void ttft_fit_add(struct ttft_fit *f, double missed, double us);
/* Enough samples, with misses of different sizes, for a line of its own? */
int ttft_fit_ready(const struct ttft_fit *f);
/* The fitted fixed part and per-block cost, in microseconds. */
void ttft_fit_solve(const struct ttft_fit *f, uint32_t *base_us, uint32_t *block_us);

#endif
