/*
 * test_limits.c - a route's limits by a given clock: token reservations settled with the
 * usage a response reports or the events it streams (refund, overdraft charged as it
 * goes), the concurrency cap per tenant; the usage scanner on bodies cut anywhere, and on
 * lines ended by CR, LF or CRLF, reading whole numbers only; the max_tokens of a request
 * body.
 */
#include "guard/limits.h"
#include "http/usage.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static const char stream[] =
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"
    "data: {\"choices\":[{\"delta\":{\"content\": \"lo\"}}]}\r\n\r\n"
    "data: {\"choices\":[{\"text\":\"!\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,"
    "\"total_tokens\": 10}}\n\n"
    "data: [DONE]\n\n";

static void scan_whole_and_cut(void **state)
{
	(void)state;
	for (size_t step = 1; step <= sizeof(stream); step++) {
		struct usage_scan u;
		usage_scan_init(&u);
		for (size_t i = 0; i < sizeof(stream) - 1; i += step) {
			size_t n = sizeof(stream) - 1 - i < step ? sizeof(stream) - 1 - i : step;
			usage_scan_feed(&u, stream + i, n);
		}
		assert_int_equal(u.events, 3); /* the role-only chunk and usage carry no text */
		assert_true(u.has_total);
		assert_int_equal(u.total, 10);
		assert_int_equal(u.prompt, 7);
		assert_int_equal(u.completion, 3);
	}
	/* a JSON response: its usage, no events */
	static const char json[] = "{\"choices\":[{\"text\":\"data: x\"}],\"usage\":{"
				   "\"total_tokens\":1234}}";
	struct usage_scan u;
	usage_scan_init(&u);
	usage_scan_feed(&u, json, sizeof(json) - 1);
	assert_int_equal(u.events, 0);
	assert_int_equal(u.total, 1234);
	/* only a key's whole name counts, right before its colon; escaped quotes, names
	 * longer than any key and keys that are values count nothing */
	static const char tricky[] =
	    "data: {\"subtext\":\"a\",\"a_very_long_name_indeed_text\":\"b\"}\n"
	    "data: {\"x\":\"\\\"text\\\":\\\"c\\\"\",\"text\" :\"d\",\"v\":\"text\"}\n"
	    "data: {\"usage\":{\"prompt_tokens\":5,\"prompt_tokens_details\":{\"cached\":2},"
	    "\"completion_tokens\":9,\"completion_tokens_details\":{\"reasoning_tokens\":4},"
	    "\"total_tokens\":14}}\n"
	    "data: {\"choices\":[{\"delta\":{\"content\":\"e\"}}]}\n";
	for (size_t step = 1; step < sizeof(tricky); step++) {
		usage_scan_init(&u);
		for (size_t i = 0; i < sizeof(tricky) - 1; i += step)
			usage_scan_feed(&u, tricky + i,
					sizeof(tricky) - 1 - i < step ? sizeof(tricky) - 1 - i
								      : step);
		assert_int_equal(u.events, 1); /* the last line only */
		assert_int_equal(u.prompt, 5);
		assert_int_equal(u.completion, 9);
		assert_int_equal(u.total, 14);
		assert_false(u.has_cached); /* "cached" is no "cached_tokens" */
	}
	/* the engine's cached prompt tokens (OpenAI, vLLM), cut anywhere */
	static const char details[] =
	    "{\"usage\":{\"prompt_tokens\":40,\"total_tokens\":48,\"completion_tokens\":8,"
	    "\"prompt_tokens_details\":{\"cached_tokens\":32}}}";
	for (size_t step = 1; step < sizeof(details); step++) {
		usage_scan_init(&u);
		for (size_t i = 0; i < sizeof(details) - 1; i += step)
			usage_scan_feed(&u, details + i,
					sizeof(details) - 1 - i < step ? sizeof(details) - 1 - i
								       : step);
		assert_true(u.has_cached && u.has_prompt);
		assert_int_equal(u.cached, 32);
		assert_int_equal(u.prompt, 40);
		assert_int_equal(u.completion, 8);
	}
	/* chunked framing between events leaves them whole */
	static const char chunked[] =
	    "22\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\n\r\n"
	    "22\r\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\n\r\n0\r\n\r\n";
	usage_scan_init(&u);
	usage_scan_chunked(&u);
	usage_scan_feed(&u, chunked, sizeof(chunked) - 1);
	assert_int_equal(u.events, 2);
	assert_false(u.has_total);
	/* an event and a usage object split across chunks, at every cut: counted once, whole */
	static const char split[] = "10\r\ndata: {\"choices\"\r\n"
				    "1a\r\n:[{\"text\":\"a\"}]}\n\ndata: {\"\r\n"
				    "45\r\nusage\":{\"prompt_tokens\":7,\"completion_tokens\":3,"
				    "\"total_tokens\":10}}\n\n\r\n0\r\n\r\n";
	for (size_t step = 1; step < sizeof(split); step++) {
		usage_scan_init(&u);
		usage_scan_chunked(&u);
		for (size_t i = 0; i < sizeof(split) - 1; i += step)
			usage_scan_feed(&u, split + i,
					sizeof(split) - 1 - i < step ? sizeof(split) - 1 - i
								     : step);
		assert_int_equal(u.events, 1);
		assert_true(u.has_total && u.has_prompt && u.has_completion);
		assert_int_equal(u.total, 10);
		assert_int_equal(u.prompt, 7);
		assert_int_equal(u.completion, 3);
		assert_false(u.bad_framing);
	}
	/* the same bytes scanned as if unframed: the chunk lines break the event */
	usage_scan_init(&u);
	usage_scan_feed(&u, split, sizeof(split) - 1);
	assert_int_equal(u.events, 0);
	/* malformed framing stops the count */
	usage_scan_init(&u);
	usage_scan_chunked(&u);
	usage_scan_feed(&u, "zz\r\ndata: {\"text\":\"a\"}\n\n", 24);
	assert_true(u.bad_framing);
	assert_int_equal(u.events, 0);
}

