/*
 * test_spend_math.c - spend budgets by the numbers: amounts read exactly into micro-units,
 * windows, costs rounded up and saturating, the spend word's reserve and settle (a window
 * that turns starts afresh, nothing goes below zero), and the budget table under threads that
 * reserve at once: what passes together stays within the budget; more tenants than it holds
 * never share a slot (the rest are refused), and a hold grows within the budget only.
 */
#include "guard/budget.h"
#include "policy/spend_math.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

static void amounts_are_exact_micro_units(void **state)
{
	(void)state;
	uint64_t v = 0;
	struct {
		const char *s;
		uint64_t micros;
	} good[] = {{"0", 0},
		    {"1", 1000000},
		    {"0.15", 150000},
		    {"0.075", 75000},
		    {"0.000001", 1},
		    {"12.5", 12500000},
		    {"1000000", 1000000000000ull},
		    {"007.10", 7100000}};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(spend_parse_amount(good[i].s, &v), 0);
		assert_int_equal(v, good[i].micros);
	}
	const char *bad[] = {"",   ".5",	"1.",  "-1",   "+1",  "1e3", " 1",
			     "1 ", "0.0000001", "1,5", "0x10", "nan", "inf", "1.2.3"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(spend_parse_amount(bad[i], &v), -EINVAL);
	assert_int_equal(spend_parse_amount("1000000.000001", &v), -ERANGE);
	assert_int_equal(spend_parse_amount("99999999999999999999999999", &v), -ERANGE);
}

static void windows_of_any_length(void **state)
{
	(void)state;
	uint64_t s = 0;
	assert_int_equal(spend_parse_window("1d", &s), 0);
	assert_int_equal(s, 86400);
	assert_int_equal(spend_parse_window("30d", &s), 0);
	assert_int_equal(s, 30 * 86400);
	assert_int_equal(spend_parse_window("90s", &s), 0);
	assert_int_equal(s, 90);
	assert_int_equal(spend_parse_window("15m", &s), 0);
	assert_int_equal(s, 900);
	assert_int_equal(spend_parse_window("3660d", &s), 0);
	assert_int_equal(spend_parse_window("3661d", &s), -ERANGE);
	assert_int_equal(spend_parse_window("0d", &s), -ERANGE);
	assert_int_equal(spend_parse_window("1w", &s), -EINVAL);
	assert_int_equal(spend_parse_window("d", &s), -EINVAL);
	assert_int_equal(spend_parse_window("1", &s), -EINVAL);
	assert_int_equal(spend_parse_window("1dd", &s), -EINVAL);
	assert_int_equal(spend_parse_window("99999999999999999999d", &s), -ERANGE);
	/* a day's windows start at midnight UTC */
	assert_int_equal(spend_window_of(86400 * 5 + 3, 86400), 5);
	assert_int_equal(spend_window_left(86400 * 5 + 3, 86400), 86400 - 3);
}

static void costs_round_up_and_saturate(void **state)
{
	(void)state;
	/* $0.15 in, $0.075 cached, $0.60 out per million tokens */
	struct spend_price p = {.input = 150000, .cached_input = 75000, .output = 600000};
	/* 1000 prompt tokens, 10 completion: 150 + 6 micro-units */
	assert_int_equal(spend_cost(&p, 1000, 0, 10), 156);
	/* 800 of them cached: 200 x 0.15 + 800 x 0.075 + 6 = 30 + 60 + 6 */
	assert_int_equal(spend_cost(&p, 1000, 800, 10), 96);
	/* more cached than prompt counts as the prompt */
	assert_int_equal(spend_cost(&p, 100, 5000, 0), spend_cost(&p, 100, 100, 0));
	/* one token costs 0.15 micro-units: rounded up, never free */
	assert_int_equal(spend_cost(&p, 1, 0, 0), 1);
	assert_int_equal(spend_cost(&p, 0, 0, 0), 0);
	/* a backend reporting any 19 digits saturates */
	assert_int_equal(spend_cost(&p, UINT64_MAX, 0, UINT64_MAX), SPEND_SPENT_MAX);
	struct spend_price dear = {.input = 1000000ull * SPEND_MICROS, .output = 0};
	assert_int_equal(spend_cost(&dear, 1ull << 40, 0, 0), SPEND_SPENT_MAX);
}

