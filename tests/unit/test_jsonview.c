/*
 * test_jsonview.c - the strict view of a JSON request body: the fields the proxy reads, found
 * wherever they are at the top level, and every body that parsers read differently refused
 * (a key twice, escaped key names, NaN and Infinity, lone surrogates, bytes that are not
 * UTF-8, too deep, cut short), with max_tokens read as pydantic reads a whole number.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "http/jsonview.h"

static int view_of(const char *body, struct json_view *v)
{
	const char *why = NULL;
	int r = json_view_read(v, body, strlen(body), &why);
	if (r < 0 && (!why || !*why))
		fail_msg("refused without a reason: %s", body);
	return r;
}

/* 1 and the model, or -1 (none), of a body the view accepts. */
static int model_of(const char *body, char *out, size_t cap)
{
	struct json_view v;
	size_t n = 0;
	if (view_of(body, &v) < 0)
		fail_msg("refused: %s", body);
	int r = json_view_model(&v, body, out, cap, &n);
	if (r == 1)
		assert_int_equal(n, strlen(out));
	return r;
}

static void refused(const char *body)
{
	struct json_view v;
	if (view_of(body, &v) == 0)
		fail_msg("accepted: %s", body);
	assert_int_equal(v.model.e, 0);
	assert_int_equal(v.max_tokens, JSON_VIEW_TOKENS_NONE);
}

static void accepted(const char *body)
{
	struct json_view v;
	if (view_of(body, &v) < 0)
		fail_msg("refused: %s", body);
}

static void model_found_anywhere_at_the_top(void **state)
{
	(void)state;
	char m[64];
	assert_int_equal(model_of("{\"model\":\"llama-3-8b\",\"prompt\":\"hi\"}", m, sizeof(m)), 1);
	assert_string_equal(m, "llama-3-8b");
	assert_int_equal(
	    model_of(" {\n \"messages\" : [ {\"role\":\"user\",\"content\":\"{\\\"model\\\":"
		     "\\\"no\\\"}\", \"model\": \"inner\"} ] ,\n\t\"model\"\r\n:\n "
		     "\"qwen-2\" } ",
		     m, sizeof(m)),
	    1);
	assert_string_equal(m, "qwen-2");
	assert_int_equal(
	    model_of("{\"model\":\"a\\\"b\\\\c\\/d\\u0041\\u00e9\\ud83d\\ude00\"}", m, sizeof(m)),
	    1);
	assert_string_equal(m, "a\"b\\c/dA\xc3\xa9\xf0\x9f\x98\x80");
	assert_int_equal(model_of("{\"model\":\"llama\\u002d3\"}", m, sizeof(m)), 1);
	assert_string_equal(m, "llama-3");
	/* a key written with escapes is the key */
	assert_int_equal(model_of("{\"mod\\u0065l\":\"premium\"}", m, sizeof(m)), 1);
	assert_string_equal(m, "premium");
	assert_int_equal(model_of("{\"model\":\"\"}", m, sizeof(m)), 1);
	assert_string_equal(m, "");
}

static void model_absent(void **state)
{
	(void)state;
	char m[8];
	assert_int_equal(model_of("{\"prompt\":\"hi\"}", m, sizeof(m)), -1);
	assert_int_equal(model_of("{\"model\":5}", m, sizeof(m)), -1);
	assert_int_equal(model_of("{\"model\":null}", m, sizeof(m)), -1);
	assert_int_equal(model_of("{\"model\":[\"x\"]}", m, sizeof(m)), -1);
	assert_int_equal(model_of("{\"meta\":{\"model\":\"x\"}}", m, sizeof(m)), -1);
	assert_int_equal(model_of("[\"model\",\"x\"]", m, sizeof(m)), -1);
	assert_int_equal(model_of("\"model\"", m, sizeof(m)), -1);
	assert_int_equal(model_of("{\"model\":\"nul\\u0000\"}", m, sizeof(m)), -1);
	assert_int_equal(model_of("{\"model\":\"1234567\"}", m, sizeof(m)), 1); /* fits, with NUL */
	assert_int_equal(model_of("{\"model\":\"12345678\"}", m, sizeof(m)), -1); /* too long */
}

