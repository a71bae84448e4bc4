/*
 * test_models.c - the per-pool model set: a model listed by some backends goes to those
 * only, one listed by none to the backends that list nothing, a pool where every backend
 * lists its models serves no other, and a pool with no lists filters nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "policy/models.h"

static uint64_t h(const char *name)
{
	return models_hash(name, strlen(name));
}

static void listed_unlisted_and_none(void **state)
{
	(void)state;
	char *a[] = {"base", "lora-a"}, *b[] = {"base"};
	char *const *names[] = {a, b, NULL};
	size_t counts[] = {2, 1, 0};
	struct model_set s;
	assert_int_equal(models_build(&s, names, counts, 3), 0);
	const uint64_t *m = models_mask(&s, h("lora-a"));
	assert_non_null(m);
	assert_true(models_mask_has(m, 0) && !models_mask_has(m, 1) && !models_mask_has(m, 2));
	m = models_mask(&s, h("base"));
	assert_true(models_mask_has(m, 0) && models_mask_has(m, 1) && !models_mask_has(m, 2));
	m = models_mask(&s, h("other")); /* listed by none: the backend that lists nothing */
	assert_true(!models_mask_has(m, 0) && !models_mask_has(m, 1) && models_mask_has(m, 2));
	assert_true(models_served(&s, h("other")));
	models_free(&s);

	/* every backend lists: an unknown model has no backend */
	char *const *all[] = {a, b};
	assert_int_equal(models_build(&s, all, counts, 2), 0);
	assert_false(models_served(&s, h("other")));
	assert_true(models_served(&s, h("lora-a")));
	models_free(&s);

	/* no lists at all: nothing is filtered */
	char *const *none[] = {NULL, NULL};
	size_t zero[] = {0, 0};
	assert_int_equal(models_build(&s, none, zero, 2), 0);
	assert_null(models_mask(&s, h("base")));
	assert_true(models_served(&s, h("base")));
	models_free(&s);
}

static void backends_past_64(void **state)
{
	(void)state;
	static char *m0[] = {"m"};
	char *const *names[LB_MAX_BACKENDS] = {0};
	size_t counts[LB_MAX_BACKENDS] = {0};
	names[200] = m0, counts[200] = 1;
	names[3] = m0, counts[3] = 1;
	struct model_set s;
	assert_int_equal(models_build(&s, names, counts, LB_MAX_BACKENDS), 0);
	const uint64_t *m = models_mask(&s, h("m"));
	for (size_t i = 0; i < LB_MAX_BACKENDS; i++)
		assert_int_equal(models_mask_has(m, i), i == 3 || i == 200);
	m = models_mask(&s, h("x"));
	for (size_t i = 0; i < LB_MAX_BACKENDS; i++)
		assert_int_equal(models_mask_has(m, i), i != 3 && i != 200);
	models_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(listed_unlisted_and_none),
	    cmocka_unit_test(backends_past_64),
	};
	return cmocka_run_group_tests_name("models", tests, NULL, NULL);
}
