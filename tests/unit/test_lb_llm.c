/*
 * test_lb_llm.c - balance: llm over plain arrays: the backend holding the prompt wins while
 * it has a slot; a long queue there sends it elsewhere; a busy home is waited for only while
 * waiting is cheaper and for at most max_wait_ms, counting those queued for it and what a
 * prefill elsewhere costs the queue; a freed slot's home_only question; without a
 * prompt, the least loaded; a new prompt where its hash and the backends' ids meet, the
 * same at two instances whatever each drew, spread evenly, never a much busier backend. And
 * the TTFT fit: the prior, then a line through the samples. And each decision read back
 * (explain): its reason and each candidate's estimate, the pick first.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "policy/lb.h"
#include "policy/ttft_fit.h"

static const struct lb_state st = {.block_bytes = 64, .cache_blocks = 1024, .max_wait_ms = 500};

/* n backends, 4 slots each, none in flight, 20 ms + 1 ms a block, 300 ms a request. */
static void fleet(struct lb_candidate *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		c[i] = (struct lb_candidate){.weight = 1,
					     .slots = 4,
					     .eligible = 1,
					     .base_us = 20000,
					     .block_us = 1000,
					     .service_us = 300000};
}

static void busy(struct lb_candidate *c)
{
	c->inflight = c->slots;
	c->eligible = 0;
	c->busy = 1;
}

static void home_wins_while_it_has_a_slot(void **state)
{
	(void)state;
	struct lb_candidate c[4];
	fleet(c, 4);
	struct lb_draw d = {.blocks = 200};
	c[2].hit_blocks = 150;
	c[2].inflight = 3; /* loaded, but a slot is free */
	for (uint64_t r = 0; r < 8; r++) {
		d.rnd = r;
		assert_int_equal(lb_llm.pick(&st, c, 4, &d), 2);
	}
	/* a short hit is not worth a queue of two turns: 150 ms to wait, 10 ms saved */
	c[2].hit_blocks = 10;
	busy(&c[2]);
	c[2].inflight = 6;
	d.rnd = 1;
	int p = lb_llm.pick(&st, c, 4, &d);
	assert_true(p >= 0 && p != 2);
}

static void busy_home_waited_for_then_not(void **state)
{
	(void)state;
	struct lb_candidate c[4];
	fleet(c, 4);
	/* 200 blocks, 190 held by a busy backend: 75 ms for its slot + 30 ms beats 220 ms */
	c[1].hit_blocks = 190;
	busy(&c[1]);
	struct lb_draw d = {.blocks = 200, .rnd = 3};
	assert_int_equal(lb_llm.pick(&st, c, 4, &d), LB_WAIT);
	/* the freed slot asks: is your prefix on a backend with a free slot? not yet */
	d.home_only = 1;
	assert_int_equal(lb_llm.pick(&st, c, 4, &d), LB_WAIT);
	c[1].inflight = 3;
	c[1].eligible = 1;
	c[1].busy = 0;
	assert_int_equal(lb_llm.pick(&st, c, 4, &d), 1);
	/* a request that holds nothing anywhere is not anyone's to take out of turn */
	c[1].hit_blocks = 0;
	assert_int_equal(lb_llm.pick(&st, c, 4, &d), LB_WAIT);
	/* waited max_wait_ms: the best free slot, no longer the home */
	busy(&c[1]);
	c[1].hit_blocks = 190;
	d.home_only = 0;
	d.waited_ms = 500;
	int p = lb_llm.pick(&st, c, 4, &d);
	assert_true(p >= 0 && p != 1);
	/* nothing free at all: none (the caller queues), not wait */
	for (int i = 0; i < 4; i++)
		busy(&c[i]);
	d.waited_ms = 0;
	assert_int_equal(lb_llm.pick(&st, c, 4, &d), LB_NONE);
}

/* Issue 27: those already queued for a busy home wait before this one, and while requests
 * queue, a prefill elsewhere takes slot time from them all. */
