/*
 * test_xhooks.c - the features' hook lists and contexts: each context gets its own aligned
 * place behind the exchange, the always features' first, then in the order of the list; a
 * feature without a context takes none; each point runs its hooks in that order and skips a
 * feature without one, the response body only those the exchange's features asked for; past
 * the head, only the features in the exchange's mask: one that has not joined is not called
 * and its context is not touched (a reused block's bytes stay), reads of it see zeroes, and
 * one that joins late starts from a zeroed context and is called from then on, in the walk
 * under way too when a hook of that walk made it join (the end's, the response head's with
 * one feature called straight); an always feature reads as in, its own context; the same list
 * again changes nothing, another one is refused, and so is a list past XHOOKS_MAX or a
 * feature that can neither be always in nor join.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "proxy/exchange.h"
#include "proxy/xhooks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static char order[64]; /* which hooks ran: a letter per feature, in call order */
static size_t norder;

static void note(char c)
{
	if (norder < sizeof(order) - 1)
		order[norder++] = c;
	order[norder] = 0;
}

/* a hook that makes another feature join during its walk: which one, when set */
static const struct xhook *a_end_joins, *d_resp_head_joins, *d_end_joins;

static void a_head(struct exchange *x, const struct http_head *h)
{
	(void)x, (void)h;
	note('a');
}
static void a_end(struct exchange *x, uint64_t now_ns)
{
	(void)now_ns;
	note('a');
	if (a_end_joins)
		(void)xhooks_join(x, a_end_joins);
}
static void b_end(struct exchange *x, uint64_t now_ns)
{
	(void)x, (void)now_ns;
	note('b');
}
static void c_head(struct exchange *x, const struct http_head *h)
{
	(void)x, (void)h;
	note('c');
}
static void c_body(struct exchange *x, const char *p, size_t len)
{
	(void)x;
	note(len == 3 && memcmp(p, "abc", 3) == 0 ? 'c' : '?');
}
static void c_end(struct exchange *x, uint64_t now_ns)
{
	(void)x;
	note(now_ns == 42 ? 'c' : '?');
}
static unsigned c_resp_heads; /* counted, not noted: the walks' orders above stay as they are */
static void c_resp_head(struct exchange *x, const struct http_head *h)
{
	(void)x, (void)h;
	c_resp_heads++;
}

/* d: joins late (no head hook); each of its hooks counts its calls in its context */
struct d_x {
	unsigned char calls[4]; /* req_body, resp_head, resp_done, end */
	unsigned char rest[36];
};
static size_t d_off;
static uint32_t c_bit, d_bit;
static struct d_x *dx(struct exchange *x)
{
	return xhooks_ctx(x, d_off);
}
static void d_req_body(struct exchange *x, const char *p, size_t len)
{
	(void)p, (void)len;
	dx(x)->calls[0]++;
	note('d');
}
static void d_resp_head(struct exchange *x, const struct http_head *h)
{
	(void)h;
	dx(x)->calls[1]++;
	note('d');
	if (d_resp_head_joins)
		(void)xhooks_join(x, d_resp_head_joins);
}
static void d_resp_done(struct exchange *x)
{
	dx(x)->calls[2]++;
	note('d');
}
static void d_end(struct exchange *x, uint64_t now_ns)
{
	(void)now_ns;
	dx(x)->calls[3]++;
	note('d');
	if (d_end_joins)
		(void)xhooks_join(x, d_end_joins);
}

static size_t a_off, b_off, c_off;
static const struct xhook fa = {
    .name = "a", .ctx_size = 3, .ctx_off = &a_off, .always = 1, .head = a_head, .end = a_end};
static const struct xhook fb = {
    .name = "b", .ctx_off = &b_off, .always = 1, .end = b_end}; /* no context */
static const struct xhook fc = {.name = "c",
				.ctx_size = 100,
				.ctx_off = &c_off,
				.bit = &c_bit,
				.head = c_head,
				.resp_head = c_resp_head,
				.resp_body = c_body,
				.end = c_end};
static const struct xhook fd = {.name = "d",
				.ctx_size = sizeof(struct d_x),
				.ctx_off = &d_off,
				.bit = &d_bit,
				.req_body = d_req_body,
				.resp_head = d_resp_head,
				.resp_done = d_resp_done,
				.end = d_end};
static const struct xhook *const list[] = {&fa, &fb, &fc, &fd};

/* A block as the free list gives it back: the last exchange's bytes (0xa5 here), then
 * started as exchange_new() does. */