static void duplicates_at_the_top_refused(void **state)
{
	(void)state;
	refused("{\"model\":\"a\",\"model\":\"b\"}");
	refused("{\"model\":\"free\",\"x\":1,\"model\":\"premium-gpt\"}");
	refused("{\"model\":\"a\",\"m\\u006fdel\":\"b\"}");
	refused("{\"mod\\u0065l\":\"b\",\"model\":\"a\"}");
	refused("{\"max_tokens\":1,\"max_tokens\":5000}");
	refused("{\"temperature\":0,\"temperature\":1}");
	refused("{\"x\":1,\"y\":2,\"x\":3}");		 /* any key: the backend may read it */
	refused("{\"caf\\u00e9\":1,\"caf\xc3\xa9\":2}"); /* equal once decoded */
	/* inside a message: the keys the prompt's hashes read */
	refused("{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"content\":\"b\"}]}");
	refused("{\"messages\":[{\"role\":\"user\",\"r\\u006fle\":\"system\"}]}");
	refused("{\"messages\":[{\"content\":[{\"text\":\"a\",\"text\":\"b\"}]}]}");
	/* not duplicates */
	accepted("{\"model\":\"a\",\"messages\":[{\"model\":\"b\"}],\"meta\":{\"model\":\"c\"}}");
	accepted("{\"model\":\"a\",\"prompt\":\"\\\"model\\\":\\\"b\\\"\"}");
	accepted("{\"models\":\"b\",\"model\":\"a\",\"Model\":\"c\"}");
	accepted("[\"model\",\"model\"]");
	accepted("{\"meta\":{\"x\":1},\"other\":{\"x\":2}}");
	accepted("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\"}]}");
}

static void not_json_refused(void **state)
{
	(void)state;
	refused("{\"model\":\"free\",\"x\":NaN,\"model\":\"premium-gpt\"}");
	refused("{\"x\":NaN}");
	refused("{\"x\":Infinity}");
	refused("{\"x\":-Infinity}");
	refused("{\"x\":nan}");
	refused("{\"x\":01}");
	refused("{\"x\":1.}");
	refused("{\"x\":.5}");
	refused("{\"x\":+1}");
	refused("{\"x\":1e}");
	refused("{\"x\":-}");
	refused("{\"x\":tru}");
	refused("{\"x\":1,}");
	refused("{\"x\":[1,]}");
	refused("{\"x\":[1 2]}");
	refused("{\"x\" 1}");
	refused("{x:1}");
	refused("{'x':1}");
	refused("{\"x\":1}}");
	refused("{\"x\":1} x");
	refused("");
	refused("   ");
	refused("model=x");
	refused("\xef\xbb\xbf{\"x\":1}"); /* a BOM */
	accepted("{\"x\":-0,\"y\":1e999,\"z\":-1.5E-3,\"w\":[true,false,null,{}]}\n");
	accepted("{}");
	accepted("[]");
	accepted("0");
}

static void strings_checked(void **state)
{
	(void)state;
	refused("{\"x\":\"lone\\udc00\"}");
	refused("{\"x\":\"half\\ud800x\"}");
	refused("{\"x\":\"half\\ud800\"}");
	refused("{\"x\":\"half\\ud800\\u0041\"}");
	refused("{\"lone\\ud800\":1}");
	refused("{\"x\":\"bad\\q\"}");
	refused("{\"x\":\"bad\\u12\"}");
	refused("{\"x\":\"tab\there\"}");
	refused("{\"x\":\"\xff\"}");
	refused("{\"x\":\"\xc0\xaf\"}");	 /* overlong */
	refused("{\"x\":\"\xed\xa0\x80\"}");	 /* a surrogate in UTF-8 */
	refused("{\"x\":\"\xf4\x90\x80\x80\"}"); /* past U+10FFFF */
	refused("{\"x\":\"\xe2\x82\"}");	 /* cut short */
	refused("{\"x\":\"abcdefghijklmnop\xe2\x82\"}");
	refused("{\"x\":\"abcdefghijklmnop"); /* cut short inside a long string */
	accepted("{\"x\":\"\\ud83d\\ude00 \xf0\x9f\x98\x80 \xc3\xa9 \xe2\x82\xac \\u0000\"}");
	accepted("{\"x\":\"a long string with \\\"quotes\\\" and \\\\ backslashes in it\"}");
}

/* Long strings are skipped many bytes a step: a byte that needs a look is found at every
 * place of a run, and a run ends exactly at its quote. */
