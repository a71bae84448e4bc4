/*
 * test_xfer_sched.c - the chunk scheduler: streams take chunks in order as they have room
 * (so a stream that takes more carries more), the end game copies the oldest chunk of another
 * link, a lost chunk goes back first, a corrupt one is retried then fails the transfer, a
 * relay's chunks become takeable as they arrive, and chunks the receiver has are skipped.
 * With rates measured: a slow link leaves the last chunks to a faster one, an end-game copy is
 * made only where it would finish sooner by at least twice its own time, and only by a link about
 * to run out of work.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "xfer/sched.h"

static void take_ok(struct xfer_sched *s, uint8_t link, uint64_t now, uint32_t want, int want_dup)
{
	uint32_t id;
	int dup;
	assert_int_equal(xfer_sched_take(s, link, now, &id, &dup), 0);
	assert_int_equal(id, want);
	assert_int_equal(dup, want_dup);
}

static void fill(struct xfer_sched *s, uint32_t n)
{
	assert_int_equal(xfer_sched_init(s, n), 0);
	for (uint32_t i = 0; i < n; i++)
		xfer_sched_add(s, i, 0);
}

static void in_order_and_work_stealing(void **state)
{
	(void)state;
	struct xfer_sched s;
	fill(&s, 6);
	/* link 0 is fast: it comes back for more; link 1 takes one */
	take_ok(&s, 0, 1, 0, 0);
	take_ok(&s, 1, 1, 1, 0);
	assert_int_equal(xfer_sched_ack(&s, 0, 0, 5), 1);
	take_ok(&s, 0, 2, 2, 0);
	assert_int_equal(xfer_sched_ack(&s, 2, 0, 5), 1);
	take_ok(&s, 0, 3, 3, 0);
	assert_int_equal(xfer_sched_ack(&s, 3, 0, 5), 1);
	take_ok(&s, 0, 4, 4, 0);
	take_ok(&s, 0, 5, 5, 0);
	assert_int_equal(xfer_sched_done(&s), 3);
	xfer_sched_destroy(&s);
}

static void end_game_copies_oldest_of_other_link(void **state)
{
	(void)state;
	struct xfer_sched s;
	uint32_t id;
	int dup;
	fill(&s, 3);
	take_ok(&s, 1, 10, 0, 0); /* slow link */
	take_ok(&s, 1, 20, 1, 0);
	take_ok(&s, 0, 30, 2, 0);
	assert_int_equal(xfer_sched_ack(&s, 2, 0, 35), 1);
	/* queue empty: link 0 copies the oldest of link 1, then the next, then nothing */
	take_ok(&s, 0, 40, 0, 1);
	take_ok(&s, 0, 41, 1, 1);
	assert_int_equal(xfer_sched_take(&s, 0, 42, &id, &dup), -EAGAIN);
	/* link 1 never copies its own chunks */
	assert_int_equal(xfer_sched_take(&s, 1, 42, &id, &dup), -EAGAIN);
	assert_int_equal(xfer_sched_ack(&s, 0, 0, 45), 1); /* the copy wins */
	assert_int_equal(xfer_sched_ack(&s, 0, 1, 46), 0); /* the original's ack changes nothing */
	assert_int_equal(xfer_sched_ack(&s, 1, 0, 47), 1);
	assert_int_equal(xfer_sched_ack(&s, 1, 1, 48), 0);
	assert_int_equal(xfer_sched_take(&s, 0, 50, &id, &dup), -ENODATA);
	assert_int_equal(s.dups, 2);
	xfer_sched_destroy(&s);
}

static void lost_chunk_goes_first(void **state)
{
	(void)state;
	struct xfer_sched s;
	uint32_t id;
	int dup;
	fill(&s, 4);
	take_ok(&s, 0, 1, 0, 0);
	take_ok(&s, 1, 1, 1, 0);
	xfer_sched_lost(&s, 1, 1); /* link 1 died */
	take_ok(&s, 0, 2, 1, 0);
	take_ok(&s, 0, 3, 2, 0);
	/* a lost copy while another copy is out does not requeue */
	xfer_sched_ack(&s, 0, 0, 3);
	xfer_sched_ack(&s, 2, 0, 3);
	take_ok(&s, 0, 4, 3, 0);
	take_ok(&s, 1, 5, 1, 1);
	xfer_sched_lost(&s, 1, 1);
	assert_int_equal(xfer_sched_take(&s, 2, 6, &id, &dup), 0); /* end game copy of 3 or 1 */
	assert_int_equal(s.resends, 1);
	xfer_sched_destroy(&s);
}

static void corrupt_retried_then_fatal(void **state)
{
	(void)state;
	struct xfer_sched s;
	uint32_t id;
	int dup;
	fill(&s, 2);
	for (int i = 0; i < XFER_SCHED_TRIES - 1; i++) {
		take_ok(&s, 0, 1, 0, 0);
		xfer_sched_bad(&s, 0, 0);
	}
	take_ok(&s, 0, 1, 0, 0);
	xfer_sched_bad(&s, 0, 0);
	assert_int_equal(xfer_sched_take(&s, 0, 2, &id, &dup), -EIO);
	xfer_sched_destroy(&s);
}

