/*
 * test_evict.c - the eviction policies: each keeps its byte budget and hands back exactly
 * what it stored; and a simulation of lru against sieve on a skewed (Zipf) trace and on the
 * same trace with one-time scans mixed in, at several cache sizes. The traces are fixed
 * (seeded), so the hit ratios are too: the table it prints is docs/cache.md's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/evict.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

#define OBJECTS 10000u	  /* the popular population */
#define REQUESTS 400000u  /* per trace */
#define SCAN_EVERY 20000u /* scan trace: after this many requests ... */
#define SCAN_LENGTH 4000u /* ... this many objects read once, never again */
#define IDS (OBJECTS + (REQUESTS / SCAN_EVERY + 1) * SCAN_LENGTH)

static double cdf[OBJECTS];
static uint32_t *trace;
static size_t trace_len;

/* Zipf over OBJECTS with exponent <alpha>: the cumulative weights. */
static void zipf_init(double alpha)
{
	double sum = 0;
	for (unsigned i = 0; i < OBJECTS; i++)
		sum += 1.0 / pow(i + 1, alpha);
	double acc = 0;
	for (unsigned i = 0; i < OBJECTS; i++) {
		acc += 1.0 / pow(i + 1, alpha) / sum;
		cdf[i] = acc;
	}
}

static uint32_t zipf_draw(void)
{
	double u = (double)(next_rand() >> 11) / (double)(1ull << 53);
	unsigned lo = 0, hi = OBJECTS - 1;
	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		if (cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* popularity rank scattered over the ids, so nothing favours low ids */
	return (uint32_t)((lo * 2654435761u) % OBJECTS);
}

static void make_trace(int scans)
{
	uint32_t scan_id = OBJECTS;
	trace_len = 0;
	for (unsigned r = 0; r < REQUESTS; r++) {
		if (scans && r && r % SCAN_EVERY == 0)
			for (unsigned k = 0; k < SCAN_LENGTH; k++)
				trace[trace_len++] = scan_id++;
		trace[trace_len++] = zipf_draw();
	}
}

static struct evict_item items[IDS];
static unsigned char stored[IDS];

/* The hit ratio of <ops> holding <capacity> objects (each of size 1) on the trace. */
static double simulate(const struct evict_ops *ops, uint64_t capacity)
{
	struct evict e = {.ops = ops};
	ops->init(&e);
	memset(stored, 0, sizeof(stored));
	uint64_t hits = 0;
	for (size_t i = 0; i < trace_len; i++) {
		uint32_t id = trace[i];
		if (stored[id]) {
			hits++;
			ops->touch(&e, &items[id]);
			continue;
		}
		while (e.bytes + 1 > capacity) {
			struct evict_item *v = ops->victim(&e);
			assert_non_null(v);
			stored[v - items] = 0;
		}
		items[id].size = 1;
		ops->insert(&e, &items[id]);
		stored[id] = 1;
	}
	assert_true(e.bytes <= capacity);
	return (double)hits / (double)trace_len;
}

static const double sizes[] = {0.01, 0.025, 0.05, 0.10, 0.20};

/* lru and sieve at each size; 1 when sieve's hit ratio is at least lru's + <margin> at
 * every size. Prints the rows. */
static int compare(const char *name, double margin)
{
	int ok = 1;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint64_t cap = (uint64_t)(sizes[k] * OBJECTS);
		double lru = simulate(&evict_lru, cap), sieve = simulate(&evict_sieve, cap);
		printf("| %s | %.1f%% (%llu) | %.2f%% | %.2f%% | %+.2f |\n", name, sizes[k] * 100,
		       (unsigned long long)cap, lru * 100, sieve * 100, (sieve - lru) * 100);
		ok &= sieve >= lru + margin;
	}
	return ok;
}

static void sieve_beats_lru_on_zipf_and_scans(void **state)
{
	(void)state;
	trace = malloc(sizeof(*trace) * (REQUESTS + (REQUESTS / SCAN_EVERY + 1) * SCAN_LENGTH));
	assert_non_null(trace);
	printf("| trace | cache size (objects) | lru hits | sieve hits | sieve - lru (points) |\n");
	zipf_init(0.9);
	make_trace(0);
	assert_true(compare("Zipf 0.9", 0.0));
	zipf_init(1.1);
	make_trace(0);
	assert_true(compare("Zipf 1.1", 0.0));
	zipf_init(0.9);
	make_trace(1);
	/* one-time scans push lru's popular objects out; sieve lets them pass */
	assert_true(compare("Zipf 0.9 + scans", 0.01));
	free(trace);
}

static void budget_and_removal(void **state)
{
	(void)state;
	const struct evict_ops *all[] = {evict_find("lru"), evict_find("sieve")};
	assert_null(evict_find("lfu"));
	for (size_t p = 0; p < 2; p++) {
		struct evict e = {.ops = all[p]};
		struct evict_item it[8];
		e.ops->init(&e);
		for (int i = 0; i < 8; i++) {
			it[i].size = (uint64_t)(i + 1) * 100;
			e.ops->insert(&e, &it[i]);
		}
		assert_int_equal(e.bytes, 3600);
		e.ops->touch(&e, &it[0]);
		e.ops->remove(&e, &it[3]); /* purged */
		assert_int_equal(e.bytes, 3200);
		assert_int_equal(e.objects, 7);
		unsigned seen = 0;
		struct evict_item *v;
		while ((v = e.ops->victim(&e)))
			seen |= 1u << (v - it);
		assert_int_equal(seen, 0xffu & ~(1u << 3)); /* each stored one back, once */
		assert_int_equal(e.bytes, 0);
		assert_int_equal(e.objects, 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(budget_and_removal),
	    cmocka_unit_test(sieve_beats_lru_on_zipf_and_scans),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
