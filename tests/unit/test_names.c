/*
 * test_names.c - the bounded table of run-time label values: names interned in the order
 * met, the same name the same series, the fold past the cap (and for names it cannot hold:
 * too long, empty, with a NUL, or the fold's own), unused series read as NULL, and many
 * threads interning at once agreeing on one series per name, the last free slot's included.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "obs/names.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static size_t intern(struct name_table *t, const char *s)
{
	return names_intern(t, s, strlen(s));
}

static void interned_in_order_then_folded(void **state)
{
	(void)state;
	struct name_table *t = NULL;
	assert_int_equal(names_create(3, 8, "other", &t), 0);
	assert_int_equal(names_max(t), 3);
	assert_null(names_at(t, 0));
	assert_null(names_at(t, 3)); /* the fold, unused yet */
	assert_null(names_at(t, 4));
	assert_int_equal(intern(t, "acme"), 0);
	assert_int_equal(intern(t, "beta"), 1);
	assert_int_equal(intern(t, "acme"), 0);
	assert_int_equal(names_intern(t, "acmeX", 4), 0); /* only the given bytes */
	assert_string_equal(names_at(t, 0), "acme");
	assert_null(names_at(t, 2));
	assert_null(names_at(t, 3));
	/* names it cannot hold go to the fold, and take no slot */
	assert_int_equal(intern(t, "other"), 3);
	assert_int_equal(intern(t, "toolongname"), 3);
	assert_int_equal(names_intern(t, "", 0), 3);
	assert_int_equal(names_intern(t, "a\0b", 3), 3);
	assert_string_equal(names_at(t, 3), "other");
	assert_int_equal(intern(t, "gamma"), 2);
	assert_int_equal(intern(t, "delta"), 3); /* full */
	assert_int_equal(intern(t, "epsilon"), 3);
	assert_int_equal(intern(t, "gamma"), 2);
	assert_int_equal(intern(t, "beta"), 1);
	assert_string_equal(names_at(t, 2), "gamma");
	names_destroy(t);
}

#define THREADS 4
#define NAMES 200

static void *interner(void *arg)
{
	struct name_table *t = arg;
	static size_t seen[THREADS][NAMES];
	static _Atomic int next;
	int me = next++;
	for (int i = 0; i < NAMES; i++) {
		char name[16];
		int k = (i * 7 + me * 13) % NAMES; /* each thread in its own order */
		snprintf(name, sizeof(name), "t%d", k);
		seen[me][k] = names_intern(t, name, strlen(name));
	}
	return seen[me];
}

static void threads_agree_on_each_name(void **state)
{
	(void)state;
	struct name_table *t = NULL;
	assert_int_equal(names_create(150, 8, "other", &t), 0);
	pthread_t th[THREADS];
	size_t *got[THREADS];
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, interner, t), 0);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(th[i], (void **)&got[i]), 0);
	size_t folded = 0;
	for (int k = 0; k < NAMES; k++) {
		char name[16];
		snprintf(name, sizeof(name), "t%d", k);
		for (int i = 1; i < THREADS; i++)
			assert_int_equal(got[i][k], got[0][k]);
		if (got[0][k] == 150) {
			folded++;
			continue;
		}
		assert_string_equal(names_at(t, got[0][k]), name);
	}
	assert_int_equal(folded, NAMES - 150);
	names_destroy(t);
}

/* Two threads meet one new name as the table's last slot is free, round after round: both
 * must answer its series. A lookup that probed before the other thread published the name
 * and read the count after it did folded it (about 1 round in 10000 on two cores). */
#define ROUNDS 100000

static struct name_table *_Atomic race_table;
static atomic_int race_go, race_done;
static size_t race_other;

static void *race_second(void *arg)
{
	(void)arg;
	for (int r = 1; r <= ROUNDS; r++) {
		while (atomic_load_explicit(&race_go, memory_order_acquire) != r)
			sched_yield(); /* a core of its own returns at once; one core is shared */
		race_other = names_intern(atomic_load(&race_table), "last", 4);
		atomic_store_explicit(&race_done, r, memory_order_release);
	}
	return NULL;
}

static void threads_agree_on_the_last_slot(void **state)
{
	(void)state;
	pthread_t th;
	int disagreed = 0;
	assert_int_equal(pthread_create(&th, NULL, race_second, NULL), 0);
	for (int r = 1; r <= ROUNDS; r++) {
		struct name_table *t = NULL;
		assert_int_equal(names_create(1, 8, "other", &t), 0);
		atomic_store(&race_table, t);
		atomic_store_explicit(&race_go, r, memory_order_release);
		size_t mine = names_intern(t, "last", 4);
		while (atomic_load_explicit(&race_done, memory_order_acquire) != r)
			sched_yield();
		disagreed += mine != 0 || race_other != 0;
		names_destroy(t);
	}
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(disagreed, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(interned_in_order_then_folded),
	    cmocka_unit_test(threads_agree_on_each_name),
	    cmocka_unit_test(threads_agree_on_the_last_slot),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
