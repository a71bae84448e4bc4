/*
 * test_tokhealth.c - a model's tokenizer state from its counts (runtime/tokhealth.h): a
 * degraded model stays degraded, too few prompts never judge, more than half failing in the
 * window turns it failing, it stays so down to a quarter and comes back below, and the window
 * forgets what is older than TOKHEALTH_WINDOW ticks (an idle proxy comes back by itself);
 * a window of failures whose tokenizer still encodes a plain text is the texts', never
 * failing, and the plain text is asked for only when the window says most failed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runtime/tokhealth.h"

/* The tokenizer of these tests: does it encode the plain text (*arg), counting the asks. */
struct plain {
	int ok, asked;
};

static int plain_answer(void *arg)
{
	struct plain *p = arg;
	p->asked++;
	return p->ok;
}

/* A tokenizer that fails on the plain text too, as the tests below but the last assume. */
static struct plain fails_plain;

/* The state after one more tick with <tried> and <failed> more prompts. */
static enum tokhealth_state step(struct tokhealth *h, uint64_t *t, uint64_t *f, uint64_t tried,
				 uint64_t failed)
{
	*t += tried;
	*f += failed;
	return tokhealth_tick(h, *t, *f, plain_answer, &fails_plain);
}

static void test_degraded_and_too_few(void **state)
{
	(void)state;
	struct tokhealth h;
	uint64_t t = 0, f = 0;
	tokhealth_init(&h, 1);
	assert_int_equal(tokhealth_state(&h), TOKHEALTH_DEGRADED);
	assert_int_equal(step(&h, &t, &f, 0, 0), TOKHEALTH_DEGRADED);
	/* one odd prompt, and as many as the minimum less one, all failed: no judgement */
	assert_int_equal(step(&h, &t, &f, 1, 1), TOKHEALTH_DEGRADED);
	assert_int_equal(step(&h, &t, &f, TOKHEALTH_MIN_TRIED - 2, TOKHEALTH_MIN_TRIED - 2),
			 TOKHEALTH_DEGRADED);
	assert_int_equal(atomic_load(&h.win_tried), TOKHEALTH_MIN_TRIED - 1);
	/* the minimum reached, all failed: failing wins over degraded */
	assert_int_equal(step(&h, &t, &f, 1, 1), TOKHEALTH_FAILING);
	assert_string_equal(tokhealth_state_name(TOKHEALTH_FAILING), "failing");
	tokhealth_init(&h, 0);
	assert_int_equal(tokhealth_state(&h), TOKHEALTH_UP);
}

static void test_half_in_a_quarter_out(void **state)
{
	(void)state;
	struct tokhealth h;
	uint64_t t = 0, f = 0;
	tokhealth_init(&h, 0);
	/* exactly half failed: not more than half, up */
	assert_int_equal(step(&h, &t, &f, 20, 10), TOKHEALTH_UP);
	assert_int_equal(step(&h, &t, &f, 2, 2), TOKHEALTH_FAILING); /* 12 of 22 */
	/* a third failed: above a quarter, still failing (no flapping at the edge) */
	assert_int_equal(step(&h, &t, &f, 14, 0), TOKHEALTH_FAILING); /* 12 of 36 */
	assert_int_equal(step(&h, &t, &f, 12, 0), TOKHEALTH_UP);      /* 12 of 48 */
	assert_int_equal(atomic_load(&h.win_failed), 12);
	assert_int_equal(atomic_load(&h.win_tried), 48);
}

static void test_window_forgets(void **state)
{
	(void)state;
	struct tokhealth h;
	uint64_t t = 0, f = 0;
	tokhealth_init(&h, 0);
	assert_int_equal(step(&h, &t, &f, 30, 30), TOKHEALTH_FAILING);
	for (int i = 0; i < TOKHEALTH_WINDOW - 1; i++) /* still in the window: failing */
		assert_int_equal(step(&h, &t, &f, 0, 0), TOKHEALTH_FAILING);
	/* the failed tick leaves the window: nothing tried, nothing to judge: up */
	assert_int_equal(step(&h, &t, &f, 0, 0), TOKHEALTH_UP);
	assert_int_equal(atomic_load(&h.win_tried), 0);
	/* a steady trickle of failures under the minimum per window never turns it */
	for (int i = 0; i < 5 * TOKHEALTH_WINDOW; i++)
		assert_int_equal(step(&h, &t, &f, i % 2, i % 2), TOKHEALTH_UP);
}

static void test_texts_that_fail_are_not_the_tokenizers(void **state)
{
	(void)state;
	struct tokhealth h;
	struct plain p = {.ok = 1};
	uint64_t t = 0, f = 0;
	tokhealth_init(&h, 0);
	/* a few failed, or half: the plain text is not asked for */
	assert_int_equal(tokhealth_tick(&h, t += 20, f += 10, plain_answer, &p), TOKHEALTH_UP);
	assert_int_equal(p.asked, 0);
	/* all of a client's texts fail, the tokenizer encodes the plain one: up, the texts' */
	assert_int_equal(tokhealth_tick(&h, t += 30, f += 30, plain_answer, &p), TOKHEALTH_UP);
	assert_int_equal(p.asked, 1);
	assert_true(h.texts_failing);
	assert_int_equal(atomic_load(&h.win_failed), 40);
	/* the plain text fails too (the tokenizer broke): failing, from the quarter it keeps */
	p.ok = 0;
	assert_int_equal(tokhealth_tick(&h, t += 10, f += 0, plain_answer, &p), TOKHEALTH_FAILING);
	assert_false(h.texts_failing);
	/* under a quarter: up, and nothing asked */
	int asked = p.asked;
	assert_int_equal(tokhealth_tick(&h, t += 200, f, plain_answer, &p), TOKHEALTH_UP);
	assert_int_equal(p.asked, asked);
	assert_false(h.texts_failing);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_degraded_and_too_few),
	    cmocka_unit_test(test_half_in_a_quarter_out),
	    cmocka_unit_test(test_window_forgets),
	    cmocka_unit_test(test_texts_that_fail_are_not_the_tokenizers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
