/*
 * hist.h - latency histograms with fixed buckets, shared by every worker thread.
 *
 * One histogram per measured thing (a backend's time to first byte, the gaps between its
 * response chunks, a pool's queue wait). Adding a sample is two relaxed atomic adds; the
 * admin endpoint reads the counts as Prometheus cumulative buckets. The bounds suit both a
 * web backend (milliseconds) and an accelerator (seconds of generation).
 */
#ifndef ACCELNET_OBS_HIST_H
#define ACCELNET_OBS_HIST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HIST_BUCKETS 14 /* the last one is +Inf */

struct hist {
	atomic_uint_fast64_t count[HIST_BUCKETS];
	atomic_uint_fast64_t sum_us;
};

/* Upper bounds of the finite buckets, in milliseconds, ascending. */
extern const double hist_bounds_ms[HIST_BUCKETS - 1];

void hist_add(struct hist *h, uint64_t us);
/* Samples so far. */
uint64_t hist_total(const struct hist *h);
/* The smallest bucket bound at or below which a fraction <q> of the samples fall, in ms:
 * 0 when empty, -1 when it is the +Inf bucket. For /status summaries. */
double hist_quantile_ms(const struct hist *h, double q);

#endif
