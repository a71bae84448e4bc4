/*
 * test_stick.c - the session table: an entry answers its backend until its time is up; a
 * bucket full of live entries gives up the one nearest its end; a place caught between two
 * writes answers a miss, never another key's backend; the table's size is fixed whatever is
 * put in it; the feed gives what was learned here, in order, and not what others told; a
 * session's name and a response id never share a key; a reload's copy takes the live entries
 * whose backend is still there, with the time they had left, and its follow what came after.
 */
#include "policy/stick.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

static void get_what_was_put_until_it_expires(void **state)
{
	(void)state;
	struct stick_table *t;
	uint32_t exp = 0;
	assert_int_equal(stick_table_new(64, 10, &t), 0);
	uint64_t k = stick_key(STICK_NAMED, "conv-1", 6);
	assert_int_equal(stick_get(t, k, 100, NULL), -1);
	stick_put(t, k, 3, 100, 0);
	assert_int_equal(stick_get(t, k, 100, &exp), 3);
	assert_int_equal(exp, 110);
	assert_int_equal(stick_get(t, k, 109, NULL), 3);
	assert_int_equal(stick_get(t, k, 110, NULL), -1); /* its time is up */
	stick_put(t, k, 1, 105, 0);			  /* moved: the new backend */
	assert_int_equal(stick_get(t, k, 109, NULL), 1);
	assert_int_equal(stick_get(t, stick_key(STICK_NAMED, "conv-2", 6), 109, NULL), -1);
	assert_int_not_equal(stick_key(STICK_NAMED, "", 0), 0);
	/* a response id of the same name is another conversation */
	assert_int_equal(stick_get(t, stick_key(STICK_RESPONSE, "conv-1", 6), 109, NULL), -1);
	stick_put(t, k, 0xffff, 105, 0); /* no such backend index: nothing changes */
	assert_int_equal(stick_get(t, k, 109, NULL), 1);
	stick_table_free(t);
}

static void a_full_bucket_gives_up_the_oldest(void **state)
{
	(void)state;
	struct stick_table *t;
	assert_int_equal(stick_table_new(STICK_WAYS, 100, &t), 0); /* one bucket */
	assert_int_equal(t->nbuckets, 1);
	for (uint64_t k = 1; k <= STICK_WAYS; k++)
		stick_put(t, k << 20, (unsigned)k, (uint32_t)k, 0); /* the first ends first */
	stick_put(t, 99ull << 20, 7, 50, 0);
	assert_int_equal(stick_get(t, 1ull << 20, 60, NULL), -1);
	assert_int_equal(stick_get(t, 2ull << 20, 60, NULL), 2);
	assert_int_equal(stick_get(t, 99ull << 20, 60, NULL), 7);
	/* a million invented names: the table keeps its size and the last ones */
	for (uint64_t k = 0; k < 1000000; k++)
		stick_put(t, stick_key(STICK_NAMED, &k, sizeof(k)), 1, 60, 0);
	assert_int_equal(t->nbuckets, 1);
	stick_table_free(t);
}

static void a_place_being_rewritten_is_a_miss(void **state)
{
	(void)state;
	struct stick_table *t;
	assert_int_equal(stick_table_new(STICK_WAYS, 100, &t), 0);
	uint64_t a = 0x1111000000000000ull, b = 0x2222000000000000ull;
	stick_put(t, a, 4, 10, 0);
	struct stick_place *p = NULL;
	for (size_t i = 0; i < STICK_WAYS; i++)
		if (atomic_load(&t->place[i].key) == a)
			p = &t->place[i];
	assert_non_null(p);
	atomic_store(&p->key, b); /* a writer of b stopped between its two stores */
	assert_int_equal(stick_get(t, b, 20, NULL), -1);
	assert_int_equal(stick_get(t, a, 20, NULL), -1);
	stick_table_free(t);
}

