/*
 * test_ratelimit.c - GCRA by the clock it is given: a burst, then one request per interval;
 * keys apart; the wait it reports; a full table shares slots rather than failing.
 */
#include "guard/ratelimit.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

static void burst_then_rate(void **state)
{
	(void)state;
	struct ratelimit rl;
	assert_int_equal(ratelimit_init(&rl, 10, 1, 3), 0); /* 10/s: one per 100 ms; burst 3 */
	uint64_t t = 1000000000;
	for (int i = 0; i < 3; i++)
		assert_int_equal(ratelimit_take(&rl, 42, t), 0);
	uint64_t wait = ratelimit_take(&rl, 42, t);
	assert_int_equal(wait, 100000); /* the next one in 100 ms */
	assert_true(ratelimit_take(&rl, 42, t + 99999) > 0);
	assert_int_equal(ratelimit_take(&rl, 42, t + 100000), 0);
	assert_true(ratelimit_take(&rl, 42, t + 100000) > 0);
	/* another key has its own bucket */
	assert_int_equal(ratelimit_take(&rl, 43, t), 0);
	/* after a long pause the burst is back, no more */
	uint64_t later = t + 10000000;
	for (int i = 0; i < 3; i++)
		assert_int_equal(ratelimit_take(&rl, 42, later), 0);
	assert_true(ratelimit_take(&rl, 42, later) > 0);
	ratelimit_fini(&rl);
}

static void per_minute_and_default_burst(void **state)
{
	(void)state;
	struct ratelimit rl;
	assert_int_equal(ratelimit_init(&rl, 120, 60, 0), 0); /* 2/s: burst 2 */
	assert_int_equal(ratelimit_take(&rl, 7, 5000000), 0);
	assert_int_equal(ratelimit_take(&rl, 7, 5000000), 0);
	assert_int_equal(ratelimit_take(&rl, 7, 5000000), 500000);
	ratelimit_fini(&rl);
	assert_int_equal(ratelimit_init(&rl, 0, 1, 0), -EINVAL);
}

static void many_keys_never_fail(void **state)
{
	(void)state;
	struct ratelimit rl;
	assert_int_equal(ratelimit_init(&rl, 1, 3600, 1),
			 0); /* one an hour: every slot stays busy */
	unsigned allowed = 0;
	for (uint64_t k = 1; k <= 3 * RL_SLOTS; k++)
		allowed += ratelimit_take(&rl, k * 0x9e3779b97f4a7c15u, 1000000) == 0;
	/* every key got a slot or shared one: at least a table's worth went through, and the
	 * sharing was counted */
	assert_true(allowed >= RL_SLOTS / 2);
	assert_true(atomic_load(&rl.shared) > 0);
	ratelimit_fini(&rl);
}

/* tokens: 6000 a minute (100/s), a bucket of 1000; a take of n costs n units */
static void weighted_take_refund_and_debt(void **state)
{
	(void)state;
	struct ratelimit rl;
	struct rl_state st;
	assert_int_equal(ratelimit_init(&rl, 6000, 60, 1000), 0);
	uint64_t t = 50000000;
	assert_int_equal(ratelimit_take_n(&rl, 9, 600, t, &st), 0);
	assert_int_equal(st.limit, 1000);
	assert_int_equal(st.remaining, 400);
	assert_int_equal(st.reset_us, 6000000); /* 600 tokens at 100/s */
	/* 500 more do not fit: 100 tokens short, one second */
	assert_int_equal(ratelimit_take_n(&rl, 9, 500, t, &st), 1000000);
	assert_int_equal(st.remaining, 400);
	/* the request used 100 of its 600: 500 come back, and now 500 fit */
	ratelimit_adjust(&rl, 9, -500, t);
	assert_int_equal(ratelimit_take_n(&rl, 9, 500, t, &st), 0);
	assert_int_equal(st.remaining, 400);
	/* a refund never fills the bucket past its burst */
	ratelimit_adjust(&rl, 9, -100000, t);
	assert_int_equal(ratelimit_take_n(&rl, 9, 1000, t, NULL), 0);
	assert_true(ratelimit_take_n(&rl, 9, 1, t, NULL) > 0);
	/* charged after the fact: a debt of 200 beyond the empty bucket is paid back first */
	ratelimit_adjust(&rl, 9, 200, t);
	assert_int_equal(ratelimit_take_n(&rl, 9, 1, t, NULL), 2010000);
	/* a take larger than the bucket waits for a full one, then leaves the debt */
	uint64_t full = t + 100000000;
	assert_int_equal(ratelimit_take_n(&rl, 9, 3000, full, &st), 0);
	assert_int_equal(st.remaining, 0);
	assert_int_equal(st.reset_us, 30000000);
	assert_int_equal(ratelimit_take_n(&rl, 9, 1, full, NULL), 20010000);
	/* over a minute of saturation the bucket lets through its burst and the rate, no more */
	struct ratelimit m;
	assert_int_equal(ratelimit_init(&m, 6000, 60, 1000), 0);
	uint64_t got = 0;
	for (uint64_t now = 0; now < 60000000; now += 1000)
		while (ratelimit_take_n(&m, 5, 7, now + 1, NULL) == 0)
			got += 7;
	assert_true(got <= 7000 && got > 6990);
	ratelimit_fini(&m);
	ratelimit_fini(&rl);
}

/* The table slot a key probes first, as ratelimit.c placed keys with no seed of its own. */
static size_t unseeded_home(uint64_t key)
{
	return ((size_t)(key ^ (key >> 29)) * 0x9e3779b97f4a7c15u >> 16) % RL_SLOTS;
}

/* RL_PROBE keys chosen offline to fill every probe of a victim's window (a key is an unseeded
 * hash of a client's address: one with many addresses can choose), each keeping its bucket
 * spent: the victim, new to the table, shared the bucket of one of them and was refused at
 * its first request. Where a key's probes lie is the table's secret now (a seed of its own):
 * the victim has a bucket of its own. */
static void keys_aimed_at_a_window_do_not_spend_its_owners_bucket(void **state)
{
	(void)state;
	struct ratelimit rl;
	uint64_t t = 1000000000, victim = 7, k = victim;
	assert_int_equal(ratelimit_init(&rl, 10, 1, 3), 0);
	for (int i = 0; i < RL_PROBE; i++) {
		do
			k++;
		while (unseeded_home(k) != unseeded_home(victim));
		while (ratelimit_take(&rl, k, t) == 0)
			;
	}
	assert_int_equal(ratelimit_take(&rl, victim, t), 0);
	ratelimit_fini(&rl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(burst_then_rate),
	    cmocka_unit_test(per_minute_and_default_burst),
	    cmocka_unit_test(many_keys_never_fail),
	    cmocka_unit_test(weighted_take_refund_and_debt),
	    cmocka_unit_test(keys_aimed_at_a_window_do_not_spend_its_owners_bucket),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
