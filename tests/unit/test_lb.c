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
#include "policy/lb.h"

static int pick(const struct lb_ops *ops, const struct lb_state *st, const struct lb_candidate *c,
		size_t n, uint64_t ticket, uint64_t rnd)
{
	struct lb_draw d = {.ticket = ticket, .rnd = rnd};
	return ops->pick(st, c, n, &d);
}

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
	assert_ptr_equal(lb_find("peak-ewma"), &lb_peak_ewma);
	assert_ptr_equal(lb_find("consistent-hash"), &lb_consistent_hash);
	assert_ptr_equal(lb_find("prefix-affinity"), &lb_prefix_affinity);
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
		assert_int_equal(pick(&lb_round_robin, &st, c, 3, t, 0), (int)(t % 3));
	c[1].eligible = 0;
	int counts[3] = {0};
	for (uint64_t t = 0; t < 300; t++)
		counts[pick(&lb_round_robin, &st, c, 3, t, 0)]++;
	assert_int_equal(counts[1], 0);
	assert_int_equal(counts[0] + counts[2], 300);
	/* the turns of the one out go to the others alike, not to the one after it */
	assert_int_equal(counts[0], 150);
	assert_int_equal(counts[2], 150);
	c[0].eligible = c[2].eligible = 0;
	assert_int_equal(pick(&lb_round_robin, &st, c, 3, 7, 0), -1);
}

