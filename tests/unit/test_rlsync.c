/*
 * test_rlsync.c - shared rate limits by the numbers: the store's charge rule, what a sync
 * collects and how its answer is merged, and simulated instances (a clock, a store that is
 * one number per key) showing the rate they pass together stays within the documented bound,
 * with the store there and away.
 */
#include "guard/rlsync.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

static void charge_rule(void **state)
{
	(void)state;
	/* a full bucket (TAT in the past, or none yet) is charged from now */
	assert_int_equal(rlsync_charge(0, 1000, 50), 1050);
	assert_int_equal(rlsync_charge(900, 1000, 50), 1050);
	/* a bucket in use adds on */
	assert_int_equal(rlsync_charge(2000, 1000, 50), 2050);
	/* given back: never before now */
	assert_int_equal(rlsync_charge(2000, 1000, -500), 1500);
	assert_int_equal(rlsync_charge(2000, 1000, -5000), 1000);
	assert_int_equal(rlsync_charge(0, 1000, -5), 1000);
}

static void cost_is_signed_and_clamped(void **state)
{
	(void)state;
	struct ratelimit rl;
	assert_int_equal(ratelimit_init(&rl, 20, 1, 20), 0); /* 50 ms a unit */
	assert_int_equal(rlsync_cost_us(&rl, 3), 150000);
	assert_int_equal(rlsync_cost_us(&rl, -3), -150000);
	assert_int_equal(rlsync_cost_us(&rl, INT64_MAX), RLSYNC_COST_MAX);
	assert_int_equal(rlsync_cost_us(&rl, INT64_MIN), -RLSYNC_COST_MAX);
	ratelimit_fini(&rl);
}

static void collect_takes_counts_and_skips_idle_keys(void **state)
{
	(void)state;
	struct ratelimit rl;
	struct rlsync_item it[8];
	size_t cursor = 0;
	assert_int_equal(ratelimit_init(&rl, 10, 1, 5), 0);
	rl.synced = 1;
	uint64_t t = 1000000000;
	assert_int_equal(ratelimit_take(&rl, 7, t), 0);
	assert_int_equal(ratelimit_take(&rl, 7, t), 0);
	assert_int_equal(ratelimit_take_n(&rl, 9, 3, t, NULL), 0);
	ratelimit_adjust(&rl, 9, -1, t);
	assert_int_equal(rlsync_collect(&rl, t, &cursor, it, 8), 2);
	int64_t u7 = it[0].key == 7 ? it[0].units : it[1].units;
	int64_t u9 = it[0].key == 9 ? it[0].units : it[1].units;
	assert_int_equal(u7, 2);
	assert_int_equal(u9, 2);
	/* counts taken; the buckets are not full yet, so they still go (to learn the others') */
	assert_int_equal(rlsync_collect(&rl, t, &cursor, it, 8), 2);
	assert_int_equal(it[0].units, 0);
	/* once full and quiet, a key is left out */
	assert_int_equal(rlsync_collect(&rl, t + 10000000, &cursor, it, 8), 0);
	/* a table with more keys than one sync carries is gone through in turns */
	for (uint64_t k = 100; k < 110; k++)
		assert_int_equal(ratelimit_take(&rl, k, t + 20000000), 0);
	size_t a = rlsync_collect(&rl, t + 20000000, &cursor, it, 6);
	size_t b = rlsync_collect(&rl, t + 20000000, &cursor, it, 6);
	assert_int_equal(a, 6);
	assert_int_equal(b, 4 + 2); /* the other four, and two of the first six again (no counts) */
	ratelimit_fini(&rl);
}

static void apply_sets_the_shared_debt_plus_what_came_since(void **state)
{
	(void)state;
	struct ratelimit rl;
	struct rlsync_item it[2];
	size_t cursor = 0;
	assert_int_equal(ratelimit_init(&rl, 10, 1, 5), 0); /* 100 ms a unit, 500 ms a bucket */
	rl.synced = 1;
	uint64_t t = 1000000000;
	assert_int_equal(ratelimit_take(&rl, 7, t), 0);
	assert_int_equal(rlsync_collect(&rl, t, &cursor, it, 2), 1);
	assert_int_equal(ratelimit_take(&rl, 7, t), 0); /* one more after the collect */
	/* the store says the others spent a lot: 450 ms of debt with ours */
	rlsync_apply(&rl, &it[0], 450000, 1, t);
	/* 450 + 100 ms spent of a 500 ms bucket: the next unit (100 ms) waits 150 ms */
	assert_int_equal(ratelimit_take(&rl, 7, t), 150000);
	/* a slot that holds another key by now is left alone */
	struct rlsync_item other = it[0];
	other.key = 8;
	rlsync_apply(&rl, &other, 0, 1, t);
	assert_int_equal(ratelimit_take(&rl, 7, t), 150000);
	ratelimit_fini(&rl);
}

