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

#include "core/slab.h"

#if defined(__SANITIZE_ADDRESS__)
#define BYPASS 1
#else
#define BYPASS 0
#endif

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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(records_are_zeroed_aligned_and_apart),
	    cmocka_unit_test(emptied_mappings_go_back),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