static void weighted_exact_and_smooth(void **state)
{
	(void)state;
	unsigned w[3] = {5, 1, 1};
	struct lb_candidate c[3];
	struct lb_state st = {0};
	set(c, 3, w);
	assert_int_equal(lb_weighted_round_robin.prepare(&st, w, NULL, 3), 0);
	assert_int_equal(st.nschedule, 7);
	int counts[3] = {0};
	int run = 0, longest = 0, prev = -1;
	for (uint64_t t = 0; t < 7000; t++) {
		int i = pick(&lb_weighted_round_robin, &st, c, 3, t, 0);
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
		counts[pick(&lb_weighted_round_robin, &st, c, 3, t, 0)]++;
	assert_int_equal(counts[0], 0);
	assert_int_equal(counts[1] + counts[2], 700);
	lb_state_free(&st);
}

static void weighted_reduces_by_gcd(void **state)
{
	(void)state;
	unsigned w[2] = {300, 100};
	struct lb_state st = {0};
	assert_int_equal(lb_weighted_round_robin.prepare(&st, w, NULL, 2), 0);
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
		assert_int_equal(pick(&lb_least_connections, &st, c, 3, t, 0), 1);
	/* per unit of weight: 4 in flight on weight 8 beats 1 on weight 1 */
	c[0].weight = 8;
	assert_int_equal(pick(&lb_least_connections, &st, c, 3, 0, 0), 0);
	/* ties rotate with the ticket */
	set(c, 3, NULL);
	int counts[3] = {0};
	for (uint64_t t = 0; t < 300; t++)
		counts[pick(&lb_least_connections, &st, c, 3, t, 0)]++;
	assert_int_equal(counts[0], 100);
	assert_int_equal(counts[1], 100);
	assert_int_equal(counts[2], 100);
	c[0].eligible = c[1].eligible = c[2].eligible = 0;
	assert_int_equal(pick(&lb_least_connections, &st, c, 3, 0, 0), -1);
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
		counts[pick(&lb_p2c, &st, c, 4, 0, rand_next(&rng))]++;
	assert_int_equal(counts[3], 0);
	/* the others share the load */
	for (int i = 0; i < 3; i++)
		assert_true(counts[i] > 800);
	/* one eligible: always it */
	c[0].eligible = c[1].eligible = c[2].eligible = 0;
	for (int k = 0; k < 10; k++)
		assert_int_equal(pick(&lb_p2c, &st, c, 4, 0, rand_next(&rng)), 3);
	c[3].eligible = 0;
	assert_int_equal(pick(&lb_p2c, &st, c, 4, 0, rand_next(&rng)), -1);
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
		assert_int_equal(pick(&lb_p2c, &st, c, 2, 0, rand_next(&rng)), 1);
}

/* --- peak-ewma --- */

static struct lb_candidate cand(unsigned lat_ms, unsigned inflight, unsigned slots)
{
	struct lb_candidate c = {
	    .weight = 1, .inflight = inflight, .slots = slots, .latency_us = lat_ms * 1000};
	c.eligible = !slots || inflight < slots;
	c.busy = !c.eligible;
	return c;
}

static struct lb_state ewma_state;

static int ewma(const struct lb_candidate *c, size_t n, unsigned waiting, uint64_t rnd)
{
	struct lb_draw d = {.rnd = rnd, .waiting = waiting};
	return lb_peak_ewma.pick(&ewma_state, c, n, &d);
}

static void peak_ewma_prefers_fast_and_counts_load(void **state)
{
	(void)state;
	uint64_t rng = 3;
	/* two backends: p2c compares both, so the faster always wins while it has room */
	struct lb_candidate c[2] = {cand(300, 0, 4), cand(100, 0, 4)};
	for (int k = 0; k < 100; k++)
		assert_int_equal(ewma(c, 2, 0, rand_next(&rng)), 1);
	/* 3 of 4 slots taken: 100 ms * 7/4 still beats an idle 300 ms */
	c[1] = cand(100, 3, 4);
	assert_int_equal(ewma(c, 2, 0, rand_next(&rng)), 1);
	/* no cap: the backend queues itself, so 3 waiting at 100 ms lose to an idle 300 ms */
	c[0] = cand(300, 0, 0);
	c[1] = cand(100, 3, 0);
	assert_int_equal(ewma(c, 2, 0, rand_next(&rng)), 0);
	/* an idle unmeasured backend looks cheapest, so it gets measured */
	c[0] = cand(0, 0, 4);
	c[1] = cand(100, 0, 4);
	assert_int_equal(ewma(c, 2, 0, rand_next(&rng)), 0);
	/* with its probe in flight it is no longer preferred */
	c[0] = cand(0, 1, 4);
	assert_int_equal(ewma(c, 2, 0, rand_next(&rng)), 1);
	c[0].eligible = c[1].eligible = 0;
	assert_int_equal(ewma(c, 2, 0, rand_next(&rng)), LB_NONE);
	/* a reported load saturated at UINT32_MAX (an engine's /metrics) is the most, not
	 * none: inflight + 1 wrapped to 0 and made it the cheapest */
	c[0] = cand(100, UINT32_MAX, 0);
	c[1] = cand(100, 0, 0);
	for (int k = 0; k < 20; k++)
		assert_int_equal(ewma(c, 2, 0, rand_next(&rng)), 1);
}

/* Play a burst of <n> picks, each staying in flight; count where they went. */
static void burst(struct lb_candidate *c, size_t nc, int n, int *counts)
{
	uint64_t rng = 17;
	for (int k = 0; k < n; k++) {
		int i = ewma(c, nc, 0, rand_next(&rng));
		assert_true(i >= 0);
		counts[i]++;
		c[i].inflight++;
		c[i].eligible = !c[i].slots || c[i].inflight < c[i].slots;
		c[i].busy = !c[i].eligible;
	}
}

/* An opening burst at a pool with one backend nobody has timed yet: one request probes it,
 * the rest do not all land on it (they did, while it read as free until its first answer). */
static void peak_ewma_probes_an_unmeasured_backend_once(void **state)
{
	(void)state;
	/* no cap, as fast as the measured one: after the probe it is costed as the slowest
	 * measured (the same here), so the burst splits */
	struct lb_candidate c[2] = {cand(100, 0, 0), cand(0, 0, 0)};
	int counts[2] = {0};
	burst(c, 2, 8, counts);
	assert_true(counts[1] >= 1 && counts[1] <= 5);
	assert_true(counts[0] >= 3);
	/* with caps: the fresh one gets its probe, then the measured ones' free slots come
	 * first while they are cheaper than the slowest with one more */
	struct lb_candidate d[3] = {cand(100, 0, 8), cand(300, 0, 8), cand(0, 0, 8)};
	int dc[3] = {0};
	burst(d, 3, 6, dc);
	assert_int_equal(dc[2], 1);
	/* the fresh one is costed as the slowest (300 ms), not better */
	d[0] = cand(100, 0, 4), d[1] = cand(300, 0, 4), d[2] = cand(0, 1, 4);
	uint64_t rng = 9;
	for (int k = 0; k < 50; k++)
		assert_int_not_equal(ewma(d, 3, 0, rand_next(&rng)), 2);
	/* once measured, costed as measured */
	d[2] = cand(50, 1, 4);
	int fast = 0;
	for (int k = 0; k < 300; k++)
		fast += ewma(d, 3, 0, rand_next(&rng)) == 2;
	assert_true(fast > 100);
	/* none measured: load alone decides, one probe each before any gets a second */
	struct lb_candidate e[4] = {cand(0, 0, 0), cand(0, 0, 0), cand(0, 0, 0), cand(0, 0, 0)};
	int ec[4] = {0};
	burst(e, 4, 8, ec);
	for (int i = 0; i < 4; i++)
		assert_true(ec[i] >= 1 && ec[i] <= 3);
	/* the only eligible backend is taken, measured or not */
	struct lb_candidate f[2] = {cand(0, 3, 0), cand(100, 4, 4)};
	assert_int_equal(ewma(f, 2, 0, 1), 0);
}

static void peak_ewma_waits_for_a_fast_slot(void **state)
{
	(void)state;
	/* three fast backends full (4 slots, 100 ms: a slot frees every 100/12 ms), one
	 * free slot on a backend three times slower */
	struct lb_candidate c[4] = {cand(100, 4, 4), cand(100, 4, 4), cand(100, 4, 4),
				    cand(300, 0, 4)};
	/* by default a free slot is always taken */
	ewma_state.wait_for_faster = 0;
	assert_int_equal(ewma(c, 4, 0, 1), 3);
	ewma_state.wait_for_faster = 1;
	/* waiting w: (w + 1) * 100/12 ms + 100 ms < 300 ms while w + 1 < 24 */
	assert_int_equal(ewma(c, 4, 0, 1), LB_WAIT);
	assert_int_equal(ewma(c, 4, 22, 1), LB_WAIT);
	assert_int_equal(ewma(c, 4, 23, 1), 3);
	/* no busy backend faster than the free one: take it */
	c[3] = cand(90, 0, 4);
	assert_int_equal(ewma(c, 4, 0, 1), 3);
	/* an unmeasured free backend is never passed over */
	c[3] = cand(0, 0, 4);
	assert_int_equal(ewma(c, 4, 0, 1), 3);
	/* a busy backend that is down (neither eligible nor busy) frees nothing */
	c[3] = cand(300, 0, 4);
	c[0].busy = c[1].busy = c[2].busy = 0;
	assert_int_equal(ewma(c, 4, 0, 1), 3);
	ewma_state.wait_for_faster = 0;
}

/* --- consistent hash and prefix affinity --- */

static const char *const hnames[4] = {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"};

static int hashed(const struct lb_state *st, const struct lb_candidate *c, size_t n, uint64_t key)
{
	struct lb_draw d = {.key = key, .has_key = 1, .rnd = key * 31};
	return lb_consistent_hash.pick(st, c, n, &d);
}

static void hash_spreads_and_is_stable(void **state)
{
	(void)state;
	unsigned w[4] = {1, 1, 1, 1};
	struct lb_state st4 = {0}, st3 = {0};
	struct lb_candidate c[4];
	set(c, 4, w);
	assert_int_equal(lb_consistent_hash.prepare(&st4, w, hnames, 4), 0);
	assert_int_equal(lb_consistent_hash.prepare(&st3, w, hnames, 3), 0);
	int counts[4] = {0};
	uint64_t rng = 11;
	for (int k = 0; k < 8000; k++) {
		uint64_t key = rand_next(&rng);
		int i = hashed(&st4, c, 4, key);
		assert_int_equal(hashed(&st4, c, 4, key), i); /* the same key, the same backend */
		counts[i]++;
		/* removing the fourth backend moves only the keys it had */
		if (i != 3)
			assert_int_equal(hashed(&st3, c, 3, key), i);
	}
	for (int i = 0; i < 4; i++)
		assert_true(counts[i] > 1200 && counts[i] < 2800);
	lb_state_free(&st4);
	lb_state_free(&st3);
}

static void hash_bounded_load_and_yielding(void **state)
{
	(void)state;
	unsigned w[4] = {1, 1, 1, 1};
	struct lb_state st = {0};
	struct lb_candidate c[4];
	set(c, 4, w);
	assert_int_equal(lb_prefix_affinity.prepare(&st, w, hnames, 4), 0);
	assert_int_equal(st.load_factor_pct, 125);
	uint64_t key = 12345;
	int home = hashed(&st, c, 4, key);
	/* home carries 7 of 10 in flight: the bound is ceil(1.25 * 11 / 4) = 4, so it yields,
	 * always to the same next backend */
	c[home].inflight = 7;
	c[(home + 1) % 4].inflight = 3;
	int next = hashed(&st, c, 4, key);
	assert_int_not_equal(next, home);
	assert_int_equal(hashed(&st, c, 4, key), next);
	/* below the bound again (1 < ceil(1.25 * 5 / 4) = 2): back home */
	c[home].inflight = 1;
	assert_int_equal(hashed(&st, c, 4, key), home);
	/* saturated (at its cap): yields too */
	c[home].eligible = 0;
	c[home].busy = 1;
	assert_int_not_equal(hashed(&st, c, 4, key), home);
	/* every other backend over its bound: still served, by an eligible one */
	set(c, 4, w);
	for (int i = 0; i < 4; i++)
		c[i].inflight = 50;
	c[home].eligible = 0;
	int any = hashed(&st, c, 4, key);
	assert_true(any >= 0 && any != home);
	for (int i = 0; i < 4; i++)
		c[i].eligible = 0;
	assert_int_equal(hashed(&st, c, 4, key), LB_NONE);
	/* no key: the less loaded of two */
	set(c, 4, w);
	c[0].inflight = c[1].inflight = c[2].inflight = 9;
	struct lb_draw d = {.rnd = 5};
	int counts[4] = {0};
	for (int k = 0; k < 400; k++) {
		d.rnd = rand_next(&d.rnd);
		counts[lb_prefix_affinity.pick(&st, c, 4, &d)]++;
	}
	assert_true(counts[3] > 150);
	lb_state_free(&st);
}

/* One hot prefix, every request in flight at once: where each went. */
static void prefix_burst(const struct lb_state *st, struct lb_candidate *c, size_t n, int k,
			 int *counts)
{
	for (int r = 0; r < k; r++) {
		struct lb_draw d = {.key = 777, .has_key = 1, .rnd = (uint64_t)r};
		int i = lb_prefix_affinity.pick(st, c, n, &d);
		assert_true(i >= 0);
		counts[i]++;
		c[i].inflight++;
	}
}

/* prefix-affinity's bound is against the other backends' mean: on 2 or 3 backends without
 * max_concurrency a hot prefix spills once its home carries 3 x its peers (it never did: 300 %
 * of the mean over all backends is more than everything in flight there). */
static void prefix_affinity_spills_on_small_pools(void **state)
{
	(void)state;
	unsigned w[4] = {1, 1, 1, 1};
	struct lb_state st = {0};
	struct lb_candidate c[4];
	assert_int_equal(lb_prefix_affinity.prepare(&st, w, hnames, 2), 0);
	st.load_factor_pct = 300; /* the default conf/ reads in */
	set(c, 2, w);
	int counts[4] = {0};
	struct lb_draw d = {.key = 777, .has_key = 1};
	int home = lb_prefix_affinity.pick(&st, c, 2, &d);
	/* the other idle: three at home (bound ceil(3 x 1) = 3), the 4th spills */
	prefix_burst(&st, c, 2, 3, counts);
	assert_int_equal(counts[home], 3);
	prefix_burst(&st, c, 2, 1, counts);
	assert_int_equal(counts[!home], 1);
	/* then home takes up to 3 x (1 + 1) = 6 before the next spill: 8 at once -> 6 and 2 */
	prefix_burst(&st, c, 2, 4, counts);
	assert_int_equal(counts[home], 6);
	assert_int_equal(counts[!home], 2);
	/* a deep burst settles near 3 : 1 */
	prefix_burst(&st, c, 2, 92, counts);
	assert_true(counts[home] >= 70 && counts[home] <= 78);
	/* low load stays home (never a bound below 2) */
	set(c, 2, w);
	c[home].inflight = 1;
	assert_int_equal(lb_prefix_affinity.pick(&st, c, 2, &d), home);
	/* one backend up: nowhere to spill */
	c[!home].eligible = 0;
	c[home].inflight = 50;
	assert_int_equal(lb_prefix_affinity.pick(&st, c, 2, &d), home);
	lb_state_free(&st);

	/* three backends: the hot prefix reaches past its home too */
	assert_int_equal(lb_prefix_affinity.prepare(&st, w, hnames, 3), 0);
	st.load_factor_pct = 300;
	set(c, 3, w);
	memset(counts, 0, sizeof(counts));
	prefix_burst(&st, c, 3, 12, counts);
	/* home takes while under 3 x the mean of the other two (plus this one): 8, and the
	 * overflow always to the same next backend: 4; the third is left alone */
	home = lb_prefix_affinity.pick(&st,
				       (struct lb_candidate[3]){{.weight = 1, .eligible = 1},
								{.weight = 1, .eligible = 1},
								{.weight = 1, .eligible = 1}},
				       3, &d);
	int used = 0;
	for (int i = 0; i < 3; i++)
		used += counts[i] > 0;
	assert_int_equal(used, 2);
	assert_int_equal(counts[home], 8);
	lb_state_free(&st);

	/* consistent-hash keeps Mirrokni's bound over the whole pool's mean: at 125 % on 2
	 * backends, the other idle, home yields at 2 (ceil(1.25 x 3 / 2) = 2) */
	st = (struct lb_state){0};
	assert_int_equal(lb_consistent_hash.prepare(&st, w, hnames, 2), 0);
	set(c, 2, w);
	home = hashed(&st, c, 2, 777);
	c[home].inflight = 2;
	assert_int_equal(hashed(&st, c, 2, 777), !home);
	c[home].inflight = 1;
	assert_int_equal(hashed(&st, c, 2, 777), home);
	lb_state_free(&st);
}

static void hash_weights_take_more_keys(void **state)
{
	(void)state;
	unsigned w[2] = {3, 1};
	struct lb_state st = {0};
	struct lb_candidate c[2];
	set(c, 2, w);
	assert_int_equal(lb_consistent_hash.prepare(&st, w, hnames, 2), 0);
	int counts[2] = {0};
	uint64_t rng = 5;
	for (int k = 0; k < 8000; k++)
		counts[hashed(&st, c, 2, rand_next(&rng))]++;
	assert_true(counts[0] > 5000 && counts[0] < 7000);
	lb_state_free(&st);
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
	    cmocka_unit_test(peak_ewma_prefers_fast_and_counts_load),
	    cmocka_unit_test(peak_ewma_probes_an_unmeasured_backend_once),
	    cmocka_unit_test(peak_ewma_waits_for_a_fast_slot),
	    cmocka_unit_test(hash_spreads_and_is_stable),
	    cmocka_unit_test(hash_bounded_load_and_yielding),
	    cmocka_unit_test(prefix_affinity_spills_on_small_pools),
	    cmocka_unit_test(hash_weights_take_more_keys),
	};
	return cmocka_run_group_tests_name("balancers", tests, NULL, NULL);
}
