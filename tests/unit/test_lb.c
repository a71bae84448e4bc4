/*
 * test_lb.c - the balancing policies, driven with plain arrays: their distributions, how
 * they skip ineligible backends, and that they answer -1 when nothing is eligible.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/rand.h"
#include "lb/lb.h"

static void set(struct lb_candidate *c, size_t n, const unsigned *w)
{
	for (size_t i = 0; i < n; i++)
		c[i] = (struct lb_candidate){.weight = w ? w[i] : 1, .inflight = 0, .eligible = 1};
}

static void registry(void **state)
{
	(void)state;
	assert_ptr_equal(lb_find("round-robin"), &lb_round_robin);
	assert_ptr_equal(lb_find("weighted-round-robin"), &lb_weighted_round_robin);
	assert_ptr_equal(lb_find("least-connections"), &lb_least_connections);
	assert_ptr_equal(lb_find("p2c"), &lb_p2c);
	assert_null(lb_find("random"));
	assert_non_null(strstr(lb_names(), "least-connections"));
}

static void round_robin_cycles_and_skips(void **state)
{
	(void)state;
	struct lb_candidate c[3];
	struct lb_state st = {0};
	set(c, 3, NULL);
	for (uint64_t t = 0; t < 9; t++)
		assert_int_equal(lb_round_robin.pick(&st, c, 3, t, 0), (int)(t % 3));
	c[1].eligible = 0;
	int counts[3] = {0};
	for (uint64_t t = 0; t < 300; t++)
		counts[lb_round_robin.pick(&st, c, 3, t, 0)]++;
	assert_int_equal(counts[1], 0);
	assert_int_equal(counts[0] + counts[2], 300);
	c[0].eligible = c[2].eligible = 0;
	assert_int_equal(lb_round_robin.pick(&st, c, 3, 7, 0), -1);
}

static void weighted_exact_and_smooth(void **state)
{
	(void)state;
	unsigned w[3] = {5, 1, 1};
	struct lb_candidate c[3];
	struct lb_state st = {0};
	set(c, 3, w);
	assert_int_equal(lb_weighted_round_robin.prepare(&st, w, 3), 0);
	assert_int_equal(st.nschedule, 7);
	int counts[3] = {0};
	int run = 0, longest = 0, prev = -1;
	for (uint64_t t = 0; t < 7000; t++) {
		int i = lb_weighted_round_robin.pick(&st, c, 3, t, 0);
		counts[i]++;
		run = i == prev ? run + 1 : 1;
		prev = i;
		if (run > longest)
			longest = run;
	}
	assert_int_equal(counts[0], 5000);
	assert_int_equal(counts[1], 1000);
	assert_int_equal(counts[2], 1000);
	/* smooth: a's five turns are spread out (a naive weighted order gives five in a row;
	 * the smooth period a a b a c a a gives at most four across a period boundary) */
	assert_true(longest <= 4);
	/* an ineligible backend's turns go to the others */
	c[0].eligible = 0;
	memset(counts, 0, sizeof(counts));
	for (uint64_t t = 0; t < 700; t++)
		counts[lb_weighted_round_robin.pick(&st, c, 3, t, 0)]++;
	assert_int_equal(counts[0], 0);
	assert_int_equal(counts[1] + counts[2], 700);
	lb_state_free(&st);
}

static void weighted_reduces_by_gcd(void **state)
{
	(void)state;
	unsigned w[2] = {300, 100};
	struct lb_state st = {0};
	assert_int_equal(lb_weighted_round_robin.prepare(&st, w, 2), 0);
	assert_int_equal(st.nschedule, 4);
	lb_state_free(&st);
}

static void least_connections_prefers_idle(void **state)
{
	(void)state;
	struct lb_candidate c[3];
	struct lb_state st = {0};
	set(c, 3, NULL);
	c[0].inflight = 4;
	c[1].inflight = 1;
	c[2].inflight = 3;
	for (uint64_t t = 0; t < 10; t++)
		assert_int_equal(lb_least_connections.pick(&st, c, 3, t, 0), 1);
	/* per unit of weight: 4 in flight on weight 8 beats 1 on weight 1 */
	c[0].weight = 8;
	assert_int_equal(lb_least_connections.pick(&st, c, 3, 0, 0), 0);
	/* ties rotate with the ticket */
	set(c, 3, NULL);
	int counts[3] = {0};
	for (uint64_t t = 0; t < 300; t++)
		counts[lb_least_connections.pick(&st, c, 3, t, 0)]++;
	assert_int_equal(counts[0], 100);
	assert_int_equal(counts[1], 100);
	assert_int_equal(counts[2], 100);
	c[0].eligible = c[1].eligible = c[2].eligible = 0;
	assert_int_equal(lb_least_connections.pick(&st, c, 3, 0, 0), -1);
}

static void p2c_avoids_the_busiest(void **state)
{
	(void)state;
	struct lb_candidate c[4];
	struct lb_state st = {0};
	uint64_t rng = 42;
	set(c, 4, NULL);
	c[3].inflight = 100; /* the busiest can only win against itself, which never happens */
	int counts[4] = {0};
	for (int k = 0; k < 4000; k++)
		counts[lb_p2c.pick(&st, c, 4, 0, rand_next(&rng))]++;
	assert_int_equal(counts[3], 0);
	/* the others share the load */
	for (int i = 0; i < 3; i++)
		assert_true(counts[i] > 800);
	/* one eligible: always it */
	c[0].eligible = c[1].eligible = c[2].eligible = 0;
	for (int k = 0; k < 10; k++)
		assert_int_equal(lb_p2c.pick(&st, c, 4, 0, rand_next(&rng)), 3);
	c[3].eligible = 0;
	assert_int_equal(lb_p2c.pick(&st, c, 4, 0, rand_next(&rng)), -1);
}

static void p2c_two_distinct_choices(void **state)
{
	(void)state;
	/* with two backends and one busier, p2c must always compare both and pick the idle */
	struct lb_candidate c[2];
	struct lb_state st = {0};
	uint64_t rng = 7;
	set(c, 2, NULL);
	c[0].inflight = 1;
	for (int k = 0; k < 1000; k++)
		assert_int_equal(lb_p2c.pick(&st, c, 2, 0, rand_next(&rng)), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(registry),
		cmocka_unit_test(round_robin_cycles_and_skips),
		cmocka_unit_test(weighted_exact_and_smooth),
		cmocka_unit_test(weighted_reduces_by_gcd),
		cmocka_unit_test(least_connections_prefers_idle),
		cmocka_unit_test(p2c_avoids_the_busiest),
		cmocka_unit_test(p2c_two_distinct_choices),
	};
	return cmocka_run_group_tests_name("balancers", tests, NULL, NULL);
}