static void long_strings_every_position(void **state)
{
	(void)state;
	char body[256];
	for (size_t n = 0; n < 200; n++) { /* "x":"aaa...a" of every length */
		memcpy(body, "{\"x\":\"", 6);
		memset(body + 6, 'a', n);
		memcpy(body + 6 + n, "\"}", 3);
		accepted(body);
		for (size_t at = 0; at < n; at++) {
			static const char *const bad[] = {"\x01", "\xff", "\x80", "\x1f"};
			for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
				body[6 + at] = bad[k][0];
				refused(body);
			}
			body[6 + at] = '"'; /* the string ends early: what follows is not JSON */
			if (at + 1 < n)
				refused(body);
			body[6 + at] = 'a';
		}
	}
}

static void depth_bounded(void **state)
{
	(void)state;
	char deep[2 * JSON_VIEW_DEPTH_MAX + 16];
	size_t n = 0;
	for (int i = 0; i < JSON_VIEW_DEPTH_MAX; i++)
		deep[n++] = '[';
	for (int i = 0; i < JSON_VIEW_DEPTH_MAX; i++)
		deep[n++] = ']';
	deep[n] = 0;
	accepted(deep);
	n = 0;
	for (int i = 0; i <= JSON_VIEW_DEPTH_MAX; i++)
		deep[n++] = '[';
	for (int i = 0; i <= JSON_VIEW_DEPTH_MAX; i++)
		deep[n++] = ']';
	deep[n] = 0;
	refused(deep);
}

static long tokens_of(const char *body)
{
	struct json_view v;
	if (view_of(body, &v) < 0)
		fail_msg("refused: %s", body);
	return v.max_tokens;
}

static void max_tokens_read_as_the_backend_reads_it(void **state)
{
	(void)state;
	assert_int_equal(
	    tokens_of("{\"model\":\"m\",\"prompt\":\"max_tokens\",\"max_tokens\":128}"), 128);
	assert_int_equal(
	    tokens_of("{\"messages\":[{\"max_tokens\":5}],\"max_completion_tokens\": 64 }"), 64);
	/* both: the larger (engines differ on which wins) */
	assert_int_equal(tokens_of("{\"max_tokens\":5,\"max_completion_tokens\":64}"), 64);
	assert_int_equal(tokens_of("{\"max_completion_tokens\":64,\"max_tokens\":500}"), 500);
	assert_int_equal(tokens_of("{\"prompt\":\"p\"}"), JSON_VIEW_TOKENS_NONE);
	assert_int_equal(tokens_of("{\"max_tokens\":null}"), JSON_VIEW_TOKENS_NONE);
	/* whole numbers, however written */
	assert_int_equal(tokens_of("{\"max_tokens\":1.0}"), 1);
	assert_int_equal(tokens_of("{\"max_tokens\":1e3}"), 1000);
	assert_int_equal(tokens_of("{\"max_tokens\":5000.000}"), 5000);
	assert_int_equal(tokens_of("{\"max_tokens\":0.5e1}"), 5);
	assert_int_equal(tokens_of("{\"max_tokens\":-0}"), 0);
	assert_int_equal(tokens_of("{\"max_tokens\":0e99999999}"), 0);
	assert_int_equal(tokens_of("{\"max_tokens\":2147483647}"), 2147483647);
	assert_int_equal(tokens_of("{\"max_tokens\":21474836.47e2}"), 2147483647);
	/* anything else is not one the proxy can reserve for */
	assert_int_equal(tokens_of("{\"max_tokens\":1.5}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":-1}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":1e999}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":1e-999}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":2147483648}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":99999999999}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":\"5000\"}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":true}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":5,\"max_completion_tokens\":\"x\"}"),
			 JSON_VIEW_TOKENS_BAD);
	assert_int_equal(tokens_of("{\"max_tokens\":1.0000000000000000000000001}"),
			 JSON_VIEW_TOKENS_BAD);
	/* a body cut short is refused, not read as far as it goes */
	refused("{\"max_tokens\":12");
	refused("{\"max_tokens\":12,\"max_tokens\":5000");
}

static long choices_of(const char *body)
{
	struct json_view v;
	if (view_of(body, &v) < 0)
		fail_msg("refused: %s", body);
	return v.choices;
}