static void a_queue_for_the_home_counts_and_so_does_the_pools(void **state)
{
	(void)state;
	struct lb_candidate c[4];
	fleet(c, 4);
	c[1].hit_blocks = 190;
	busy(&c[1]);
	int wait_for = -1;
	struct lb_draw d = {.blocks = 200, .rnd = 3, .wait_for = &wait_for};
	/* nobody ahead: 75 ms for its slot + 30 ms beats 220 ms elsewhere; it says whose */
	assert_int_equal(lb_llm.pick(&st, c, 4, &d), LB_WAIT);
	assert_int_equal(wait_for, 1);
	/* two queued for it already: 3 turns, 225 ms + 30 ms, lose to 220 ms elsewhere */
	c[1].waiting = 2;
	wait_for = -1;
	int p = lb_llm.pick(&st, c, 4, &d);
	assert_true(p >= 0 && p != 1);
	assert_int_equal(wait_for, -1);
	/* but with 16 queued in the pool (its 16 slots), 2 of them for it, 200 blocks
	 * recomputed elsewhere delay each of the other 14 about 1/16 of 200 ms: 395 ms against
	 * 255 ms + its 10 missed blocks' share of the 14 (1/16 each) and of its own 2 (1/4 each),
	 * 269 ms, so it waits */
	d.queued = 16;
	assert_int_equal(lb_llm.pick(&st, c, 4, &d), LB_WAIT);
	assert_int_equal(wait_for, 1);
	/* and explain ranks by that cost but shows each one's expected time to first token */
	struct lb_explain ex = {0};
	lb_llm.explain(&st, c, 4, &d, LB_WAIT, &ex);
	assert_int_equal(ex.why, LB_WHY_WAIT);
	assert_int_equal(ex.cand[0].backend, 1);
	assert_int_equal(ex.cand[0].expect_us, 225000 + 20000 + 10000);
	assert_int_equal(ex.cand[1].expect_us, 20000 + 200000);
}

/* Requests queued for another backend wait for its slots, not for the free ones: a
 * prefill on a free backend takes nothing from them, and they must not make it look dear
 * (counting them, every request waited for its busy home while free slots stood idle). */
static void a_queue_for_another_backend_takes_nothing_from_a_free_one(void **state)
{
	(void)state;
	struct lb_candidate c[4];
	fleet(c, 4);
	c[1].hit_blocks = 190;
	busy(&c[1]);
	c[1].waiting = 2;
	busy(&c[2]);
	c[2].waiting = 16;
	int wait_for = -1;
	/* 18 queued, all for c[1] or c[2]: 220 ms on a free one against 255 ms + 2/4 of its
	 * 10 missed blocks at home */
	struct lb_draw d = {.blocks = 200, .rnd = 3, .wait_for = &wait_for, .queued = 18};
	int p = lb_llm.pick(&st, c, 4, &d);
	assert_true(p == 0 || p == 3);
	assert_int_equal(wait_for, -1);
	/* 16 more queued for nobody in particular: each is delayed by a prefill anywhere */
	d.queued = 34;
	assert_int_equal(lb_llm.pick(&st, c, 4, &d), LB_WAIT);
	assert_int_equal(wait_for, 1);
}

static void no_prompt_is_least_loaded(void **state)
{
	(void)state;
	struct lb_candidate c[3];
	fleet(c, 3);
	c[0].inflight = 3;
	c[1].inflight = 1;
	c[2].inflight = 2;
	/* the slots are free on all three: equal expected times, the least loaded wins */
	struct lb_draw d = {.blocks = 0};
	for (uint64_t r = 0; r < 6; r++) {
		d.rnd = r;
		assert_int_equal(lb_llm.pick(&st, c, 3, &d), 1);
	}
	/* a faster backend (by its fit) wins over a less loaded one */
	c[2].base_us = 5000;
	assert_int_equal(lb_llm.pick(&st, c, 3, &d), 2);
	/* down backends are never chosen */
	c[2].eligible = 0;
	assert_int_equal(lb_llm.pick(&st, c, 3, &d), 1);
}