static void the_word_reserves_settles_and_turns(void **state)
{
	(void)state;
	uint64_t w = 0, next = 0;
	/* window 7, budget 100 */
	assert_int_equal(spend_word_reserve(w, 7, 60, 100, &next), 1);
	w = next;
	assert_int_equal(spend_word_spent(w, 7), 60);
	assert_int_equal(spend_word_reserve(w, 7, 41, 100, &next), 0);
	assert_int_equal(spend_word_reserve(w, 7, 40, 100, &next), 1);
	w = next;
	assert_int_equal(spend_word_spent(w, 7), 100);
	/* the first settles at 10: 50 left over */
	w = spend_word_settle(w, 7, 60, 10);
	assert_int_equal(spend_word_spent(w, 7), 50);
	/* a settlement past its reservation may pass the budget; nothing more passes */
	w = spend_word_settle(w, 7, 40, 90);
	assert_int_equal(spend_word_spent(w, 7), 100);
	assert_int_equal(spend_word_reserve(w, 7, 1, 100, &next), 0);
	/* the window turns: nothing spent in 8, and a late settlement from 7 changes nothing */
	assert_int_equal(spend_word_spent(w, 8), 0);
	assert_int_equal(spend_word_reserve(w, 8, 100, 100, &next), 1);
	w = next;
	assert_int_equal(spend_word_settle(w, 7, 60, 0), w);
	/* never below zero */
	assert_int_equal(spend_word_spent(spend_word_settle(w, 8, 500, 0), 8), 0);
	/* never past the word's room */
	assert_int_equal(spend_word_spent(spend_word_settle(w, 8, 0, UINT64_MAX), 8),
			 SPEND_SPENT_MAX);
	/* a cost larger than the budget never passes */
	assert_int_equal(spend_word_reserve(0, 1, 101, 100, &next), 0);
	assert_int_equal(spend_word_reserve(0, 1, UINT64_MAX, UINT64_MAX, &next), 0);
}

#define THREADS 8
#define TRIES 2000

struct racer {
	struct route_budget *b;
	uint64_t tenant;
	unsigned passed;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	for (unsigned i = 0; i < TRIES; i++) {
		struct budget_hold h = {0};
		uint64_t spent;
		if (budget_reserve(r->b, r->tenant, 7, 1000, &h, &spent) == 0) {
			r->passed++;
			budget_settle(&h, 5); /* cost less than reserved: 2 back */
		}
	}
	return NULL;
}

static void racing_workers_never_pass_the_budget(void **state)
{
	(void)state;
	struct conf_budget c = {.per_tenant = 10000, .window_s = 86400};
	struct route_budget b;
	assert_int_equal(budget_init(&b, &c), 0);
	pthread_t t[THREADS];
	struct racer r[THREADS];
	for (unsigned i = 0; i < THREADS; i++) {
		r[i] = (struct racer){.b = &b, .tenant = 42 + i % 2};
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	unsigned passed[2] = {0, 0};
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		passed[i % 2] += r[i].passed;
	}
	for (unsigned k = 0; k < 2; k++) {
		/* each reserved 7 and settled at 5: they pass while 7 more fit, so 1999
		 * (9995 spent), whatever the interleaving, and not one more */
		assert_int_equal(passed[k], (10000 - 7) / 5 + 1);
		struct budget_hold h = {0};
		uint64_t spent = 0;
		assert_int_equal(budget_reserve(&b, 42 + k, 6, 1000, &h, &spent), -EAGAIN);
		assert_int_equal(spent, 9995);
		/* the next window starts afresh */
		assert_int_equal(budget_reserve(&b, 42 + k, 1, 1000 + 86400, &h, &spent), 0);
	}
	budget_fini(&b);
}

static void a_sync_sends_what_came_and_takes_the_total(void **state)
{
	(void)state;
	struct conf_budget c = {.per_tenant = 1000, .window_s = 100};
	struct route_budget b;
	assert_int_equal(budget_init(&b, &c), 0);
	b.synced = 1;
	struct budget_hold h = {0}, h2 = {0};
	struct budget_sync_item it[4];
	uint64_t spent = 0;
	size_t cursor = 0;
	/* 300 reserved, settled at 200: the sync carries 200 */
	assert_int_equal(budget_reserve(&b, 7, 300, 1050, &h, &spent), 0);
	budget_settle(&h, 200);
	assert_int_equal(budget_collect(&b, 1050, &cursor, it, 4), 1);
	assert_int_equal(it[0].key, 7);
	assert_int_equal(it[0].window, 10);
	assert_int_equal(it[0].micros, 200);
	/* meanwhile 100 more here; the store says the others spent 600 (800 with ours) */
	assert_int_equal(budget_reserve(&b, 7, 100, 1051, &h2, &spent), 0);
	budget_apply(&b, &it[0], 800, 1052);
	assert_int_equal(budget_reserve(&b, 7, 101, 1052, &h, &spent), -EAGAIN);
	assert_int_equal(spent, 900);
	/* the next sync carries only the 100 since */
	assert_int_equal(budget_collect(&b, 1052, &cursor, it, 4), 1);
	assert_int_equal(it[0].micros, 100);
	/* an answer that comes after the window turned changes nothing */
	budget_apply(&b, &it[0], 0, 1100);
	assert_int_equal(budget_reserve(&b, 7, 101, 1053, &h, &spent), -EAGAIN);
	/* a tenant that spent nothing in this window is not carried */
	assert_int_equal(budget_collect(&b, 1200, &cursor, it, 4), 0);
	budget_fini(&b);
}

