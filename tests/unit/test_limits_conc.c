/*
 * test_limits_conc.c - the per-tenant concurrency cap (limits_take_hold) where tenants meet
 * in one probe window (issue 24's review): a tenant whose count lives in its second probe
 * does not open a second count when its first probe frees up (that let it pass its cap),
 * and two tenants taking and giving back at once on two threads never count in each
 * other's slot (a claim racing a count once did: a tenant alone under its cap refused).
 */
#include "guard/limits.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* The table slot a key probes first (limits.c's hash, with the table's seed 0). */
static size_t home_of(uint64_t key)
{
	return (size_t)((key ^ (key >> 31)) * 0xbf58476d1ce4e5b9u >> 20) % LIMITS_CONC_SLOTS;
}

/* A key other than <a> whose first probe is <a>'s. */
static uint64_t neighbour_of(uint64_t a)
{
	for (uint64_t k = a + 1;; k++)
		if (home_of(k) == home_of(a))
			return k;
}

static void a_freed_first_probe_opens_no_second_count(void **state)
{
	(void)state;
	struct conf_rate_limit c = {.concurrency = 1};
	struct route_limits l;
	struct limit_refusal why;
	struct conc_slot *hb, *ha, *again;
	uint64_t a = 7, b = neighbour_of(a);
	assert_int_equal(limits_init(&l, &c), 0);
	l.conc_seed = 0; /* the windows as home_of() finds them */
	assert_int_equal(limits_take_hold(&l, b, &hb, &why), 0); /* b holds a's first probe */
	assert_int_equal(limits_take_hold(&l, a, &ha, &why), 0); /* a counts in its second */
	assert_ptr_not_equal(ha, hb);
	limits_release_hold(hb); /* the first probe is free again */
	assert_int_equal(limits_take_hold(&l, a, &again, &why), -EBUSY);
	assert_string_equal(why.what, "concurrency");
	/* and b, back, counts alone: a's request is not in its count */
	assert_int_equal(limits_take_hold(&l, b, &hb, &why), 0);
	limits_release_hold(ha);
	limits_release_hold(hb);
	assert_int_equal(limits_take_hold(&l, a, &ha, &why), 0);
	limits_release_hold(ha);
	limits_fini(&l);
}

struct racer {
	struct route_limits *l;
	uint64_t tenant;
	unsigned refused;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	struct limit_refusal why;
	struct conc_slot *h;
	for (int i = 0; i < 300000; i++) {
		if (limits_take_hold(r->l, r->tenant, &h, &why) < 0) {
			r->refused++;
			continue;
		}
		limits_release_hold(h);
	}
	return NULL;
}

static void two_tenants_racing_never_count_in_each_others_slot(void **state)
{
	(void)state;
	struct conf_rate_limit c = {.concurrency = 1};
	struct route_limits l;
	assert_int_equal(limits_init(&l, &c), 0);
	l.conc_seed = 0; /* the windows as home_of() finds them */
	struct racer r[3] = {{&l, 11, 0}, {&l, neighbour_of(11), 0}, {&l, 0, 0}};
	r[2].tenant = neighbour_of(r[1].tenant);
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	/* each holds at most one at a time under a cap of one: never refused */
	assert_int_equal(r[0].refused + r[1].refused + r[2].refused, 0);
	limits_fini(&l);
}

/* RL_PROBE tenants at their cap, chosen (offline: the tenant key is an unseeded hash of the
 * client's address or identity) to fill every probe of a victim's window: the victim, with
 * no count of its own yet, shared the least busy and was refused at its first request.
 * Where each key's window lies is this table's secret (a seed of its own), so no one can aim
 * at another's: the victim counts in a slot of its own. */
static void tenants_aimed_at_a_window_do_not_refuse_its_owner(void **state)
{
	(void)state;
	struct conf_rate_limit c = {.concurrency = 1};
	struct route_limits l;
	struct limit_refusal why;
	struct conc_slot *held[RL_PROBE], *mine;
	uint64_t victim = 7, k = victim;
	assert_int_equal(limits_init(&l, &c), 0);
	for (int i = 0; i < RL_PROBE; i++) {
		k = neighbour_of(k);
		assert_int_equal(limits_take_hold(&l, k, &held[i], &why), 0);
	}
	assert_int_equal(limits_take_hold(&l, victim, &mine, &why), 0);
	for (int i = 0; i < RL_PROBE; i++)
		assert_ptr_not_equal(held[i], mine);
	limits_release_hold(mine);
	for (int i = 0; i < RL_PROBE; i++)
		limits_release_hold(held[i]);
	limits_fini(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_freed_first_probe_opens_no_second_count),
	    cmocka_unit_test(two_tenants_racing_never_count_in_each_others_slot),
	    cmocka_unit_test(tenants_aimed_at_a_window_do_not_refuse_its_owner),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
