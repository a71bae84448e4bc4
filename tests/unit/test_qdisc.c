/*
 * test_qdisc.c - queue disciplines: fifo order; fair's priority classes and tenants taking
 * turns, so that a flooding tenant cannot starve another; removal from anywhere; reuse of
 * tenant lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "policy/qdisc.h"

static struct qd_item items[1000];

static struct qd_item *item(size_t i, uint64_t tenant, unsigned prio)
{
	memset(&items[i], 0, sizeof(items[i]));
	items[i].tenant = tenant;
	items[i].prio = prio;
	return &items[i];
}

static size_t popped(struct qdisc *q)
{
	struct qd_item *it = q->ops->peek(q);
	assert_non_null(it);
	assert_ptr_equal(q->ops->pop(q), it);
	return (size_t)(it - items);
}

static void registry(void **state)
{
	(void)state;
	assert_ptr_equal(qdisc_find("fair"), &qdisc_fair);
	assert_ptr_equal(qdisc_find("fifo"), &qdisc_fifo);
	assert_null(qdisc_find("lifo"));
	assert_string_equal(qdisc_names(), "fair, fifo");
	assert_int_equal(qdisc_priority("HIGH", 4), QD_HIGH);
	assert_int_equal(qdisc_priority("low", 3), QD_LOW);
	assert_int_equal(qdisc_priority("urgent", 6), -1);
}

static void fifo_keeps_arrival_order(void **state)
{
	(void)state;
	struct qdisc q = {.ops = &qdisc_fifo};
	assert_int_equal(q.ops->init(&q), 0);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(q.ops->push(&q, item(i, i % 2, i % 3)), 0);
	q.ops->remove(&q, &items[2]);
	size_t want[] = {0, 1, 3, 4};
	for (size_t k = 0; k < 4; k++)
		assert_int_equal(popped(&q), want[k]);
	assert_null(q.ops->peek(&q));
	assert_int_equal(q.len, 0);
	q.ops->fini(&q);
}

static void fair_flooding_tenant_cannot_starve(void **state)
{
	(void)state;
	struct qdisc q = {.ops = &qdisc_fair};
	assert_int_equal(q.ops->init(&q), 0);
	/* tenant 1 floods 100 requests, then tenants 2 and 3 send two each */
	for (size_t i = 0; i < 100; i++)
		q.ops->push(&q, item(i, 1, QD_NORMAL));
	q.ops->push(&q, item(100, 2, QD_NORMAL));
	q.ops->push(&q, item(101, 2, QD_NORMAL));
	q.ops->push(&q, item(102, 3, QD_NORMAL));
	q.ops->push(&q, item(103, 3, QD_NORMAL));
	assert_int_equal(q.len, 104);
	/* turns: 1, 2, 3, 1, 2, 3, then tenant 1 alone, its own requests in order */
	size_t want[] = {0, 100, 102, 1, 101, 103, 2, 3, 4};
	for (size_t k = 0; k < 9; k++)
		assert_int_equal(popped(&q), want[k]);
	for (size_t i = 5; i < 100; i++)
		assert_int_equal(popped(&q), i);
	assert_null(q.ops->peek(&q));
	assert_int_equal(q.len, 0);
	q.ops->fini(&q);
}

static void fair_priority_classes_first(void **state)
{
	(void)state;
	struct qdisc q = {.ops = &qdisc_fair};
	assert_int_equal(q.ops->init(&q), 0);
	q.ops->push(&q, item(0, 1, QD_LOW));
	q.ops->push(&q, item(1, 1, QD_NORMAL));
	q.ops->push(&q, item(2, 2, QD_HIGH));
	q.ops->push(&q, item(3, 1, QD_HIGH));
	q.ops->push(&q, item(4, 2, QD_NORMAL));
	size_t want[] = {2, 3, 1, 4, 0};
	for (size_t k = 0; k < 5; k++)
		assert_int_equal(popped(&q), want[k]);
	q.ops->fini(&q);
}

static void fair_remove_anywhere(void **state)
{
	(void)state;
	struct qdisc q = {.ops = &qdisc_fair};
	assert_int_equal(q.ops->init(&q), 0);
	q.ops->push(&q, item(0, 1, QD_NORMAL));
	q.ops->push(&q, item(1, 2, QD_NORMAL));
	q.ops->push(&q, item(2, 3, QD_NORMAL));
	q.ops->push(&q, item(3, 1, QD_NORMAL));
	/* tenant 1's turn; its first request gives up: its next one keeps the turn */
	q.ops->remove(&q, &items[0]);
	assert_ptr_equal(q.ops->peek(&q), &items[3]);
	/* tenant 1 leaves entirely: the turn passes to tenant 2 */
	q.ops->remove(&q, &items[3]);
	assert_ptr_equal(q.ops->peek(&q), &items[1]);
	/* the last of a tenant that is not on turn */
	q.ops->remove(&q, &items[2]);
	assert_int_equal(popped(&q), 1);
	assert_null(q.ops->peek(&q));
	assert_int_equal(q.len, 0);
	q.ops->fini(&q);
}