/* <s> scanned whole and cut into pieces of every size: the events of each, alike. */
static uint64_t events_cut_anywhere(const char *s)
{
	size_t len = strlen(s);
	struct usage_scan whole;
	usage_scan_init(&whole);
	usage_scan_feed(&whole, s, len);
	for (size_t step = 1; step <= len; step++) {
		struct usage_scan u;
		usage_scan_init(&u);
		for (size_t i = 0; i < len; i += step)
			usage_scan_feed(&u, s + i, len - i < step ? len - i : step);
		assert_int_equal(u.events, whole.events);
	}
	return whole.events;
}

/* An event stream's lines end with CR, LF or CRLF (the format allows each); a CR-only stream
 * counted no event at all, so no tokens and no time to first token. A name does not run on
 * past a line's end. */
static void scan_line_ends(void **state)
{
	(void)state;
	assert_int_equal(events_cut_anywhere("data: {\"text\":\"a\"}\n\n"
					     "data:{\"content\":\"b\"}\n\n: ping\n\n"
					     "data: {\"content\":\"\"}\n\ndata: [DONE]\n\n"),
			 2);
	assert_int_equal(events_cut_anywhere("data: {\"text\":\"a\"}\r\r"
					     "data:{\"content\":\"b\"}\r\r: ping\r\r"
					     "data: {\"content\":\"\"}\r\rdata: [DONE]\r\r"),
			 2);
	assert_int_equal(
	    events_cut_anywhere("data: {\"text\":\"a\"}\r\n\r\n"
				"data:{\"content\":\"b\"}\r\n\r\n: ping\r\n\r\n"
				"data: {\"content\":\"\"}\r\n\r\ndata: [DONE]\r\n\r\n"),
	    2);
	/* mixed, and a CR-only stream that ends without a blank line */
	assert_int_equal(events_cut_anywhere("data: {\"text\":\"a\"}\r\ndata: {\"text\":\"b\"}\n"
					     "data: {\"text\":\"c\"}\r"),
			 3);
	struct usage_scan u;
	usage_scan_init(&u);
	usage_scan_chunked(&u);
	static const char chunked[] = "14\r\ndata: {\"text\":\"a\"}\r\r\r\n"
				      "14\r\ndata: {\"text\":\"b\"}\r\r\r\n0\r\n\r\n";
	usage_scan_feed(&u, chunked, sizeof(chunked) - 1);
	assert_int_equal(u.events, 2);
	assert_false(u.bad_framing);
	/* a name and its colon on two lines are no key */
	static const char split_key[] = "x \"prompt_tokens\"\n:5\n\"total_tokens\"\r:6\r";
	usage_scan_init(&u);
	usage_scan_feed(&u, split_key, sizeof(split_key) - 1);
	assert_false(u.has_prompt);
	assert_false(u.has_total);
}

/* A count is a whole number: a fraction, an exponent or a sign makes none (1e300 read as 1,
 * 1e+21 as JSON.stringify writes it read as 1 and refunded); more digits than 64 bits hold
 * are the most they hold (were their first 19); the last count a key has wins. */
