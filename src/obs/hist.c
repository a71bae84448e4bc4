/*
 * hist.c - fixed-bucket latency histograms (see hist.h).
 */
#include "obs/hist.h"

const double hist_bounds_ms[HIST_BUCKETS - 1] = {1,   5,    10,	  25,	50,    100,  250,
						 500, 1000, 2500, 5000, 10000, 30000};

size_t hist_bucket(uint64_t us)
{
	size_t i = 0;
	while (i < HIST_BUCKETS - 1 && (double)us > hist_bounds_ms[i] * 1000.0)
		i++;
	return i;
}

void hist_add(struct hist *h, uint64_t us)
{
	atomic_fetch_add_explicit(&h->count[hist_bucket(us)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

void hist_read(const struct hist *h, struct hist_snap *snap)
{
	for (size_t i = 0; i < HIST_BUCKETS; i++)
		snap->count[i] += atomic_load_explicit(&h->count[i], memory_order_relaxed);
	snap->sum_us += atomic_load_explicit(&h->sum_us, memory_order_relaxed);
}

uint64_t hist_total(const struct hist_snap *s)
{
	uint64_t n = 0;
	for (size_t i = 0; i < HIST_BUCKETS; i++)
		n += s->count[i];
	return n;
}

double hist_quantile_ms(const struct hist_snap *s, double q)
{
	uint64_t total = hist_total(s), seen = 0;
	if (!total)
		return 0;
	for (size_t i = 0; i < HIST_BUCKETS - 1; i++) {
		seen += s->count[i];
		if ((double)seen >= q * (double)total)
			return hist_bounds_ms[i];
	}
	return -1;
}