static void a_quiet_key_leaves_the_sync_and_holds_a_third(void **state)
{
	(void)state;
	struct ratelimit rl;
	struct rlsync_item it[2];
	size_t cursor = 0;
	assert_int_equal(ratelimit_init(&rl, 10, 1, 9), 0); /* 100 ms a unit, burst 9 */
	rl.synced = 1;
	rlsync_set_instances(&rl, 1, 3);
	uint64_t t = 1000000000;
	/* new to the table: a third of the burst, then refused */
	for (int i = 0; i < 3; i++)
		assert_int_equal(ratelimit_take(&rl, 7, t), 0);
	assert_true(ratelimit_take(&rl, 7, t) > 0);
	assert_int_equal(rlsync_collect(&rl, t, &cursor, it, 2), 1);
	assert_int_equal(it[0].units, 3);
	/* the store says the shared bucket is full again: the key goes quiet, no longer carried */
	rlsync_apply(&rl, &it[0], 0, 3, t + 1000000);
	assert_int_equal(rlsync_collect(&rl, t + 1000000, &cursor, it, 2), 0);
	assert_int_equal(rlsync_collect(&rl, t + 60000000, &cursor, it, 2), 0);
	/* however long it was quiet, it holds a third of the burst, not the whole */
	for (int i = 0; i < 3; i++)
		assert_int_equal(ratelimit_take(&rl, 7, t + 60000000), 0);
	assert_true(ratelimit_take(&rl, 7, t + 60000000) > 0);
	assert_int_equal(rlsync_collect(&rl, t + 60000000, &cursor, it, 2), 1);
	/* the store away: every unit costs three, whatever the key */
	rlsync_set_instances(&rl, 0, 3);
	assert_int_equal(ratelimit_take(&rl, 8, t), 0);
	assert_int_equal(ratelimit_take(&rl, 8, t), 0);
	assert_int_equal(ratelimit_take(&rl, 8, t), 0);
	assert_true(ratelimit_take(&rl, 8, t) > 0); /* 9 units' time, 3 takes */
	ratelimit_fini(&rl);
}

/* Simulated instances in front of one store, each deciding locally and syncing every
 * sync_us at its own phase; the store is one TAT per key, charged by rlsync_charge. */
struct sim {
	unsigned n;
	struct ratelimit rl[8];
	size_t cursor[8];
	uint64_t store_tat; /* the one key's shared bucket */
	int store_up;
};

static void sim_sync(struct sim *s, unsigned i, uint64_t now)
{
	struct rlsync_item it[4];
	size_t got = rlsync_collect(&s->rl[i], now, &s->cursor[i], it, 4);
	if (!s->store_up) {
		rlsync_discard(&s->rl[i]);
		rlsync_set_instances(&s->rl[i], 0, s->n);
		return;
	}
	rlsync_set_instances(&s->rl[i], 1, s->n);
	for (size_t k = 0; k < got; k++) {
		s->store_tat =
		    rlsync_charge(s->store_tat, now, rlsync_cost_us(&s->rl[i], it[k].units));
		rlsync_apply(&s->rl[i], &it[k], s->store_tat - now, s->n, now);
	}
}

/* Run <s> from <from> for <len> us, every instance offered a request every <every> us of
 * <units> units; the store away from <down_at> on (0: never). Returns the units passed. */
static uint64_t sim_run(struct sim *s, uint64_t from, uint64_t len, uint64_t every, uint64_t units,
			uint64_t sync_us, uint64_t down_at)
{
	uint64_t passed = 0;
	for (uint64_t t = from; t < from + len; t += every) {
		if (down_at && t >= down_at)
			s->store_up = 0;
		for (unsigned i = 0; i < s->n; i++) {
			uint64_t phase = sync_us * i / s->n;
			if ((t - from + phase) % sync_us < every)
				sim_sync(s, i, t);
			if (ratelimit_take_n(&s->rl[i], 42, units, t, NULL) == 0)
				passed += units;
		}
	}
	return passed;
}

static void sim_init(struct sim *s, unsigned n, unsigned per, unsigned per_s, unsigned burst)
{
	s->n = n;
	s->store_tat = 0;
	s->store_up = 1;
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(ratelimit_init(&s->rl[i], per, per_s, burst), 0);
		s->rl[i].synced = 1;
		s->cursor[i] = 0;
	}
}

static void sim_fini(struct sim *s)
{
	for (unsigned i = 0; i < s->n; i++)
		ratelimit_fini(&s->rl[i]);
	free(s);
}