static void fit_learns_a_line(void **state)
{
	(void)state;
	struct ttft_fit f;
	uint32_t base, block;
	ttft_fit_init(&f);
	ttft_fit_solve(&f, &base, &block);
	assert_int_equal(base, TTFT_FIT_BASE_US);
	assert_int_equal(block, TTFT_FIT_BLOCK_US);
	/* one size of miss only: the prior's slope through the samples' mean */
	for (int i = 0; i < 10; i++)
		ttft_fit_add(&f, 100, 250000);
	assert_false(ttft_fit_ready(&f));
	ttft_fit_solve(&f, &base, &block);
	assert_int_equal(block, TTFT_FIT_BLOCK_US);
	assert_int_equal(base, 250000 - 100 * TTFT_FIT_BLOCK_US);
	/* misses of several sizes on a 30 ms + 1.5 ms a block engine */
	for (int i = 0; i < 200; i++) {
		double m = (i * 37) % 250;
		ttft_fit_add(&f, m, 30000 + 1500 * m);
	}
	assert_true(ttft_fit_ready(&f));
	ttft_fit_solve(&f, &base, &block);
	assert_in_range(base, 29000, 31000);
	assert_in_range(block, 1450, 1550);
	/* noise that slopes down never makes a miss look cheap */
	ttft_fit_init(&f);
	for (int i = 0; i < 50; i++)
		ttft_fit_add(&f, i % 10, 100000 - 1000 * (i % 10));
	ttft_fit_solve(&f, &base, &block);
	assert_int_equal(block, 0);
	ttft_fit_add(&f, -1, 5); /* ignored */
}

/* n backends as fleet() with stable ids, as two instances see them: each its own fits, a
 * few percent apart (each learnt from its own answers). */
static void fleet_ids(struct lb_candidate *c, size_t n, uint32_t base_us)
{
	fleet(c, n);
	for (size_t i = 0; i < n; i++) {
		c[i].id = 0x9e3779b97f4a7c15u * (i + 1);
		c[i].base_us = base_us + 1000 * (uint32_t)(i % 2);
	}
}

static void new_prompt_same_backend_at_every_instance(void **state)
{
	(void)state;
	struct lb_candidate a[4], b[4];
	fleet_ids(a, 4, 20000);
	fleet_ids(b, 4, 21000);
	unsigned got[4] = {0};
	for (uint64_t k = 1; k <= 1000; k++) { /* 1,000 distinct new prompts */
		uint64_t key = k * 0xff51afd7ed558ccdu;
		struct lb_draw da = {.blocks = 40, .key = key, .has_key = 1, .rnd = k};
		struct lb_draw db = {.blocks = 40, .key = key, .has_key = 1, .rnd = ~k * 7};
		int pa = lb_llm.pick(&st, a, 4, &da);
		assert_true(pa >= 0);
		assert_int_equal(lb_llm.pick(&st, b, 4, &db), pa); /* whatever each one drew */
		got[pa]++;
	}
	for (int i = 0; i < 4; i++) /* spread: each 15-35 % */
		assert_true(got[i] >= 150 && got[i] <= 350);
}

