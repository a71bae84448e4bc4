/*
 * test_lora.c - the adapter policy (policy/lora.h): a scrape's report folded into a backend's
 * snapshot (active first, then remembered, at most max_lora), each backend's tier for a model,
 * and the pick restricted to the best tier that has room, never for the base model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "policy/lora.h"

enum { A = 11, B = 12, C = 13, D = 14, BASE = 99 };

static void report(struct lora_snap *s, const uint64_t *act, size_t n, uint32_t max)
{
	lora_fold(s, act, n, max, BASE);
}

/* A snapshot of its own that reported <act> once. */
static void fresh(struct lora_snap *s, const uint64_t *act, size_t n, uint32_t max)
{
	memset(s, 0, sizeof(*s));
	report(s, act, n, max);
}

static void fold_keeps_active_then_remembered(void **state)
{
	(void)state;
	struct lora_snap s;
	fresh(&s, (uint64_t[]){A, B, A}, 3, 3); /* a duplicate counts once */
	assert_int_equal(s.active, 2);
	assert_int_equal(s.n, 2);
	report(&s, (uint64_t[]){C}, 1, 3); /* A and B remembered after C */
	assert_int_equal(s.active, 1);
	assert_int_equal(s.n, 3);
	assert_true(s.hash[0] == C && s.hash[1] == A && s.hash[2] == B);
	report(&s, (uint64_t[]){D}, 1, 3); /* max_lora 3: B, the oldest, is gone */
	assert_int_equal(s.n, 3);
	assert_true(s.hash[0] == D && s.hash[1] == C && s.hash[2] == A);
	report(&s, NULL, 0, 0); /* the engine stopped saying anything of adapters */
	assert_int_equal(s.n, 0);
	assert_true(s.base == BASE);
	uint64_t many[LORA_REMEMBER + 4];
	for (size_t i = 0; i < LORA_REMEMBER + 4; i++)
		many[i] = 100 + i;
	report(&s, many, LORA_REMEMBER + 4, 1000); /* bounded, whatever the engine says */
	assert_int_equal(s.n, LORA_REMEMBER);
	assert_int_equal(s.active, LORA_REMEMBER);
}

static void tiers(void **state)
{
	(void)state;
	struct lora_snap none, s;
	fresh(&none, NULL, 0, 0);
	assert_int_equal(lora_tier(&none, A), LORA_FULL); /* says nothing of adapters */
	fresh(&s, (uint64_t[]){A}, 1, 2);
	assert_int_equal(lora_tier(&s, A), LORA_HAS);
	assert_int_equal(lora_tier(&s, B), LORA_ROOM);
	report(&s, (uint64_t[]){B, C}, 2, 2); /* two run: full; A forgotten beyond max */
	assert_int_equal(lora_tier(&s, B), LORA_HAS);
	assert_int_equal(lora_tier(&s, D), LORA_FULL);
	report(&s, (uint64_t[]){B}, 1, 2); /* C remembered, a slot free */
	assert_int_equal(lora_tier(&s, C), LORA_HAS);
	assert_int_equal(lora_tier(&s, A), LORA_ROOM); /* forgotten: B and C hold the two */
	s.n = 1000;				       /* a torn read is still bounded */
	s.active = 2000;
	(void)lora_tier(&s, D);
}

static void pick(struct lb_candidate *c, size_t n, const uint8_t *eligible)
{
	for (size_t i = 0; i < n; i++)
		c[i] = (struct lb_candidate){
		    .weight = 1, .eligible = eligible[i], .busy = !eligible[i]};
}

static void prefer_best_tier_with_room(void **state)
{
	(void)state;
	struct lora_snap has, room, full;
	fresh(&has, (uint64_t[]){A}, 1, 2);
	fresh(&room, NULL, 0, 2);
	fresh(&full, (uint64_t[]){C, D}, 2, 2);
	const struct lora_snap *snap[4] = {&has, &has, &room, &full};
	struct lb_candidate c[4];
	pick(c, 4, (uint8_t[]){1, 1, 1, 1});
	assert_int_equal(lora_prefer(snap, A, c, 4), LORA_HAS);
	assert_true(c[0].eligible && c[1].eligible && !c[2].eligible && !c[3].eligible);
	assert_true(!c[2].busy && !c[3].busy);
	/* its backends at their caps: one with a free adapter slot, never the full one */
	pick(c, 4, (uint8_t[]){0, 0, 1, 1});
	assert_int_equal(lora_prefer(snap, A, c, 4), LORA_ROOM);
	assert_true(!c[0].busy && !c[1].busy && c[2].eligible && !c[3].eligible);
	/* an adapter no engine shows: a free adapter slot first */
	pick(c, 4, (uint8_t[]){1, 1, 1, 1});
	assert_int_equal(lora_prefer(snap, B, c, 4), LORA_ROOM);
	assert_true(c[0].eligible && c[1].eligible && c[2].eligible && !c[3].eligible);
	/* nowhere room: nothing restricted, the request waits as any other */
	pick(c, 4, (uint8_t[]){0, 0, 0, 0});
	assert_int_equal(lora_prefer(snap, A, c, 4), -1);
	assert_true(c[0].busy && c[1].busy && c[2].busy && c[3].busy);
}

static void base_model_and_unknown_names_not_restricted(void **state)
{
	(void)state;
	struct lora_snap has, full;
	fresh(&has, (uint64_t[]){A}, 1, 2);
	fresh(&full, (uint64_t[]){C, D}, 2, 2);
	const struct lora_snap *snap[2] = {&has, &full};
	struct lb_candidate c[2];
	pick(c, 2, (uint8_t[]){1, 1});
	assert_int_equal(lora_prefer(snap, BASE, c, 2), -1); /* the base model goes anywhere */
	assert_true(c[0].eligible && c[1].eligible);
	/* engines that name no base model: a name none shows may be the base model */
	has.base = full.base = 0;
	assert_int_equal(lora_prefer(snap, B, c, 2), -1);
	assert_int_equal(lora_prefer(snap, A, c, 2), LORA_HAS); /* one they show is an adapter */
	/* engines that say nothing of adapters: never restricted */
	struct lora_snap quiet;
	fresh(&quiet, NULL, 0, 0);
	const struct lora_snap *q[2] = {&quiet, &quiet};
	pick(c, 2, (uint8_t[]){1, 1});
	assert_int_equal(lora_prefer(q, A, c, 2), -1);
	const struct lora_snap *missing[2] = {NULL, &has};
	assert_int_equal(lora_prefer(missing, A, c, 2), LORA_HAS);
	assert_true(!c[0].eligible && c[1].eligible);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(fold_keeps_active_then_remembered),
	    cmocka_unit_test(tiers),
	    cmocka_unit_test(prefer_best_tier_with_room),
	    cmocka_unit_test(base_model_and_unknown_names_not_restricted),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
