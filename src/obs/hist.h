/*
 * hist.h - latency histograms with fixed buckets.
 *
 * The bounds suit both a web backend (milliseconds) and an accelerator (seconds of
 * generation). The registry (metrics.h) keeps a histogram's counts in per-thread shards and
 * sums them into a struct hist_snap when scraped; the writers read quantiles and Prometheus
 * cumulative buckets from that snapshot.
 *
 * struct hist is the older shared form, still fed by a few call sites: adding a sample is two
 * relaxed atomic adds. It goes once every site writes to the registry instead.
 */
#ifndef ACCELNET_OBS_HIST_H
#define ACCELNET_OBS_HIST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HIST_BUCKETS 14 /* the last one is +Inf */

/* Upper bounds of the finite buckets, in milliseconds, ascending. */
extern const double hist_bounds_ms[HIST_BUCKETS - 1];

/* A histogram as read: counts per bucket (not cumulative) and the sum of samples. */
struct hist_snap {
	uint64_t count[HIST_BUCKETS];
	uint64_t sum_us;
};

struct hist {
	atomic_uint_fast64_t count[HIST_BUCKETS];
	atomic_uint_fast64_t sum_us;
};

/* The bucket a sample of <us> microseconds falls in. */
size_t hist_bucket(uint64_t us);

void hist_add(struct hist *h, uint64_t us);
/* Add what <h> holds now to <snap>. */
void hist_read(const struct hist *h, struct hist_snap *snap);

/* Samples in <s>. */
uint64_t hist_total(const struct hist_snap *s);
/* The smallest bucket bound at or below which a fraction <q> of the samples fall, in ms:
 * 0 when empty, -1 when it is the +Inf bucket. For /status summaries. */
double hist_quantile_ms(const struct hist_snap *s, double q);

#endif