static void three_instances_keep_one_rate(void **state)
{
	(void)state;
	struct sim *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	/* 20/s, burst 20, sync 100 ms; each instance offered 1000/s for a minute */
	sim_init(s, 3, 20, 1, 20);
	uint64_t passed = sim_run(s, 1000000000, 60000000, 1000, 1, 100000, 0);
	uint64_t want = 20 * 60 + 20;
	/* the bound: rate x T + burst + (N - 1) x rate x sync at most ... */
	assert_true(passed <= want + 2 * 2);
	/* ... and within 5 % either way */
	assert_true(passed * 100 >= want * 95);
	assert_true(passed * 100 <= want * 105);
	sim_fini(s);
}

static void one_instance_alone_gets_the_whole_rate(void **state)
{
	(void)state;
	struct sim *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	sim_init(s, 1, 20, 1, 20);
	uint64_t passed = sim_run(s, 1000000000, 60000000, 1000, 1, 100000, 0);
	/* never more; a little less, as a charge of a full bucket counts from when it arrives */
	assert_true(passed <= 1220 + 1);
	assert_true(passed * 100 >= 1220 * 99);
	sim_fini(s);
}

static void tokens_go_the_same_way(void **state)
{
	(void)state;
	struct sim *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	/* 60,000 tokens a minute, 10,000 at once; requests of 100 tokens */
	sim_init(s, 3, 60000, 60, 10000);
	uint64_t passed = sim_run(s, 1000000000, 60000000, 2000, 100, 100000, 0);
	uint64_t want = 60000 + 10000;
	assert_true(passed * 100 >= want * 95);
	assert_true(passed * 100 <= want * 105);
	sim_fini(s);
}

static void a_burst_is_not_spent_n_times(void **state)
{
	(void)state;
	struct sim *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	/* a token budget of 600 at one a second; requests of 108 tokens, each instance offered
	 * one every 60 ms, for 3 s: five pass, not fifteen (each instance its own burst) */
	sim_init(s, 3, 60, 60, 600);
	uint64_t passed = sim_run(s, 1000000000, 3000000, 60000, 108, 100000, 0);
	assert_true(passed <= 6 * 108);
	assert_true(passed >= 4 * 108);
	sim_fini(s);
}

static void one_busy_instance_of_three_gets_its_burst_over_a_few_syncs(void **state)
{
	(void)state;
	struct sim *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	/* three live, only the first offered requests (burst 30 at 1/s) */
	sim_init(s, 3, 1, 1, 30);
	uint64_t t = 1000000000, passed = 0;
	for (unsigned i = 0; i < 3; i++)
		sim_sync(s, i, t); /* every instance counted live */
	for (uint64_t now = t; now < t + 1000000; now += 1000) {
		if ((now - t) % 100000 == 0)
			sim_sync(s, 0, now);
		if (ratelimit_take(&s->rl[0], 42, now) == 0)
			passed++;
	}
	/* 1/3 of what is left at each sync: 28 of 30 after ten, with the second's refill */
	assert_true(passed >= 27 && passed <= 31);
	sim_fini(s);
}

static void store_away_each_takes_its_share(void **state)
{
	(void)state;
	struct sim *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	sim_init(s, 3, 30, 1, 30);
	uint64_t t0 = 1000000000;
	uint64_t first = sim_run(s, t0, 30000000, 1000, 1, 100000, 0);
	uint64_t second = sim_run(s, t0 + 30000000, 30000000, 1000, 1, 100000, t0 + 30000000);
	assert_true(first * 100 >= (30 * 30 + 30) * 95 && first * 100 <= (30 * 30 + 30) * 105);
	/* each passes 10/s: 30/s together, plus what their buckets held when it went */
	assert_true(second * 100 >= 900 * 95);
	assert_true(second <= 900 + 3 * 30);
	/* and it comes back: one rate again, without charging the outage at once */
	s->store_up = 1;
	uint64_t third = sim_run(s, t0 + 60000000, 30000000, 1000, 1, 100000, 0);
	assert_true(third * 100 >= 900 * 95 && third <= 900 + 3 * 30);
	sim_fini(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(charge_rule),
	    cmocka_unit_test(cost_is_signed_and_clamped),
	    cmocka_unit_test(collect_takes_counts_and_skips_idle_keys),
	    cmocka_unit_test(apply_sets_the_shared_debt_plus_what_came_since),
	    cmocka_unit_test(a_quiet_key_leaves_the_sync_and_holds_a_third),
	    cmocka_unit_test(three_instances_keep_one_rate),
	    cmocka_unit_test(one_instance_alone_gets_the_whole_rate),
	    cmocka_unit_test(tokens_go_the_same_way),
	    cmocka_unit_test(a_burst_is_not_spent_n_times),
	    cmocka_unit_test(one_busy_instance_of_three_gets_its_burst_over_a_few_syncs),
	    cmocka_unit_test(store_away_each_takes_its_share),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