static struct exchange *block_new(void)
{
	struct exchange *x = malloc(xhooks_block_size());
	assert_non_null(x);
	memset(x, 0xa5, xhooks_block_size());
	memset(x, 0, sizeof(*x));
	xhooks_start(x);
	return x;
}

/* Are the <n> bytes at <p> all <v>? */
static int all(const void *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (((const unsigned char *)p)[i] != v)
			return 0;
	return 1;
}

static void contexts_laid_out_and_hooks_walked_in_order(void **state)
{
	(void)state;
	assert_int_equal(xhooks_setup(list, 4, sizeof(struct exchange)), 0);
	assert_true(a_off >= sizeof(struct exchange));
	assert_int_equal(a_off % 16, 0);
	assert_int_equal(b_off, 0);	 /* no context: no place */
	assert_true(c_off >= a_off + 3); /* the always one's first */
	assert_int_equal(c_off % 16, 0);
	assert_true(d_off >= c_off + 100);
	assert_true(xhooks_block_size() >= d_off + sizeof(struct d_x));

	struct exchange *x = block_new();
	assert_ptr_equal(xhooks_ctx(x, c_off), (char *)x + c_off);
	assert_ptr_equal(xhooks_exchange_of(xhooks_ctx(x, c_off), c_off), x);
	assert_true(all(xhooks_ctx(x, a_off), 3, 0)); /* always in: zeroed at the start */

	norder = 0, order[0] = 0;
	xhooks_head(x, NULL); /* every feature's head: where it may join */
	assert_string_equal(order, "ac");
	assert_false(xhooks_in(x, &fc));
	memset(xhooks_join(x, &fc), 0x11, 100); /* c joins (its head would) */
	assert_true(xhooks_in(x, &fc));
	norder = 0, order[0] = 0;
	xhooks_resp_body(x, "abc", 3); /* nobody asked for it */
	assert_string_equal(order, "");
	xhooks_want_body(x, &fa);	     /* a has no resp_body hook: nothing */
	assert_false(xhooks_body_wanted(x)); /* a body nobody reads (may be spliced) */
	xhooks_want_body(x, &fc);
	assert_true(xhooks_body_wanted(x));
	/* a feature's offer to keep the body for the client: the exchange's own, beside the
	 * contexts (none of which it overlaps) */
	static const struct xkeep keep;
	assert_null(xhooks_keeper(x));
	memset(xhooks_ctx(x, c_off), 0xff, 100);
	xhooks_keep_body(x, &keep);
	assert_ptr_equal(xhooks_keeper(x), &keep);
	assert_true(xhooks_body_wanted(x));
	memset(xhooks_ctx(x, c_off), 0, 100);
	xhooks_resp_body(x, "abc", 3);
	xhooks_resp_head(x, NULL); /* nobody's */
	xhooks_resp_done(x);
	xhooks_req_body(x, "", 0);
	assert_string_equal(order, "c");
	norder = 0, order[0] = 0;
	xhooks_end(x, 42);
	assert_string_equal(order, "abc");
	/* another exchange in the same block: asks for nothing yet, and c is out again */
	memset(x, 0, sizeof(*x));
	xhooks_start(x);
	assert_false(xhooks_body_wanted(x));
	assert_false(xhooks_in(x, &fc));
	assert_null(xhooks_keeper(x));
	norder = 0, order[0] = 0;
	xhooks_resp_body(x, "abc", 3);
	assert_string_equal(order, "");
	free(x);

	/* again with the same list (a second start in one process): the same layout */
	size_t block = xhooks_block_size(), off = c_off;
	assert_int_equal(xhooks_setup(list, 4, sizeof(struct exchange)), 0);
	assert_int_equal(xhooks_block_size(), block);
	assert_int_equal(c_off, off);
	/* another list once laid out: refused, the layout kept */
	static const struct xhook *const other[] = {&fc};
	assert_int_equal(xhooks_setup(other, 1, sizeof(struct exchange)), -EBUSY);
	assert_int_equal(c_off, off);
	/* too many features */
	static const struct xhook *many[XHOOKS_MAX + 1];
	for (size_t i = 0; i <= XHOOKS_MAX; i++)
		many[i] = &fb;
	assert_int_equal(xhooks_setup(many, XHOOKS_MAX + 1, sizeof(struct exchange)), -E2BIG);
	/* neither always nor with a bit to join by */
	static const struct xhook lost = {.name = "lost", .end = b_end};
	static const struct xhook *const lone[] = {&lost};
	assert_int_equal(xhooks_setup(lone, 1, sizeof(struct exchange)), -EINVAL);
}

/* Past the head, a feature out of the mask is not called and its context not touched; it
 * reads as zeroes; joining late zeroes it, and its hooks run from then on. */