static void new_prompt_load_still_wins(void **state)
{
	(void)state;
	struct lb_candidate c[4];
	fleet_ids(c, 4, 20000);
	c[2].inflight = 3; /* a slot free, but three of four taken where the rest hold none */
	unsigned got[4] = {0};
	for (uint64_t k = 1; k <= 400; k++) {
		struct lb_draw d = {.blocks = 40, .key = k * 0xc4ceb9fe1a85ec53u, .has_key = 1};
		got[lb_llm.pick(&st, c, 4, &d)]++;
	}
	assert_int_equal(got[2], 0);
	assert_true(got[0] && got[1] && got[3]);
	/* one taken of four where the rest hold none: about as loaded, still the hash's */
	c[2].inflight = 1;
	memset(got, 0, sizeof(got));
	for (uint64_t k = 1; k <= 400; k++) {
		struct lb_draw d = {.blocks = 40, .key = k * 0xc4ceb9fe1a85ec53u, .has_key = 1};
		got[lb_llm.pick(&st, c, 4, &d)]++;
	}
	assert_true(got[2] > 0);
	/* without a cap the wait is in the expected time: a backend sharing itself among many
	 * is more than LLM_NEW_SLACK_PCT slower, never the hash's */
	fleet_ids(c, 4, 20000);
	for (int i = 0; i < 4; i++)
		c[i].slots = 0;
	c[1].inflight = 2; /* 2 x 300 / 8 = 75 ms more */
	for (uint64_t k = 1; k <= 400; k++) {
		struct lb_draw d = {.blocks = 40, .key = k * 0xc4ceb9fe1a85ec53u, .has_key = 1};
		assert_int_not_equal(lb_llm.pick(&st, c, 4, &d), 1);
	}
	/* clearly quicker (more than LLM_NEW_SLACK_PCT): speed still wins a new prompt */
	fleet_ids(c, 3, 20000);
	c[0].base_us = 5000;
	struct lb_draw d = {.blocks = 40, .key = 12345, .has_key = 1};
	assert_int_equal(lb_llm.pick(&st, c, 3, &d), 0);
	/* not a new prompt once any backend holds part of it: the cost decides */
	c[0].base_us = 20000;
	c[2].hit_blocks = 1;
	assert_int_equal(lb_llm.pick(&st, c, 3, &d), 2);
	/* a backend at its cap is never the hash's answer */
	c[2].hit_blocks = 0;
	for (uint64_t k = 1; k <= 100; k++) {
		d.key = k;
		int r = lb_llm.pick(&st, c, 3, &d);
		busy(&c[r]);
		assert_int_not_equal(lb_llm.pick(&st, c, 3, &d), r);
		fleet_ids(c, 3, 20000);
		c[0].base_us = 19000;
	}
}

/*
 * A hostile client that knows the backends' addresses (their ids are a public hash of them)
 * and the block hash (unseeded) crafts new prompts whose first block weighs most at backend 0:
 * each such prompt goes there only while backend 0's share of its slots taken is within half
 * of the least loaded one's (LLM_NEW_LOAD_SLACK_PCT); past that, the others take them. So the
 * bound on what the hash alone can pile on one backend: its slots' share at most the least
 * loaded's + 50 %, plus the one request that crossed it (5 of 8 slots on an idle fleet).
 */
static void crafted_new_prompts_stay_within_the_load_bound(void **state)
{
	(void)state;
	struct lb_candidate c[4], idle[4];
	uint64_t keys[48];
	size_t nkeys = 0;
	fleet_ids(idle, 4, 20000);
	for (size_t i = 0; i < 4; i++)
		idle[i].slots = 8;
	for (uint64_t k = 1; nkeys < 48; k++) { /* the attacker's search, offline */
		struct lb_draw d = {.blocks = 40, .key = k * 0x9e3779b97f4a7c15u, .has_key = 1};
		if (lb_llm.pick(&st, idle, 4, &d) == 0)
			keys[nkeys++] = d.key;
	}
	memcpy(c, idle, sizeof(c));
	unsigned to0 = 0;
	for (size_t i = 0; i < nkeys; i++) {
		struct lb_draw d = {.blocks = 40, .key = keys[i], .has_key = 1};
		unsigned least = 8;
		for (size_t b = 0; b < 4; b++)
			least = c[b].inflight < least ? c[b].inflight : least;
		int r = lb_llm.pick(&st, c, 4, &d);
		if (r < 0)
			break; /* every slot taken */
		if (r == 0) {
			/* chosen by the hash only while within half of the least loaded's share */
			assert_true(c[0].inflight * 2 <= least * 2 + c[0].slots);
			to0++;
		}
		if (++c[r].inflight == c[r].slots)
			busy(&c[r]);
		assert_true(c[0].inflight * 2 <= (least + 1) * 2 + c[0].slots + 2);
		if (i == 4) /* on an idle fleet the first five all steered there */
			assert_int_equal(to0, 5);
		if (i == 5) /* the sixth not: 5 of 8 taken there, none elsewhere */
			assert_int_equal(to0, 5);
	}
	assert_int_equal(c[0].inflight, 8); /* (every slot of the fleet taken in the end) */
}