static void relay_chunks_arrive_and_skips(void **state)
{
	(void)state;
	struct xfer_sched s;
	uint32_t id;
	int dup;
	assert_int_equal(xfer_sched_init(&s, 3), 0);
	assert_int_equal(xfer_sched_take(&s, 0, 1, &id, &dup), -EAGAIN);
	xfer_sched_add(&s, 2, 0);
	take_ok(&s, 0, 2, 2, 0);
	/* no end game while chunks are still to arrive */
	assert_int_equal(xfer_sched_take(&s, 1, 3, &id, &dup), -EAGAIN);
	xfer_sched_add(&s, 0, 1); /* the receiver has it */
	xfer_sched_add(&s, 0, 0); /* a second add changes nothing */
	assert_int_equal(xfer_sched_done(&s), 1);
	xfer_sched_add(&s, 1, 0);
	take_ok(&s, 1, 4, 1, 0);
	xfer_sched_ack(&s, 1, 1, 5);
	xfer_sched_ack(&s, 2, 0, 5);
	assert_int_equal(xfer_sched_take(&s, 0, 5, &id, &dup), -ENODATA);
	xfer_sched_abort(&s, -ECANCELED);
	assert_int_equal(xfer_sched_take(&s, 0, 5, &id, &dup), -ENODATA); /* done stays done */
	xfer_sched_destroy(&s);
}

#define MS 1000000ULL

static void fill_sized(struct xfer_sched *s, uint32_t n, uint32_t len)
{
	assert_int_equal(xfer_sched_init(s, n), 0);
	for (uint32_t i = 0; i < n; i++) {
		xfer_sched_size(s, i, len);
		xfer_sched_add(s, i, 0);
	}
}

/* Link 0 carries 1000 bytes in 200 ms, link 1 in 2 s: a tenth of the rate. */
static void slow_link_leaves_the_end_to_the_fast_one(void **state)
{
	(void)state;
	struct xfer_sched s;
	uint32_t id;
	int dup;
	fill_sized(&s, 20, 1000);
	take_ok(&s, 0, 0, 0, 0);
	take_ok(&s, 1, 0, 1, 0);
	assert_int_equal(xfer_sched_ack(&s, 0, 0, 200 * MS), 1);
	assert_int_equal(xfer_sched_ack(&s, 1, 1, 2000 * MS), 1);
	/* plenty left: both take */
	take_ok(&s, 0, 2000 * MS, 2, 0);
	take_ok(&s, 1, 2000 * MS, 3, 0);
	for (uint32_t i = 4; i < 18; i++)
		take_ok(&s, 0, 2000 * MS, i, 0);
	/* two chunks left: link 1 would finish one in 4 s, link 0 both (after its 15) in 3.4 s */
	assert_int_equal(xfer_sched_take(&s, 1, 2000 * MS, &id, &dup), -EAGAIN);
	take_ok(&s, 0, 2000 * MS, 18, 0);
	take_ok(&s, 0, 2000 * MS, 19, 0);
	/* the end game: link 0 holds 3.4 s of work, link 1 finishes chunk 3 in 2 s: no copies */
	assert_int_equal(xfer_sched_take(&s, 0, 2000 * MS, &id, &dup), -EAGAIN);
	assert_int_equal(xfer_sched_take(&s, 1, 2000 * MS, &id, &dup), -EAGAIN);
	uint64_t t = 2000 * MS;
	assert_int_equal(xfer_sched_ack(&s, 2, 0, t += 20 * MS), 1);
	for (uint32_t i = 4; i < 20; i++)
		assert_int_equal(xfer_sched_ack(&s, i, 0, t += 20 * MS), 1);
	/* 340 ms later link 1 is a sixth into chunk 3; idle link 0 would carry it in well under
	 * 200 ms: a copy */
	take_ok(&s, 0, t, 3, 1);
	assert_int_equal(xfer_sched_ack(&s, 3, 0, t + 200 * MS), 1);
	assert_int_equal(xfer_sched_ack(&s, 3, 1, t + 300 * MS), 0); /* the original: wasted */
	assert_int_equal(xfer_sched_take(&s, 0, t, &id, &dup), -ENODATA);
	xfer_sched_destroy(&s);
}

/* A chunk its link is about to finish is not copied. */
static void no_copy_of_a_chunk_nearly_across(void **state)
{
	(void)state;
	struct xfer_sched s;
	uint32_t id;
	int dup;
	fill_sized(&s, 3, 1000);
	take_ok(&s, 0, 0, 0, 0);
	take_ok(&s, 1, 0, 1, 0);
	assert_int_equal(xfer_sched_ack(&s, 0, 0, 200 * MS), 1);
	assert_int_equal(xfer_sched_ack(&s, 1, 1, 2000 * MS), 1);
	take_ok(&s, 1, 2000 * MS, 2, 0);
	/* 1.9 s later link 1 has 50 of its 1000 bytes left (100 ms): 200 ms on link 0 is no sooner
	 */
	assert_int_equal(xfer_sched_take(&s, 0, 3900 * MS, &id, &dup), -EAGAIN);
	/* at 1.3 s it had 350 bytes left (700 ms): a copy is worth it */
	take_ok(&s, 0, 3300 * MS, 2, 1);
	xfer_sched_destroy(&s);
}