static void features_out_of_the_mask_cost_nothing(void **state)
{
	(void)state;
	assert_int_equal(xhooks_setup(list, 4, sizeof(struct exchange)), 0);
	struct exchange *x = block_new();
	norder = 0, order[0] = 0;
	xhooks_req_body(x, "", 0);
	xhooks_resp_head(x, NULL);
	xhooks_resp_done(x);
	xhooks_end(x, 42);
	assert_string_equal(order, "ab");		   /* the always ones' ends alone */
	assert_true(all(xhooks_ctx(x, c_off), 100, 0xa5)); /* untouched */
	assert_true(all(xhooks_ctx(x, d_off), sizeof(struct d_x), 0xa5));
	/* read while out: zeroes, never the block's bytes */
	assert_true(all(xhooks_peek(x, &fd), sizeof(struct d_x), 0));
	assert_ptr_not_equal(xhooks_peek(x, &fd), xhooks_ctx(x, d_off));

	/* d joins late (a second attempt, say): from a zeroed context, called from now on */
	struct d_x *d = xhooks_join(x, &fd);
	assert_ptr_equal(d, xhooks_ctx(x, d_off));
	assert_true(all(d, sizeof(*d), 0));
	assert_ptr_equal(xhooks_peek(x, &fd), d);
	d->rest[0] = 7;
	assert_ptr_equal(xhooks_join(x, &fd), d); /* again: as it is, not zeroed */
	assert_int_equal(d->rest[0], 7);
	norder = 0, order[0] = 0;
	xhooks_req_body(x, "", 0);
	xhooks_resp_head(x, NULL); /* d's alone: called straight */
	xhooks_resp_done(x);
	xhooks_end(x, 42);
	assert_string_equal(order, "dddabd");
	assert_true(all(d->calls, 4, 1));
	assert_true(all(xhooks_ctx(x, c_off), 100, 0xa5)); /* c still out, still untouched */

	/* asking for the body joins a feature that had not: its context zeroed first */
	xhooks_want_body(x, &fc);
	assert_true(xhooks_in(x, &fc));
	assert_true(all(xhooks_ctx(x, c_off), 100, 0));
	norder = 0, order[0] = 0;
	xhooks_resp_body(x, "abc", 3);
	xhooks_end(x, 42);
	assert_string_equal(order, "cabcd");
	free(x);
}

/* A hook that makes another feature join during a walk: that feature's hook at the point
 * runs in the same walk -- after the end of an always feature (whatever the joiner takes
 * there has its end), after a later feature's (a lower bit), and after the one response head
 * hook called straight. An always feature reads as in, its context its own. */
static void a_join_during_a_walk_is_walked(void **state)
{
	(void)state;
	assert_int_equal(xhooks_setup(list, 4, sizeof(struct exchange)), 0);
	struct exchange *x = block_new();
	assert_true(xhooks_in(x, &fa)); /* always, no bit: in, never a NULL bit read */
	assert_ptr_equal(xhooks_peek(x, &fa), xhooks_ctx(x, a_off));
	assert_ptr_equal(xhooks_join(x, &fa), xhooks_ctx(x, a_off));

	/* nobody joined; a's end makes d join: d's end runs in this walk, from a zeroed context */
	a_end_joins = &fd;
	norder = 0, order[0] = 0;
	xhooks_end(x, 42);
	a_end_joins = NULL;
	assert_string_equal(order, "abd");
	assert_int_equal(dx(x)->calls[3], 1);
	assert_int_equal(dx(x)->calls[0], 0);

	/* d alone at the response head (called straight) makes c join: c's hook runs too */
	c_resp_heads = 0;
	d_resp_head_joins = &fc;
	norder = 0, order[0] = 0;
	xhooks_resp_head(x, NULL);
	d_resp_head_joins = NULL;
	assert_string_equal(order, "d");
	assert_int_equal(c_resp_heads, 1);
	xhooks_resp_head(x, NULL); /* both in now: each once */
	assert_int_equal(c_resp_heads, 2);
	assert_int_equal(dx(x)->calls[1], 2);
	free(x);

	/* d in, c out; d's end makes c (a lower bit, walked before it) join: c's end still runs */
	x = block_new();
	(void)xhooks_join(x, &fd);
	d_end_joins = &fc;
	norder = 0, order[0] = 0;
	xhooks_end(x, 42);
	d_end_joins = NULL;
	assert_string_equal(order, "abdc");
	free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(contexts_laid_out_and_hooks_walked_in_order),
	    cmocka_unit_test(features_out_of_the_mask_cost_nothing),
	    cmocka_unit_test(a_join_during_a_walk_is_walked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
