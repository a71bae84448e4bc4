/*
 * test_smallmem.c - the small-block free lists: a freed block of a class is the next one
 * handed out for that class, up to SMALLMEM_KEEP kept; calloc zeroes, realloc keeps the bytes
 * (in place while they fit the class), blocks are 16-byte aligned, and a request past the
 * largest class is served whole. Under AddressSanitizer every call is malloc's, and only
 * what malloc promises is checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/smallmem.h"
#include "core/sanitize.h"

#define BYPASS ACCELNET_ASAN

static void reused_by_class(void **state)
{
	(void)state;
	struct smallmem m = {0};
	void *a = smallmem_alloc(&m, 40); /* the 64-byte class */
	assert_non_null(a);
	assert_int_equal((uintptr_t)a % 16, 0);
	memset(a, 0xab, 40);
	smallmem_free(&m, a);
	void *b = smallmem_alloc(&m, 64);
	if (!BYPASS)
		assert_ptr_equal(a, b);
	void *c = smallmem_alloc(&m, 20); /* another class: a block of its own */
	assert_ptr_not_equal(b, c);
	smallmem_free(&m, b);
	smallmem_free(&m, c);
	smallmem_free(&m, NULL);
	smallmem_drain(&m);
	assert_int_equal(m.nfree[0] + m.nfree[1], 0);
}

static void kept_up_to_the_bound(void **state)
{
	(void)state;
	struct smallmem m = {0};
	enum { N = SMALLMEM_KEEP + 50 };
	static void *p[N];
	for (int i = 0; i < N; i++)
		assert_non_null(p[i] = smallmem_alloc(&m, 100));
	for (int i = 0; i < N; i++)
		smallmem_free(&m, p[i]);
	if (!BYPASS)
		assert_int_equal(m.nfree[2], SMALLMEM_KEEP); /* the 128-byte class */
	smallmem_drain(&m);
	assert_int_equal(m.nfree[2], 0);
	assert_null(m.free[2]);
}

static void calloc_realloc_and_large(void **state)
{
	(void)state;
	struct smallmem m = {0};
	char *a = smallmem_alloc(&m, 200);
	memset(a, 'x', 200);
	smallmem_free(&m, a);
	char *z = smallmem_calloc(&m, 50, 4); /* 200 bytes, maybe that block again: zeroed */
	for (int i = 0; i < 200; i++)
		assert_int_equal(z[i], 0);
	memcpy(z, "hello", 6);
	char *g = smallmem_realloc(&m, z, 250); /* still the 256-byte class */
	if (!BYPASS)
		assert_ptr_equal(g, z);
	g = smallmem_realloc(&m, g, 3000);
	assert_string_equal(g, "hello");
	char *big = smallmem_realloc(&m, g, 100000); /* past the classes: malloc'd whole */
	assert_non_null(big);
	assert_string_equal(big, "hello");
	memset(big, 'y', 100000);
	char *back = smallmem_realloc(&m, big, 10); /* and back into a class */
	assert_int_equal(back[9], 'y');
	smallmem_free(&m, back);
	assert_null(smallmem_calloc(&m, SIZE_MAX / 2, 4)); /* overflows: refused before malloc */
	if (!BYPASS) /* (AddressSanitizer's malloc aborts on such a size by default) */
		assert_null(smallmem_alloc(&m, SIZE_MAX - 8));
	smallmem_drain(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(reused_by_class),
	    cmocka_unit_test(kept_up_to_the_bound),
	    cmocka_unit_test(calloc_realloc_and_large),
	};
	return cmocka_run_group_tests_name("smallmem", tests, NULL, NULL);
}