static void scan_whole_numbers_only(void **state)
{
	(void)state;
	static const struct {
		const char *body;
		int has;
		uint64_t prompt;
	} cases[] = {
	    {"{\"prompt_tokens\":1e300,\"x\":1}", 0, 0},
	    {"{\"prompt_tokens\":1e+21}", 0, 0},
	    {"{\"prompt_tokens\":12.9}", 0, 0},
	    {"{\"prompt_tokens\":-5}", 0, 0},
	    {"{\"prompt_tokens\":+5}", 0, 0},
	    {"{\"prompt_tokens\":5x}", 0, 0},
	    {"{\"prompt_tokens\":\"5\"}", 0, 0},
	    {"{\"prompt_tokens\":5", 0, 0}, /* cut off: maybe 50 */
	    {"{\"prompt_tokens\": 5 }", 1, 5},
	    {"{\"prompt_tokens\":5,\"prompt_tokens\":7}", 1, 7},
	    {"{\"prompt_tokens\":5,\"prompt_tokens\":7.5}", 1, 5},
	    {"[{\"prompt_tokens\":0]", 1, 0},
	    {"data: {\"prompt_tokens\":9999999999999999999}\n", 1, 9999999999999999999u},
	    {"data: {\"prompt_tokens\":18446744073709551616}\r", 1, UINT64_MAX},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].body);
		for (size_t step = 1; step <= len; step++) {
			struct usage_scan u;
			usage_scan_init(&u);
			for (size_t k = 0; k < len; k += step)
				usage_scan_feed(&u, cases[i].body + k,
						len - k < step ? len - k : step);
			if (u.has_prompt != cases[i].has ||
			    (u.has_prompt && u.prompt != cases[i].prompt))
				fail_msg("%s (in pieces of %zu): has %d, %llu", cases[i].body, step,
					 u.has_prompt, (unsigned long long)u.prompt);
		}
	}
}

/* 60000 tokens a minute (1000/s), a bucket of 10000 */
static void reserve_and_settle(void **state)
{
	(void)state;
	struct conf_rate_limit c = {
	    .tokens_per_minute = 60000, .token_burst = 10000, .default_max_tokens = 256};
	struct route_limits l;
	assert_int_equal(limits_init(&l, &c), 0);
	struct limit_refusal why;
	uint64_t t = 10000000;

	/* a JSON response reports 1500 of the 6000 reserved: 4500 come back */
	struct limit_hold h = {.tenant = 77, .prompt_est = 1000, .max_tokens = 5000};
	struct usage_scan u;
	assert_int_equal(limits_reserve_tokens(&l, 77, 6000, t, &why), 0);
	h.charged = 6000, h.reserved = 1;
	usage_scan_init(&u);
	const char body[] = "{\"usage\":{\"total_tokens\":1500}}";
	usage_scan_feed(&u, body, sizeof(body) - 1);
	limits_count_response(&l, &h, &u, t);
	assert_int_equal(limits_reserve_tokens(&l, 77, 8500, t, &why), -EAGAIN);
	assert_string_equal(why.what, "tokens_per_minute");
	assert_int_equal(why.st.remaining, 4000);
	assert_int_equal(why.wait_us, 4500000); /* 4500 tokens short at 1000/s */
	limits_end(&l, &h, &u, 1, t);
	assert_int_equal(limits_reserve_tokens(&l, 77, 8500, t, &why), 0);
	assert_false(h.reserved);

	/* a stream with no usage, reserved 10 (prompt 2 + 8): past its reservation each event
	 * is charged at once, and the end charges nothing twice */
	struct route_limits l2;
	assert_int_equal(limits_init(&l2, &c), 0);
	struct limit_hold s = {.tenant = 5, .prompt_est = 2, .max_tokens = 8};
	assert_int_equal(limits_reserve_tokens(&l2, 5, 10, t, &why), 0);
	s.charged = 10, s.reserved = 1;
	usage_scan_init(&u);
	const char ev[] = "data: {\"choices\":[{\"text\":\"x\"}]}\n\n";
	for (int i = 0; i < 20; i++) {
		usage_scan_feed(&u, ev, sizeof(ev) - 1);
		limits_count_response(&l2, &s, &u, t);
	}
	assert_int_equal(u.events, 20);
	assert_int_equal(s.charged, 22);
	assert_int_equal(limits_reserve_tokens(&l2, 5, 10000 - 22, t, &why), 0);
	assert_int_equal(limits_reserve_tokens(&l2, 5, 1, t, &why), -EAGAIN);
	limits_end(&l2, &s, &u, 1, t);
	assert_int_equal(s.charged, 22);
	assert_int_equal(limits_reserve_tokens(&l2, 5, 1, t, &why), -EAGAIN);

	/* refused before any response (no answer): the whole reservation comes back */
	struct route_limits l3;
	assert_int_equal(limits_init(&l3, &c), 0);
	struct limit_hold r = {.tenant = 6, .prompt_est = 100, .max_tokens = 9900};
	assert_int_equal(limits_reserve_tokens(&l3, 6, 10000, t, &why), 0);
	r.charged = 10000, r.reserved = 1;
	usage_scan_init(&u);
	limits_end(&l3, &r, &u, 0, t);
	assert_int_equal(limits_reserve_tokens(&l3, 6, 10000, t, &why), 0);
	limits_fini(&l);
	limits_fini(&l2);
	limits_fini(&l3);
}