/* "n" and "best_of": the backend writes that many answers, each up to max_tokens */
static void choices_read_as_max_tokens_is(void **state)
{
	(void)state;
	assert_int_equal(choices_of("{\"max_tokens\":5}"), JSON_VIEW_TOKENS_NONE);
	assert_int_equal(choices_of("{\"n\":null}"), JSON_VIEW_TOKENS_NONE);
	assert_int_equal(choices_of("{\"n\":8}"), 8);
	assert_int_equal(choices_of("{\"n\":2,\"best_of\":6}"), 6);
	assert_int_equal(choices_of("{\"best_of\":6,\"n\":2.0}"), 6);
	assert_int_equal(choices_of("{\"\\u006e\":3}"), 3);
	assert_int_equal(choices_of("{\"x\":{\"n\":9},\"n\":1}"), 1);
	assert_int_equal(choices_of("{\"n\":\"8\"}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(choices_of("{\"n\":1.5}"), JSON_VIEW_TOKENS_BAD);
	assert_int_equal(choices_of("{\"n\":-1}"), JSON_VIEW_TOKENS_BAD);
	refused("{\"n\":1,\"n\":100}");
}

static void stream_and_prompt(void **state)
{
	(void)state;
	struct json_view v;
	const char *b =
	    "{\"model\":\"m\",\"meta\":{\"stream\":false},\"stream\": true,\"prompt\":\"hi\"}";
	assert_int_equal(view_of(b, &v), 0);
	assert_true(v.stream);
	assert_memory_equal(b + v.prompt.s, "\"hi\"", 4);
	assert_int_equal(v.prompt.e - v.prompt.s, 4);
	assert_false(v.messages);
	assert_int_equal(view_of("{\"stream\":false}", &v), 0);
	assert_false(v.stream);
	assert_int_equal(view_of("{\"prompt\":\"stream: true\"}", &v), 0);
	assert_false(v.stream);
	b = "{\"m\\u0065ssages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	assert_int_equal(view_of(b, &v), 0);
	assert_true(v.messages);
	assert_int_equal(b[v.prompt.s], '[');
	assert_int_equal(b[v.prompt.e - 1], ']');
}

/* previous_response_id: a top-level string only; twice is refused like any key twice */
static void previous_response_id(void **state)
{
	(void)state;
	struct json_view v;
	const char *b = "{\"input\":{\"previous_response_id\":\"x\"},"
			"\"previous_response_id\":\"resp_1\"}";
	assert_int_equal(view_of(b, &v), 0);
	assert_int_equal(v.prev_response.e - v.prev_response.s, 8);
	assert_memory_equal(b + v.prev_response.s, "\"resp_1\"", 8);
	assert_int_equal(view_of("{\"previous_response_id\":null}", &v), 0);
	assert_int_equal(v.prev_response.e, 0);
	refused("{\"previous_response_id\":\"a\",\"previous_response_id\":\"b\"}");
}

/* cache_salt (vLLM's): a top-level string only; twice is refused, its escapes kept as written */
static void cache_salt(void **state)
{
	(void)state;
	struct json_view v;
	const char *b = "{\"x\":{\"cache_salt\":\"no\"},\"cache_s\\u0061lt\":\"s\\u0031\"}";
	assert_int_equal(view_of(b, &v), 0);
	assert_int_equal(v.cache_salt.e - v.cache_salt.s, 9);
	assert_memory_equal(b + v.cache_salt.s, "\"s\\u0031\"", 9);
	assert_int_equal(view_of("{\"cache_salt\":7}", &v), 0);
	assert_int_equal(v.cache_salt.e, 0);
	refused("{\"cache_salt\":\"a\",\"cache_salt\":\"b\"}");
}

static void too_many_keys_refused(void **state)
{
	(void)state;
	static char body[JSON_VIEW_KEYS_MAX * 12 + 32];
	size_t n = 0;
	body[n++] = '{';
	for (int i = 0; i <= JSON_VIEW_KEYS_MAX; i++)
		n += (size_t)snprintf(body + n, sizeof(body) - n, "%s\"k%d\":1", i ? "," : "", i);
	body[n++] = '}';
	body[n] = 0;
	refused(body);
	/* one fewer: fine */
	char *last = strrchr(body, ',');
	last[0] = '}';
	last[1] = 0;
	accepted(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(model_found_anywhere_at_the_top),
	    cmocka_unit_test(model_absent),
	    cmocka_unit_test(duplicates_at_the_top_refused),
	    cmocka_unit_test(not_json_refused),
	    cmocka_unit_test(strings_checked),
	    cmocka_unit_test(long_strings_every_position),
	    cmocka_unit_test(depth_bounded),
	    cmocka_unit_test(max_tokens_read_as_the_backend_reads_it),
	    cmocka_unit_test(choices_read_as_max_tokens_is),
	    cmocka_unit_test(stream_and_prompt),
	    cmocka_unit_test(previous_response_id),
	    cmocka_unit_test(cache_salt),
	    cmocka_unit_test(too_many_keys_refused),
	};
	return cmocka_run_group_tests_name("json view", tests, NULL, NULL);
}