/* A copy wastes a chunk whichever wins: one that would arrive less than twice a chunk's time
 * (on the copying link) before the original is not made. */
static void no_copy_that_gains_less_than_its_own_time(void **state)
{
	(void)state;
	struct xfer_sched s;
	uint32_t id;
	int dup;
	fill_sized(&s, 3, 1000);
	take_ok(&s, 0, 0, 0, 0);
	take_ok(&s, 1, 0, 1, 0);
	assert_int_equal(xfer_sched_ack(&s, 0, 0, 200 * MS), 1);
	assert_int_equal(xfer_sched_ack(&s, 1, 1, 2000 * MS), 1);
	take_ok(&s, 1, 2000 * MS, 2, 0);
	/* 1.55 s later link 1 has 225 bytes left (450 ms); a copy on link 0 would arrive in 200
	 * ms, 250 ms sooner: less than twice its own 200 ms */
	assert_int_equal(xfer_sched_take(&s, 0, 3550 * MS, &id, &dup), -EAGAIN);
	/* at 1.2 s it had 400 bytes left (800 ms): 600 ms sooner */
	take_ok(&s, 0, 3200 * MS, 2, 1);
	xfer_sched_destroy(&s);
}

/* A link with more than a chunk's time of its own work left takes no copy, however late the
 * original: both estimates are far ahead. */
static void busy_link_takes_no_copy(void **state)
{
	(void)state;
	struct xfer_sched s;
	uint32_t id;
	int dup;
	fill_sized(&s, 5, 1000);
	take_ok(&s, 0, 0, 0, 0);
	take_ok(&s, 1, 0, 1, 0);
	assert_int_equal(xfer_sched_ack(&s, 0, 0, 200 * MS), 1);
	assert_int_equal(xfer_sched_ack(&s, 1, 1, 2000 * MS), 1);
	take_ok(&s, 1, 2000 * MS, 2, 0);
	take_ok(&s, 0, 2000 * MS, 3, 0);
	take_ok(&s, 0, 2000 * MS, 4, 0);
	/* link 0 holds 400 ms of work; link 1 needs 2 s for chunk 2 */
	assert_int_equal(xfer_sched_take(&s, 0, 2010 * MS, &id, &dup), -EAGAIN);
	assert_int_equal(xfer_sched_ack(&s, 3, 0, 2200 * MS), 1);
	/* 50 ms into its last chunk: less than a chunk's time left, and a copy gains 1.4 s */
	take_ok(&s, 0, 2250 * MS, 2, 1);
	xfer_sched_destroy(&s);
}

/* An acknowledgement's time is read before the lock: one older than the link's latest mark
 * (another stream took a chunk meanwhile) leaves the measured rate alone. */
static void late_clock_reading_keeps_the_rate(void **state)
{
	(void)state;
	struct xfer_sched s;
	fill_sized(&s, 2, 1000);
	take_ok(&s, 0, 1000 * MS, 0, 0);
	assert_int_equal(xfer_sched_ack(&s, 0, 0, 1200 * MS), 1);
	assert_true(s.links[0].rate > 4.99e-6 && s.links[0].rate < 5.01e-6);
	take_ok(&s, 0, 2000 * MS, 1, 0);
	assert_int_equal(xfer_sched_ack(&s, 1, 0, 1999 * MS), 1);
	assert_true(s.links[0].rate > 4.99e-6 && s.links[0].rate < 5.01e-6);
	xfer_sched_destroy(&s);
}

/* Equal links and one chunk left: the plan never leaves a chunk to nobody. */
static void last_chunk_always_taken(void **state)
{
	(void)state;
	struct xfer_sched s;
	fill_sized(&s, 4, 1000);
	take_ok(&s, 0, 0, 0, 0);
	take_ok(&s, 1, 0, 1, 0);
	take_ok(&s, 2, 0, 2, 0);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(xfer_sched_ack(&s, i, (uint8_t)i, 200 * MS), 1);
	take_ok(&s, 2, 201 * MS, 3, 0);
	xfer_sched_destroy(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(in_order_and_work_stealing),
	    cmocka_unit_test(end_game_copies_oldest_of_other_link),
	    cmocka_unit_test(lost_chunk_goes_first),
	    cmocka_unit_test(corrupt_retried_then_fatal),
	    cmocka_unit_test(relay_chunks_arrive_and_skips),
	    cmocka_unit_test(slow_link_leaves_the_end_to_the_fast_one),
	    cmocka_unit_test(no_copy_of_a_chunk_nearly_across),
	    cmocka_unit_test(no_copy_that_gains_less_than_its_own_time),
	    cmocka_unit_test(busy_link_takes_no_copy),
	    cmocka_unit_test(late_clock_reading_keeps_the_rate),
	    cmocka_unit_test(last_chunk_always_taken),
	};
	return cmocka_run_group_tests_name("xfer scheduler", tests, NULL, NULL);
}