/* A backend that reports an absurd usage.total_tokens (2^63, 10^19 - 1) leaves the tenant in
 * debt for it: never a refund from a sign flip, never a bucket wrapped back to full. */
static void absurd_usage_is_debt_not_refund(void **state)
{
	(void)state;
	static const char *const totals[] = {"9223372036854775808", "9999999999999999999",
					     "18446744073709551615", "9223372036854775807"};
	struct conf_rate_limit c = {
	    .tokens_per_minute = 60000, .token_burst = 10000, .default_max_tokens = 256};
	for (size_t i = 0; i < sizeof(totals) / sizeof(totals[0]); i++) {
		struct route_limits l;
		assert_int_equal(limits_init(&l, &c), 0);
		struct limit_refusal why;
		uint64_t t = 10000000;
		struct limit_hold h = {.tenant = 9, .prompt_est = 10, .max_tokens = 90};
		assert_int_equal(limits_reserve_tokens(&l, 9, 100, t, &why), 0);
		h.charged = 100, h.reserved = 1;
		struct usage_scan u;
		usage_scan_init(&u);
		char body[96];
		int n =
		    snprintf(body, sizeof(body), "{\"usage\":{\"total_tokens\":%s}}", totals[i]);
		usage_scan_feed(&u, body, (size_t)n);
		limits_count_response(&l, &h, &u, t);
		limits_end(&l, &h, &u, 1, t);
		/* the tenant owes more than the bucket holds: even one token waits */
		assert_int_equal(limits_reserve_tokens(&l, 9, 1, t, &why), -EAGAIN);
		assert_int_equal(limits_reserve_tokens(&l, 9, 1, t + 3600000000u, &why), -EAGAIN);
		/* a second absurd charge does not wrap the bucket back to full */
		limits_settle_tokens(&l, 9, INT64_MAX, t);
		limits_settle_tokens(&l, 9, INT64_MAX, t);
		limits_settle_tokens(&l, 9, INT64_MAX, t);
		assert_int_equal(limits_reserve_tokens(&l, 9, 1, t, &why), -EAGAIN);
		/* a refund of everything brings it back */
		limits_settle_tokens(&l, 9, INT64_MIN, t);
		limits_settle_tokens(&l, 9, -INT64_MAX, t);
		assert_int_equal(limits_reserve_tokens(&l, 9, 10000, t, &why), 0);
		limits_fini(&l);
	}
}

static void concurrency_cap(void **state)
{
	(void)state;
	struct conf_rate_limit c = {.concurrency = 2};
	struct route_limits l;
	assert_int_equal(limits_init(&l, &c), 0);
	struct limit_refusal why;
	struct conc_slot *a, *b, *d, *o;
	assert_int_equal(limits_take_hold(&l, 1, &a, &why), 0);
	assert_int_equal(limits_take_hold(&l, 1, &b, &why), 0);
	assert_int_equal(limits_take_hold(&l, 1, &d, &why), -EBUSY);
	assert_string_equal(why.what, "concurrency");
	assert_int_equal(why.st.limit, 2);
	assert_int_equal(limits_take_hold(&l, 2, &o, &why), 0); /* another tenant */
	limits_release_hold(a);
	assert_int_equal(limits_take_hold(&l, 1, &d, &why), 0);
	limits_release_hold(b);
	limits_release_hold(d);
	limits_release_hold(o);
	/* no cap: nothing held */
	struct route_limits n;
	struct conf_rate_limit none = {.per_route = {5, 1}};
	assert_int_equal(limits_init(&n, &none), 0);
	assert_int_equal(limits_take_hold(&n, 1, &a, &why), 0);
	assert_null(a);
	/* per_route: every client together */
	int passed = 0;
	for (uint64_t ip = 1; ip <= 10; ip++)
		passed += limits_take_address(&n, ip, 1000000, &why) == 0 &&
			  limits_take_rate(&n, ip, 1000000, &why) == 0;
	assert_int_equal(passed, 5);
	assert_string_equal(why.what, "per_route");
	limits_fini(&n);
	limits_fini(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(scan_whole_and_cut),
	    cmocka_unit_test(scan_line_ends),
	    cmocka_unit_test(scan_whole_numbers_only),
	    cmocka_unit_test(reserve_and_settle),
	    cmocka_unit_test(absurd_usage_is_debt_not_refund),
	    cmocka_unit_test(concurrency_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