/* Pick, then read the pick back: the reason and the estimates. */
static int explained(struct lb_candidate *c, size_t n, const struct lb_draw *d,
		     const struct lb_state *s, struct lb_explain *e)
{
	int r = lb_llm.pick(s, c, n, d);
	lb_llm.explain(s, c, n, d, r, e);
	assert_int_equal(e->result, r);
	return r;
}

static void explain_reads_each_reason_back(void **state)
{
	(void)state;
	struct lb_candidate c[4];
	struct lb_explain e;
	/* a hit: least, the pick first, each estimate wait + base + per block x missed */
	fleet(c, 4);
	c[1].hit_blocks = 100;
	c[3].inflight = 2;
	struct lb_draw d = {.blocks = 120, .rnd = 3};
	memset(&e, 0, sizeof(e));
	assert_int_equal(explained(c, 4, &d, &st, &e), 1);
	assert_int_equal(e.why, LB_WHY_LEAST);
	assert_string_equal(lb_why_name(e.why), "least");
	assert_int_equal(e.ncand, 4);
	assert_int_equal(e.nseen, 4);
	assert_int_equal(e.blocks, 120);
	assert_int_equal(e.cand[0].backend, 1);
	assert_int_equal(e.cand[0].hit_blocks, 100);
	assert_int_equal(e.cand[0].expect_us, 20000 + 20 * 1000);
	assert_int_equal(e.cand[0].wait_us, 0);
	for (unsigned k = 1; k < e.ncand; k++) /* the rest quickest first */
		assert_true(e.cand[k].expect_us >= e.cand[k - 1].expect_us);
	assert_int_equal(e.cand[3].backend, 3); /* loaded, but a slot is free: no wait */
	assert_int_equal(e.cand[3].expect_us, 20000 + 120 * 1000);
	/* all alike but the load: tie, the less loaded */
	fleet(c, 4);
	c[0].inflight = c[1].inflight = c[2].inflight = 1;
	d = (struct lb_draw){.blocks = 0, .rnd = 0};
	assert_int_equal(explained(c, 4, &d, &st, &e), 3);
	assert_int_equal(e.why, LB_WHY_NO_PROMPT);
	d.blocks = 10;
	c[0].hit_blocks = c[1].hit_blocks = c[2].hit_blocks = c[3].hit_blocks = 5;
	assert_int_equal(explained(c, 4, &d, &st, &e), 3);
	assert_int_equal(e.why, LB_WHY_TIE_LOAD);
	c[3].inflight = 1; /* time and load alike: the draw */
	assert_true(explained(c, 4, &d, &st, &e) >= 0);
	assert_int_equal(e.why, LB_WHY_TIE_DRAW);
	/* a new prompt: the rendezvous, even where it is a hair slower */
	fleet_ids(c, 4, 20000);
	c[0].base_us = 19000;
	int r = -1;
	for (uint64_t k = 1; r <= 0; k++) { /* a prompt whose hash ranks another first */
		d = (struct lb_draw){.blocks = 50, .key = k, .has_key = 1};
		r = explained(c, 4, &d, &st, &e);
		assert_int_equal(e.why, LB_WHY_RENDEZVOUS);
		assert_string_equal(lb_why_name(e.why), "rendezvous");
	}
	assert_int_equal(e.cand[0].backend, r);
	assert_int_equal(e.cand[1].backend, 0); /* the quickest comes next */
	/* the quickest much busier than one about as quick: that one, by the rendezvous */
	c[0].inflight = 3;
	c[1].inflight = c[2].inflight = 3;
	assert_int_equal(explained(c, 4, &d, &st, &e), 3);
	assert_int_equal(e.why, LB_WHY_RENDEZVOUS);
	c[0].inflight = c[1].inflight = c[2].inflight = 0;
	/* alone within the margin: the least, not the hash's */
	c[0].base_us = 5000;
	assert_int_equal(explained(c, 4, &d, &st, &e), 0);
	assert_int_equal(e.why, LB_WHY_LEAST);
	/* a busy home: wait, then max-wait once waited long enough */
	fleet(c, 4);
	c[2].hit_blocks = 200;
	busy(&c[2]);
	d = (struct lb_draw){.blocks = 200, .waited_ms = 0};
	memset(&e, 0, sizeof(e));
	assert_int_equal(explained(c, 4, &d, &st, &e), LB_WAIT);
	assert_int_equal(e.why, LB_WHY_WAIT);
	assert_true(e.waited);
	assert_int_equal(e.cand[0].backend, 2); /* no pick: the quickest first, busy */
	assert_true(e.cand[0].busy);
	assert_int_equal(e.cand[0].wait_us, 300000 / 4);
	d.waited_ms = st.max_wait_ms;
	r = explained(c, 4, &d, &st, &e);
	assert_true(r >= 0 && r != 2);
	assert_int_equal(e.why, LB_WHY_MAX_WAIT);
	assert_true(e.waited); /* remembered from the pick before */
	/* a freed slot's question */
	fleet(c, 4);
	c[1].hit_blocks = 30;
	d = (struct lb_draw){.blocks = 40, .home_only = 1};
	assert_int_equal(explained(c, 4, &d, &st, &e), 1);
	assert_int_equal(e.why, LB_WHY_HOME);
	/* nobody up */
	for (int i = 0; i < 4; i++)
		c[i].eligible = c[i].busy = 0;
	d = (struct lb_draw){.blocks = 40};
	assert_int_equal(explained(c, 4, &d, &st, &e), LB_NONE);
	assert_int_equal(e.why, LB_WHY_NONE);
	assert_int_equal(e.ncand, 0);
}

