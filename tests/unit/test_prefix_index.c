/*
 * test_prefix_index.c - the per-backend KV-cache estimate: the longest held prefix, LRU
 * aging at the engine's capacity (used blocks stay, unused ones go), removal, a prompt taken
 * back (it ages nothing) and clearing;
 * and, against a real block LRU fed the same conversations, hits predicted within a few
 * percent of the LRU's whether the conversations come back often or seldom.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>

#include "policy/prefix_index.h"

/* A chain of <n> block hashes for conversation <seed> (distinct seeds never collide). */
static void chain(uint64_t *h, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		h[i] = (seed * 1000003u + i + 1) * 0x9e3779b97f4a7c15u;
}

static void longest_prefix(void **state)
{
	(void)state;
	struct prefix_index *ix;
	assert_int_equal(prefix_index_new(1024, &ix), 0);
	uint64_t a[40], b[40];
	chain(a, 40, 1);
	assert_int_equal(prefix_index_match(ix, a, 40), 0);
	prefix_index_insert(ix, a, 30);
	assert_int_equal(prefix_index_match(ix, a, 40), 30);
	assert_int_equal(prefix_index_match(ix, a, 12), 12);
	/* another prompt sharing the first 8 blocks */
	memcpy(b, a, 8 * sizeof(*b));
	chain(b + 8, 32, 2);
	assert_int_equal(prefix_index_match(ix, b, 40), 8);
	assert_int_equal(prefix_index_count(ix), 30);
	prefix_index_remove(ix, a + 20, 10);
	assert_int_equal(prefix_index_match(ix, a, 40), 20);
	prefix_index_clear(ix);
	assert_int_equal(prefix_index_match(ix, a, 40), 0);
	assert_int_equal(prefix_index_count(ix), 0);
	prefix_index_clear(ix); /* twice: still nothing, and no sweep needed */
	assert_int_equal(prefix_index_match(ix, b, 40), 0);
	prefix_index_insert(ix, a, 10); /* stored again after the clear */
	assert_int_equal(prefix_index_match(ix, a, 40), 10);
	assert_int_equal(prefix_index_count(ix), 10);
	prefix_index_free(ix);
}

/* A reload's new index learns the old one's: the same prefixes held, the same aging clock
 * (so what was about to age out still does); indexes of other sizes are refused whole. */
static void copy_carries_blocks_and_age(void **state)
{
	(void)state;
	struct prefix_index *from, *to, *other;
	assert_int_equal(prefix_index_new(64, &from), 0);
	assert_int_equal(prefix_index_new(64, &to), 0);
	assert_int_equal(prefix_index_new(128, &other), 0);
	uint64_t a[16], b[60];
	chain(a, 16, 1);
	chain(b, 60, 2);
	prefix_index_insert(from, a, 16);
	assert_int_equal(prefix_index_copy(to, from), 0);
	assert_int_equal(prefix_index_match(to, a, 16), 16);
	assert_int_equal(prefix_index_count(to), 16);
	/* 60 newer blocks: <a> is beyond the capacity of 64 in both, its first 12 gone */
	prefix_index_insert(from, b, 60);
	prefix_index_insert(to, b, 60);
	assert_int_equal(prefix_index_match(to, a, 16), prefix_index_match(from, a, 16));
	assert_int_equal(prefix_index_copy(other, from), -EINVAL);
	assert_int_equal(prefix_index_count(other), 0);
	prefix_index_free(from);
	prefix_index_free(to);
	prefix_index_free(other);
}

static void ages_like_lru(void **state)
{
	(void)state;
	struct prefix_index *ix;
	assert_int_equal(prefix_index_new(64, &ix), 0);
	uint64_t hot[16], cold[16], other[16];
	chain(hot, 16, 10);
	chain(cold, 16, 11);
	prefix_index_insert(ix, hot, 16);
	prefix_index_insert(ix, cold, 16);
	/* 8 rounds of 16 new blocks each (twice the capacity), the hot prompt used between */
	for (uint64_t r = 0; r < 8; r++) {
		chain(other, 16, 100 + r);
		prefix_index_insert(ix, other, 16);
		prefix_index_insert(ix, hot, 16);
	}
	assert_int_equal(prefix_index_match(ix, hot, 16), 16);
	assert_int_equal(prefix_index_match(ix, cold, 16), 0); /* the engine dropped it */
	/* it may believe a few more than the engine holds (a lower bound on age), never
	 * more than its table */
	assert_true(prefix_index_count(ix) <= 2 * 64);
	prefix_index_free(ix);
}

/* A prompt taken back (its request got no answer: llm_unpicked) goes with the clock's ticks
 * its insert took, so it ages nothing: a client whose long prompts are all refused or
 * cancelled cannot push what the engine still holds out of the index (with a plain remove,
 * two such prompts of 48 blocks made the index forget a prompt the engine held). */