/* More tenants than the table holds, each spending in the same window: each gets a slot of its
 * own or is refused for want of one (-ENOSPC), never charged or refused by another's spend. */
static void many_tenants_never_share_a_slot(void **state)
{
	(void)state;
	struct conf_budget c = {.per_tenant = 10, .window_s = 60};
	struct route_budget b;
	struct budget_hold h;
	uint64_t spent = 0;
	enum { TENANTS = BUDGET_SLOTS + BUDGET_SLOTS / 4 };
	static unsigned char passed[TENANTS + 1];
	size_t npassed = 0, nfull = 0;
	assert_int_equal(budget_init(&b, &c), 0);
	for (uint64_t t = 1; t <= TENANTS; t++) {
		int err = budget_reserve(&b, t * 0x9e3779b97f4a7c15u, 10, 600, &h, &spent);
		if (err == -ENOSPC) {
			nfull++;
			continue;
		}
		assert_int_equal(err, 0); /* never -EAGAIN: this tenant spent nothing yet */
		budget_settle(&h, 10);
		passed[t] = 1;
		npassed++;
	}
	assert_true(nfull > 0);
	assert_true(npassed > BUDGET_SLOTS * 9 / 10); /* the table fills before it refuses */
	/* each that passed finds its own spend, and only its own */
	for (uint64_t t = 1; t <= TENANTS; t++) {
		if (!passed[t])
			continue;
		assert_int_equal(budget_reserve(&b, t * 0x9e3779b97f4a7c15u, 1, 601, &h, &spent),
				 -EAGAIN);
		assert_int_equal(spent, 10);
	}
	/* the window turns: every slot is free again, and the refused (fewer than the slots)
	 * take theirs from tenants that have not spent in it */
	size_t again = 0;
	for (uint64_t t = 1; t <= TENANTS; t++)
		if (!passed[t]) {
			int err = budget_reserve(&b, t * 0x9e3779b97f4a7c15u, 10, 660, &h, &spent);
			assert_true(err == 0 || err == -ENOSPC);
			if (!err) {
				budget_settle(&h, 10);
				again++;
			}
		}
	assert_true(again > nfull * 9 / 10);
	budget_fini(&b);
}

/* A hold grows within the budget and no further; settling swaps all of it for the cost. */
static void a_hold_grows_within_the_budget(void **state)
{
	(void)state;
	struct conf_budget c = {.per_tenant = 100, .window_s = 60};
	struct route_budget b;
	struct budget_hold h, other;
	uint64_t spent = 0;
	assert_int_equal(budget_init(&b, &c), 0);
	assert_int_equal(budget_reserve(&b, 5, 30, 600, &h, &spent), 0);
	assert_int_equal(budget_reserve(&b, 5, 30, 600, &other, &spent), 0);
	assert_int_equal(budget_extend(&b, &h, 30, 601), 30);
	assert_int_equal(h.reserved, 60);
	assert_int_equal(budget_extend(&b, &h, 30, 602), 10); /* what is left */
	assert_int_equal(budget_extend(&b, &h, 30, 603), 0);
	assert_int_equal(budget_reserve(&b, 5, 1, 603, &other, &spent), -EAGAIN);
	assert_int_equal(spent, 100);
	budget_settle(&h, 50); /* 70 held, 50 spent: 20 back */
	assert_int_equal(budget_reserve(&b, 5, 21, 604, &other, &spent), -EAGAIN);
	assert_int_equal(spent, 80);
	/* the window turned: nothing more for a hold of the last one */
	assert_int_equal(budget_reserve(&b, 5, 10, 660, &h, &spent), 0);
	assert_int_equal(budget_extend(&b, &h, 10, 720), 0);
	budget_fini(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(amounts_are_exact_micro_units),
	    cmocka_unit_test(windows_of_any_length),
	    cmocka_unit_test(costs_round_up_and_saturate),
	    cmocka_unit_test(the_word_reserves_settles_and_turns),
	    cmocka_unit_test(racing_workers_never_pass_the_budget),
	    cmocka_unit_test(a_sync_sends_what_came_and_takes_the_total),
	    cmocka_unit_test(many_tenants_never_share_a_slot),
	    cmocka_unit_test(a_hold_grows_within_the_budget),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