static void explain_keeps_the_pick_and_the_quickest(void **state)
{
	(void)state;
	struct lb_candidate c[40];
	struct lb_explain e = {0};
	fleet(c, 40);
	for (int i = 0; i < 40; i++)
		c[i].hit_blocks = (uint32_t)i; /* the last holds the most */
	c[39].inflight = 4;		       /* ... but is busy, its turn soon */
	c[39].service_us = 40000;
	c[39].hit_blocks = 100;
	c[39].eligible = 0;
	c[39].busy = 1;
	c[5].eligible = 0; /* down: not seen */
	struct lb_draw d = {.blocks = 100, .waited_ms = 1000};
	int r = explained(c, 40, &d, &st, &e);
	assert_int_equal(r, 38);
	assert_int_equal(e.why, LB_WHY_MAX_WAIT);
	assert_int_equal(e.nseen, 39);
	assert_int_equal(e.ncand, LB_EXPLAIN_MAX);
	assert_int_equal(e.cand[0].backend, 38);
	assert_int_equal(e.cand[1].backend, 39); /* then the quickest: the busy home */
	for (unsigned k = 2; k < LB_EXPLAIN_MAX; k++)
		assert_int_equal(e.cand[k].backend, 39 - k);
	/* an estimate beyond 32 bits saturates */
	fleet(c, 2);
	c[0].slots = 0;
	c[0].inflight = UINT32_MAX;
	c[0].service_us = UINT32_MAX;
	d = (struct lb_draw){.blocks = 1};
	assert_int_equal(explained(c, 2, &d, &st, &e), 1);
	assert_int_equal(e.cand[1].expect_us, UINT32_MAX);
	assert_int_equal(e.cand[1].wait_us, UINT32_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(home_wins_while_it_has_a_slot),
	    cmocka_unit_test(busy_home_waited_for_then_not),
	    cmocka_unit_test(a_queue_for_the_home_counts_and_so_does_the_pools),
	    cmocka_unit_test(a_queue_for_another_backend_takes_nothing_from_a_free_one),
	    cmocka_unit_test(no_prompt_is_least_loaded),
	    cmocka_unit_test(new_prompt_same_backend_at_every_instance),
	    cmocka_unit_test(new_prompt_load_still_wins),
	    cmocka_unit_test(crafted_new_prompts_stay_within_the_load_bound),
	    cmocka_unit_test(fit_learns_a_line),
	    cmocka_unit_test(explain_reads_each_reason_back),
	    cmocka_unit_test(explain_keeps_the_pick_and_the_quickest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
