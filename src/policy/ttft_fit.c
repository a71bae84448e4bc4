/*
 * ttft_fit.c - an online least-squares line through (blocks missed, time to first token)
 * (see ttft_fit.h).
 */
#include "policy/ttft_fit.h"

/* Each sample keeps this share of the weight of those before it: about the last 50 count. */
#define FORGET 0.98
/* Samples (by weight) before the line through them is believed: until then the prior's
 * slope through their mean. */
#define MIN_WEIGHT 2.5
/* The misses seen must spread over this many blocks (standard deviation) to fit a slope. */
#define MIN_SPREAD 1.0

void ttft_fit_init(struct ttft_fit *f)
{
	f->n = f->sm = f->smm = f->st = f->smt = 0;
}

void ttft_fit_add(struct ttft_fit *f, double missed, double us)
{
	if (missed < 0 || us < 0)
		return;
	f->n = f->n * FORGET + 1;
	f->sm = f->sm * FORGET + missed;
	f->smm = f->smm * FORGET + missed * missed;
	f->st = f->st * FORGET + us;
	f->smt = f->smt * FORGET + missed * us;
}

int ttft_fit_ready(const struct ttft_fit *f)
{
	if (f->n < MIN_WEIGHT)
		return 0;
	double mean_m = f->sm / f->n;
	return f->smm / f->n - mean_m * mean_m >= MIN_SPREAD * MIN_SPREAD;
}

static uint32_t clamp_us(double v)
{
	return v <= 0 ? 0 : v >= 4e9 ? 4000000000u : (uint32_t)v;
}

void ttft_fit_solve(const struct ttft_fit *f, uint32_t *base_us, uint32_t *block_us)
{
	if (f->n < 1e-9) {
		*base_us = TTFT_FIT_BASE_US;
		*block_us = TTFT_FIT_BLOCK_US;
		return;
	}
	double mean_m = f->sm / f->n, mean_t = f->st / f->n;
	double var = f->smm / f->n - mean_m * mean_m;
	double cov = f->smt / f->n - mean_m * mean_t;
	double slope = TTFT_FIT_BLOCK_US;
	if (ttft_fit_ready(f))
		slope = cov > 0 ? cov / var : 0;
	double base = mean_t - slope * mean_m;
	if (base < 0) { /* a steep line: all of the time is per block */
		base = 0;
		slope = mean_m > 0 ? mean_t / mean_m : slope;
	}
	*base_us = clamp_us(base);
	*block_us = clamp_us(slope);
}
