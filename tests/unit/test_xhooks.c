/*
 * test_xhooks.c - the features' hook lists and contexts: each context gets its own aligned
 * place behind the exchange, in the order of the list; a feature without a context takes
 * none; each point runs its hooks in that order and skips a feature without one, the
 * response body only those the exchange's features asked for; the same list again changes
 * nothing, another one is refused, and so is a list past XHOOKS_MAX.
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

static void a_head(struct exchange *x, const struct http_head *h)
{
	(void)x, (void)h;
	note('a');
}
static void a_end(struct exchange *x, uint64_t now_ns)
{
	(void)x, (void)now_ns;
	note('a');
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

static size_t a_off, b_off, c_off;
static const struct xhook fa = {
    .name = "a", .ctx_size = 3, .ctx_off = &a_off, .head = a_head, .end = a_end};
static const struct xhook fb = {.name = "b", .ctx_off = &b_off, .end = b_end}; /* no context */
static const struct xhook fc = {.name = "c",
				.ctx_size = 100,
				.ctx_off = &c_off,
				.head = c_head,
				.resp_body = c_body,
				.end = c_end};
static const struct xhook *const list[] = {&fa, &fb, &fc};

static void contexts_laid_out_and_hooks_walked_in_order(void **state)
{
	(void)state;
	assert_int_equal(xhooks_setup(list, 3, sizeof(struct exchange)), 0);
	assert_true(a_off >= sizeof(struct exchange));
	assert_int_equal(a_off % 16, 0);
	assert_int_equal(b_off, 0); /* no context: no place */
	assert_true(c_off >= a_off + 3);
	assert_int_equal(c_off % 16, 0);
	assert_true(xhooks_block_size() >= c_off + 100);

	struct exchange *x = calloc(1, xhooks_block_size());
	assert_non_null(x);
	assert_ptr_equal(xhooks_ctx(x, c_off), (char *)x + c_off);
	assert_ptr_equal(xhooks_exchange_of(xhooks_ctx(x, c_off), c_off), x);

	norder = 0, order[0] = 0;
	xhooks_head(x, NULL);
	assert_string_equal(order, "ac");
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
	/* another exchange in the same block, zeroed: asks for nothing yet */
	memset(x, 0, xhooks_block_size());
	assert_false(xhooks_body_wanted(x));
	assert_null(xhooks_keeper(x));
	norder = 0, order[0] = 0;
	xhooks_resp_body(x, "abc", 3);
	assert_string_equal(order, "");
	free(x);

	/* again with the same list (a second start in one process): the same layout */
	size_t block = xhooks_block_size(), off = c_off;
	assert_int_equal(xhooks_setup(list, 3, sizeof(struct exchange)), 0);
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
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(contexts_laid_out_and_hooks_walked_in_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
