/*
 * test_slab.c - core/slab.c: records of one size from mappings of their own, given back to
 * the kernel as they empty.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/sanitize.h"
#include "core/slab.h"

#define BYPASS ACCELNET_ASAN

#define N 5000

static void records_are_zeroed_aligned_and_apart(void **state)
{
	(void)state;
	struct slab s;
	slab_init(&s, 250); /* a record of 256 */
	static unsigned char *r[N];
	for (int i = 0; i < N; i++) {
		r[i] = slab_alloc(&s);
		assert_non_null(r[i]);
		assert_int_equal((uintptr_t)r[i] % 16, 0);
		for (int k = 0; k < 250; k++)
			assert_int_equal(r[i][k], 0);
		memset(r[i], 0xab, 250);
	}
	for (int i = 1; i < N; i++) /* carved in order within a mapping: never overlapping */
		assert_true(r[i] >= r[i - 1] + 256 || r[i] + 256 <= r[i - 1]);
	for (int i = 0; i < N; i += 2)
		slab_free(&s, r[i]);
	for (int i = 0; i < N; i += 2) { /* reused, and zeroed again */
		r[i] = slab_alloc(&s);
		assert_non_null(r[i]);
		assert_int_equal(r[i][0], 0);
		assert_int_equal(r[i][249], 0);
	}
	for (int i = 0; i < N; i++)
		slab_free(&s, r[i]);
	slab_drain(&s);
	assert_int_equal(s.chunks, 0);
}

/* A burst of records, then all of them freed but a few spread over the mappings: the
 * mappings whose records are all free go back to the kernel; one record coming and going
 * maps nothing. */
static void emptied_mappings_go_back(void **state)
{
	(void)state;
	if (BYPASS)
		skip();
	struct slab s;
	slab_init(&s, 272);
	static void *r[N];
	for (int i = 0; i < N; i++)
		assert_non_null(r[i] = slab_alloc(&s));
	uint32_t peak = s.chunks;
	assert_true(peak >= N / s.per);
	for (int i = 0; i < N; i++)
		if (i != 0 && i != N - 1)
			slab_free(&s, r[i]);
	assert_int_equal(s.chunks, 2); /* the first's and the last's */
	slab_free(&s, r[0]);
	assert_int_equal(s.chunks, 1); /* kept: the last with room */
	for (int i = 0; i < 1000; i++) {
		void *p = slab_alloc(&s);
		assert_non_null(p);
		slab_free(&s, p);
		assert_int_equal(s.chunks, 1);
	}
	slab_free(&s, r[N - 1]);
	assert_int_equal(s.chunks, 1);
	slab_drain(&s);
	assert_int_equal(s.chunks, 0);
	slab_free(&s, NULL);
}

/* A tag of the record's own in each live record: a record handed out twice, or written by
 * the slab while live (a free list's link), shows as a wrong tag. */
static void tag(unsigned char *p, size_t size, uint32_t v)
{
	for (size_t k = 0; k + sizeof(v) <= size; k += sizeof(v))
		memcpy(p + k, &v, sizeof(v));
}

static void tag_check(const unsigned char *p, size_t size, uint32_t v)
{
	for (size_t k = 0; k + sizeof(v) <= size; k += sizeof(v)) {
		uint32_t got;
		memcpy(&got, p + k, sizeof(got));
		assert_int_equal(got, v);
	}
}

/* Mappings that hold a live record (a record's mapping is its address rounded down). */
static uint32_t mappings_live(void *const *r, int n)
{
	static uintptr_t seen[N];
	int k = 0;
	for (int i = 0; i < n; i++) {
		if (!r[i])
			continue;
		uintptr_t m = (uintptr_t)r[i] & ~(uintptr_t)(SLAB_CHUNK - 1);
		int j = 0;
		while (j < k && seen[j] != m)
			j++;
		if (j == k)
			seen[k++] = m;
	}
	return (uint32_t)k;
}

/* Random allocations and frees, with sizes from 16 bytes to one record a mapping (per 1,
 * where every allocation fills its mapping and every free empties it): no record handed out
 * twice or written while live, and no more than one mapping kept beyond those holding live
 * records (the last with room), at every step. */
static void random_churn_keeps_records_whole_and_mappings_few(void **state)
{
	(void)state;
	static const size_t sizes[] = {16, 200, 1000, 4000, 20000, SLAB_CHUNK - 64};
	static void *r[N];
	uint64_t x = 88172645463325252ull;
	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		struct slab s;
		slab_init(&s, sizes[z]);
		assert_true(s.per >= 1);
		int n = s.per == 1 ? 64 : 1500;
		memset(r, 0, sizeof(r));
		for (int step = 0; step < 20000; step++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			int i = (int)(x % (uint64_t)n);
			if (r[i]) {
				tag_check(r[i], s.size, (uint32_t)i * 2654435761u);
				slab_free(&s, r[i]);
				r[i] = NULL;
			} else {
				assert_non_null(r[i] = slab_alloc(&s));
				tag(r[i], s.size, (uint32_t)i * 2654435761u);
			}
			if (!BYPASS && step % 97 == 0)
				assert_true(s.chunks <= mappings_live(r, n) + 1);
		}
		for (int i = 0; i < n; i++)
			if (r[i]) {
				tag_check(r[i], s.size, (uint32_t)i * 2654435761u);
				slab_free(&s, r[i]);
			}
		if (!BYPASS)
			assert_true(s.chunks <= 1);
		slab_drain(&s);
		assert_int_equal(s.chunks, 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(records_are_zeroed_aligned_and_apart),
	    cmocka_unit_test(emptied_mappings_go_back),
	    cmocka_unit_test(random_churn_keeps_records_whole_and_mappings_few),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