static void a_prompt_taken_back_ages_nothing(void **state)
{
	(void)state;
	struct prefix_index *ix;
	assert_int_equal(prefix_index_new(64, &ix), 0);
	uint64_t held[16], refused[48];
	chain(held, 16, 1);
	assert_int_equal(prefix_index_insert(ix, held, 16), 16);
	for (uint64_t r = 0; r < 8; r++) {
		chain(refused, 48, 100 + r);
		uint64_t ticks = prefix_index_insert(ix, refused, 48);
		assert_int_equal(ticks, 48);
		prefix_index_take_back(ix, refused, 48, ticks);
		assert_int_equal(prefix_index_match(ix, refused, 48), 0);
	}
	assert_int_equal(prefix_index_match(ix, held, 16), 16);
	assert_int_equal(prefix_index_count(ix), 16);
	/* blocks that were there already took only a refresh's ticks and give back only those
	 * (a count of the blocks removed would turn the clock back a prompt's length whenever a
	 * client resent, refused, a prompt behind a gap in the index) */
	uint64_t ticks = prefix_index_insert(ix, held + 1, 15);
	assert_true(ticks < 4);
	prefix_index_take_back(ix, held + 1, 15, ticks);
	assert_int_equal(prefix_index_match(ix, held, 16), 1);
	prefix_index_insert(ix, held, 16);
	/* and the index still ages by what it takes in: 32 more keep it, 80 more age it out */
	chain(refused, 32, 200);
	prefix_index_insert(ix, refused, 32);
	assert_int_equal(prefix_index_match(ix, held, 16), 16);
	chain(refused, 48, 201);
	prefix_index_insert(ix, refused, 48);
	assert_int_equal(prefix_index_match(ix, held, 16), 0);
	prefix_index_free(ix);
}

/* A block LRU as an engine keeps it (the simulator's model): most recent first. */
#define REF_CAP 512
struct ref_lru {
	uint64_t b[REF_CAP];
	size_t n;
};

static size_t ref_find(const struct ref_lru *l, uint64_t h)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->b[i] == h)
			return i;
	return SIZE_MAX;
}

static size_t ref_match(const struct ref_lru *l, const uint64_t *h, size_t n)
{
	size_t k = 0;
	while (k < n && ref_find(l, h[k]) != SIZE_MAX)
		k++;
	return k;
}

/* Use blocks h[0..n): each to the top, the last one first, so block 0 ends most recent. */
static void ref_admit(struct ref_lru *l, const uint64_t *h, size_t n)
{
	for (size_t j = n; j-- > 0;) {
		size_t i = ref_find(l, h[j]);
		if (i == SIZE_MAX)
			i = l->n < REF_CAP ? l->n++ : REF_CAP - 1; /* the last one is dropped */
		memmove(&l->b[1], &l->b[0], i * sizeof(l->b[0]));
		l->b[0] = h[j];
	}
}

/* <convs> conversations growing 3-6 blocks a turn after a shared 8-block system prompt,
 * each turn the whole conversation so far; the first <hot> conversations come back 4 times
 * as often. Returns predicted / actual hit blocks, in percent. */
static unsigned replay(unsigned convs, unsigned hot, unsigned turns)
{
	static struct ref_lru lru;
	memset(&lru, 0, sizeof(lru));
	struct prefix_index *ix;
	assert_int_equal(prefix_index_new(REF_CAP, &ix), 0);
	unsigned len[64] = {0};
	uint64_t h[256], pred = 0, real = 0, rnd = 12345;
	assert_true(convs <= 64);
	for (unsigned t = 0; t < turns; t++) {
		rnd = rnd * 6364136223846793005u + 1442695040888963407u;
		unsigned c = (unsigned)(rnd >> 33) % (convs + 3 * hot);
		c = c < convs ? c : (c - convs) % hot;
		rnd = rnd * 6364136223846793005u + 1442695040888963407u;
		len[c] += 3 + (unsigned)(rnd >> 40) % 4;
		if (len[c] > 200)
			len[c] = 12; /* it ended; another one begins in its place */
		size_t n = 8 + len[c];
		for (size_t i = 0; i < n; i++)
			h[i] = i < 8 ? (i + 1) * 0x9e3779b97f4a7c15u
				     : ((uint64_t)c * 1000003u + i + 7) * 0xbf58476d1ce4e5b9u;
		if (t > turns / 4) { /* once both are warm */
			pred += prefix_index_match(ix, h, n);
			real += ref_match(&lru, h, n);
		}
		prefix_index_insert(ix, h, n);
		ref_admit(&lru, h, n);
	}
	prefix_index_free(ix);
	assert_true(real > 0);
	return (unsigned)(100 * pred / real);
}

static void predicts_an_lrus_hits(void **state)
{
	(void)state;
	/* many hits (a few hot conversations that fit), few (many that do not), between */
	unsigned many = replay(24, 4, 4000), few = replay(64, 0, 4000), mid = replay(40, 8, 4000);
	print_message("predicted / real hits: %u%% %u%% %u%%\n", many, few, mid);
	assert_in_range(many, 90, 110);
	assert_in_range(few, 90, 110);
	assert_in_range(mid, 90, 110);
}

static void bounded_memory_many_prompts(void **state)
{
	(void)state;
	struct prefix_index *ix;
	assert_int_equal(prefix_index_new(100, &ix), 0);
	uint64_t h[8];
	for (uint64_t r = 0; r < 10000; r++) {
		chain(h, 8, r);
		prefix_index_insert(ix, h, 8);
	}
	assert_true(prefix_index_count(ix) <= 100);	   /* nothing re-used: exact */
	assert_int_equal(prefix_index_match(ix, h, 8), 8); /* the last one is there */
	prefix_index_free(ix);
	assert_int_equal(prefix_index_new(0, &ix), -ENOMEM);
	prefix_index_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(longest_prefix),
	    cmocka_unit_test(copy_carries_blocks_and_age),
	    cmocka_unit_test(ages_like_lru),
	    cmocka_unit_test(bounded_memory_many_prompts),
	    cmocka_unit_test(predicts_an_lrus_hits),
	    cmocka_unit_test(a_prompt_taken_back_ages_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