static void fair_reuses_tenant_lines(void **state)
{
	(void)state;
	struct qdisc q = {.ops = &qdisc_fair};
	assert_int_equal(q.ops->init(&q), 0);
	/* many tenants come and go: lines are recycled, the spare list stays bounded */
	for (size_t round = 0; round < 20; round++) {
		for (size_t i = 0; i < 500; i++)
			assert_int_equal(q.ops->push(&q, item(i, round * 1000 + i, QD_NORMAL)), 0);
		for (size_t i = 0; i < 500; i++)
			assert_int_equal(popped(&q), i); /* one request each: arrival order */
	}
	assert_true(q.nspare <= 256);
	q.ops->fini(&q);
}

/* A full queue: a newcomer from a shorter line takes the place of the longest line's newest
 * request; one from the longest line, or with lines even, gets nothing. */
static void fair_push_out_takes_from_the_longest_line(void **state)
{
	(void)state;
	struct qdisc q = {.ops = &qdisc_fair};
	assert_int_equal(q.ops->init(&q), 0);
	for (size_t i = 0; i < 4; i++) /* tenant 7 fills the queue */
		assert_int_equal(q.ops->push(&q, item(i, 7, QD_NORMAL)), 0);
	assert_null(q.ops->push_out(&q, item(10, 7, QD_NORMAL))); /* not against itself */
	struct qd_item *out = q.ops->push_out(&q, item(11, 9, QD_LOW));
	assert_ptr_equal(out, &items[3]); /* the flooder's newest */
	assert_int_equal(q.len, 3);
	assert_int_equal(q.ops->push(&q, &items[11]), 0);
	/* tenant 9 now has 1 waiting, tenant 7 has 3: still a place for tenant 9 ... */
	assert_ptr_equal(q.ops->push_out(&q, item(12, 9, QD_LOW)), &items[2]);
	assert_int_equal(q.ops->push(&q, &items[12]), 0);
	/* ... but not once the lines are within one of each other (2 and 2) */
	assert_null(q.ops->push_out(&q, item(13, 9, QD_LOW)));
	assert_null(qdisc_fifo.push_out);
	while (q.ops->peek(&q))
		q.ops->pop(&q);
	q.ops->fini(&q);
}

/* next() is for looking past the head in about the order of grants (32 deep): with
 * one tenant's long line first, another tenant's head (the 2nd grant) must be seen early. */
static void fair_next_follows_the_turns(void **state)
{
	(void)state;
	struct qdisc q = {.ops = &qdisc_fair};
	assert_int_equal(q.ops->init(&q), 0);
	for (size_t i = 0; i < 40; i++)
		assert_int_equal(q.ops->push(&q, item(i, 1, QD_NORMAL)), 0);
	assert_int_equal(q.ops->push(&q, item(40, 2, QD_NORMAL)), 0);
	struct qd_item *it = q.ops->peek(&q);
	assert_ptr_equal(it, &items[0]);
	size_t seen_at = 0;
	for (size_t k = 1; k < 32 && (it = q.ops->next(&q, it)); k++)
		if (it == &items[40]) {
			seen_at = k;
			break;
		}
	assert_true(seen_at > 0 && seen_at <= 2); /* grants: 0, 40, 1, 2, ... */
	q.ops->fini(&q);
}

/* next() walks the queue in the order grants would take it: fifo in arrival order; fair round
 * the tenants one depth at a time, then the lower class. */
static void next_walks_in_grant_order(void **state)
{
	(void)state;
	struct qdisc f = {.ops = &qdisc_fifo};
	assert_int_equal(f.ops->init(&f), 0);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(f.ops->push(&f, item(i, 1, QD_NORMAL)), 0);
	assert_ptr_equal(f.ops->next(&f, &items[0]), &items[1]);
	assert_ptr_equal(f.ops->next(&f, &items[1]), &items[2]);
	assert_null(f.ops->next(&f, &items[2]));
	f.ops->fini(&f);

	struct qdisc q = {.ops = &qdisc_fair};
	assert_int_equal(q.ops->init(&q), 0);
	/* tenant 1: 0 1 2; tenant 2: 3 4; tenant 3: 5; a low-class request: 6 */
	static const unsigned tenant[] = {1, 1, 1, 2, 2, 3};
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(q.ops->push(&q, item(i, tenant[i], QD_NORMAL)), 0);
	assert_int_equal(q.ops->push(&q, item(6, 9, QD_LOW)), 0);
	static const size_t order[] = {0, 3, 5, 1, 4, 2, 6};
	struct qd_item *it = q.ops->peek(&q);
	for (size_t k = 0; k < 7; k++, it = q.ops->next(&q, it))
		assert_ptr_equal(it, &items[order[k]]);
	assert_null(it);
	q.ops->fini(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(registry),
	    cmocka_unit_test(fifo_keeps_arrival_order),
	    cmocka_unit_test(fair_next_follows_the_turns),
	    cmocka_unit_test(next_walks_in_grant_order),
	    cmocka_unit_test(fair_flooding_tenant_cannot_starve),
	    cmocka_unit_test(fair_priority_classes_first),
	    cmocka_unit_test(fair_remove_anywhere),
	    cmocka_unit_test(fair_reuses_tenant_lines),
	    cmocka_unit_test(fair_push_out_takes_from_the_longest_line),
	};
	return cmocka_run_group_tests_name("queue disciplines", tests, NULL, NULL);
}