static void the_feed_gives_what_was_learned_here(void **state)
{
	(void)state;
	struct stick_table *t;
	uint64_t cursor = 0, key;
	unsigned be;
	assert_int_equal(stick_table_new(64, 100, &t), 0);
	stick_put(t, 10, 1, 5, 1); /* not shared: no feed */
	assert_int_equal(stick_feed_take(t, &cursor, &key, &be), 0);
	t->shared = 1;
	stick_put(t, 11, 1, 5, 1);
	stick_put(t, 12, 2, 5, 0); /* told by another instance: not passed on */
	stick_put(t, 13, 3, 5, 1);
	assert_int_equal(stick_feed_take(t, &cursor, &key, &be), 1);
	assert_true(key == 11 && be == 1);
	assert_int_equal(stick_feed_take(t, &cursor, &key, &be), 1);
	assert_true(key == 13 && be == 3);
	assert_int_equal(stick_feed_take(t, &cursor, &key, &be), 0);
	/* a reader a ring behind skips what was overwritten */
	for (uint64_t k = 0; k < STICK_FEED_SLOTS + 5; k++)
		stick_put(t, 100 + k, 0, 5, 1);
	assert_int_equal(stick_feed_take(t, &cursor, &key, &be), 1);
	assert_int_equal(key, 105);
	stick_table_free(t);
}

static void names_and_response_ids_never_share_a_key(void **state)
{
	(void)state;
	static const char *names[] = {"", "a", "resp_b0_1", "conv-1", "x-session-id"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		size_t n = strlen(names[i]);
		uint64_t named = stick_key(STICK_NAMED, names[i], n);
		uint64_t resp = stick_key(STICK_RESPONSE, names[i], n);
		assert_int_equal(named >> STICK_KIND_BIT, 0);
		assert_int_equal(resp >> STICK_KIND_BIT, 1);
		assert_true(named == stick_key(STICK_NAMED, names[i], n)); /* stable */
	}
}

static void a_reload_copies_the_live_and_follows_the_rest(void **state)
{
	(void)state;
	struct stick_table *from, *to;
	uint64_t key;
	unsigned be;
	assert_int_equal(stick_table_new(64, 100, &from), 0);
	assert_int_equal(stick_table_new(64, 50, &to), 0);
	stick_put(from, 21, 0, 10, 1);	/* until 110 */
	stick_put(from, 22, 1, 10, 1);	/* its backend leaves */
	stick_put(from, 23, 2, 100, 1); /* until 200: more than the new ttl */
	stick_put(from, 24, 2, 0, 1);	/* until 100: expired at the copy */
	const int map[] = {2, -1, 0};	/* the new pool's order */
	stick_follow(from);
	assert_int_equal(stick_copy(to, from, map, 3, 100), 2);
	uint32_t exp = 0;
	assert_int_equal(stick_get(to, 21, 100, &exp), 2);
	assert_int_equal(exp, 110);
	assert_int_equal(stick_get(to, 22, 100, NULL), -1);
	assert_int_equal(stick_get(to, 23, 100, &exp), 0);
	assert_int_equal(exp, 150);
	assert_int_equal(stick_get(to, 24, 100, NULL), -1);
	/* what the old table learns after: in its feed, from where the follow began */
	assert_int_equal(stick_feed_take(from, &from->follow, &key, &be), 0);
	stick_put(from, 25, 2, 100, 1);
	assert_int_equal(stick_feed_take(from, &from->follow, &key, &be), 1);
	assert_true(key == 25 && be == 2);
	stick_table_free(from);
	stick_table_free(to);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(get_what_was_put_until_it_expires),
	    cmocka_unit_test(a_full_bucket_gives_up_the_oldest),
	    cmocka_unit_test(a_place_being_rewritten_is_a_miss),
	    cmocka_unit_test(the_feed_gives_what_was_learned_here),
	    cmocka_unit_test(names_and_response_ids_never_share_a_key),
	    cmocka_unit_test(a_reload_copies_the_live_and_follows_the_rest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
