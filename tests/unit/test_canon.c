/*
 * test_canon.c - the inference cache key: bodies that mean the same get one key (member
 * order, whitespace, escapes, at any depth), bodies that differ get two (values, types,
 * numbers as written, escapes that decode differently), a key twice and every class of
 * invalid JSON is refused, the limits hold at their edges, and the top-level facts are read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <cmocka.h>

#include "cache/canon.h"

static int canon_str(const char *body, struct canon_facts *f)
{
	return canon_json(body, strlen(body), f);
}

static void assert_same(const char *a, const char *b)
{
	struct canon_facts fa, fb;
	if (canon_str(a, &fa) != 0 || canon_str(b, &fb) != 0)
		fail_msg("refused: %s | %s", a, b);
	if (fa.hash[0] != fb.hash[0] || fa.hash[1] != fb.hash[1])
		fail_msg("two keys for %s and %s", a, b);
}

static void assert_differ(const char *a, const char *b)
{
	struct canon_facts fa, fb;
	if (canon_str(a, &fa) != 0 || canon_str(b, &fb) != 0)
		fail_msg("refused: %s | %s", a, b);
	if (fa.hash[0] == fb.hash[0] && fa.hash[1] == fb.hash[1])
		fail_msg("one key for %s and %s", a, b);
}

static void assert_refused_n(const char *body, size_t len)
{
	struct canon_facts f;
	memset(&f, 0xa5, sizeof(f));
	int r = canon_json(body, len, &f);
	if (r != -EINVAL)
		fail_msg("accepted (%d): %.*s", r, (int)len, body);
	assert_true(f.hash[0] == 0 && f.hash[1] == 0 && f.has_temperature == 0);
}

static void assert_refused(const char *body)
{
	assert_refused_n(body, strlen(body));
}

static void order_and_whitespace_do_not_matter(void **state)
{
	(void)state;
	assert_same("{\"model\":\"m\",\"temperature\":0,\"prompt\":\"hi\"}",
		    " \r\n\t{ \"prompt\" : \"hi\" ,\n\"temperature\":0,\t\"model\":\"m\"}\n ");
	/* nested objects, in arrays and in objects */
	assert_same("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"a\":1,\"b\":[1,2]}],"
		    "\"opts\":{\"x\":{\"p\":1,\"q\":2},\"y\":null}}",
		    "{\"opts\":{\"y\":null,\"x\":{\"q\":2,\"p\":1}},\"messages\":[{\"content\":"
		    "\"hi\",\"role\":\"user\"},{\"b\":[ 1 , 2 ],\"a\":1}]}");
	assert_same("{}", " { } ");
	assert_same("{\"a\":[]}", "{\"a\":[ ]}");
	assert_same("{\"a\":{}}", "{\"a\":{\n}}");
	/* sorted by the decoded key: "b" < "\u00e9" (0xc3 0xa9) whatever the escapes */
	assert_same("{\"\\u00e9\":1,\"b\":2}", "{\"b\":2,\"\xc3\xa9\":1}");
	/* a prefix sorts first */
	assert_same("{\"ab\":1,\"a\":2}", "{\"a\":2,\"ab\":1}");
	assert_same("{\"a\\u0062\":1,\"a\":2}", "{\"a\":2,\"ab\":1}");
	/* keys with escapes written alike, and written differently, on both sides */
	assert_same("{\"\\u00e9b\":1,\"\\u00E9a\":2}", "{\"\xc3\xa9"
						       "a\":2,\"\xc3\xa9"
						       "b\":1}");
	assert_same("{\"x\\ud83d\\ude01\":1,\"x\\ud83d\\ude00\":2}",
		    "{\"x\xf0\x9f\x98\x80\":2,\"x\xf0\x9f\x98\x81\":1}");
	assert_same("{\"\\n\\u0041\":1,\"\\n\\u0040\":2,\"\\n\":3}",
		    "{\"\\n\":3,\"\\u000a@\":2,\"\\nA\":1}");
}

static void escapes_decode_to_one_form(void **state)
{
	(void)state;
	assert_same("{\"s\":\"a\"}", "{\"s\":\"\\u0061\"}");
	assert_same("{\"s\":\"a/b\"}", "{\"s\":\"a\\/b\"}");
	assert_same("{\"s\":\"\xc3\xa9\"}", "{\"s\":\"\\u00E9\"}");
	assert_same("{\"s\":\"\xc3\xa9\"}", "{\"s\":\"\\u00e9\"}");
	assert_same("{\"s\":\"\xf0\x9f\x98\x80\"}", "{\"s\":\"\\ud83d\\ude00\"}");
	assert_same("{\"s\":\"\\n\"}", "{\"s\":\"\\u000a\"}");
	assert_same("{\"s\":\"\\u001f\"}", "{\"s\":\"\\u001F\"}");
	assert_same("{\"s\":\"\\\"\"}", "{\"s\":\"\\u0022\"}");
	assert_same("{\"s\":\"\\\\\"}", "{\"s\":\"\\u005c\"}");
	assert_same("{\"s\":\"\x7f\"}", "{\"s\":\"\\u007f\"}");
	assert_same("{\"k\\u0065y\":1}", "{\"key\":1}");
	/* a long string (past the sink's buffer) with escapes in it */
	char a[2000], b[5000];
	size_t an = 0, bn = 0;
	an += (size_t)sprintf(a, "{\"s\":\"");
	bn += (size_t)sprintf(b, "{\"s\":\"");
	for (int i = 0; i < 300; i++) {
		an += (size_t)sprintf(a + an, "x\\n");
		bn += (size_t)sprintf(b + bn, "\\u0078\\u000A");
	}
	sprintf(a + an, "\"}");
	sprintf(b + bn, "\"}");
	assert_same(a, b);
}

static void different_meanings_get_different_keys(void **state)
{
	(void)state;
	assert_differ("{\"a\":1}", "{\"a\":2}");
	assert_differ("{\"a\":1}", "{\"b\":1}");
	/* numbers as written */
	assert_differ("{\"a\":1}", "{\"a\":1.0}");
	assert_differ("{\"a\":1.0}", "{\"a\":1.00}");
	assert_differ("{\"a\":0}", "{\"a\":-0}");
	assert_differ("{\"a\":1e2}", "{\"a\":1E2}");
	/* types */
	assert_differ("{\"a\":1}", "{\"a\":\"1\"}");
	assert_differ("{\"a\":true}", "{\"a\":\"true\"}");
	assert_differ("{\"a\":null}", "{\"a\":\"null\"}");
	assert_differ("{\"a\":null}", "{\"a\":false}");
	assert_differ("{\"a\":[]}", "{\"a\":{}}");
	assert_differ("{\"a\":[]}", "{\"a\":\"\"}");
	assert_differ("{\"a\":[1]}", "{\"a\":1}");
	assert_differ("{\"a\":[[1]]}", "{\"a\":[1]}");
	assert_differ("{\"a\":{}}", "{}");
	/* arrays keep their order */
	assert_differ("{\"a\":[1,2]}", "{\"a\":[2,1]}");
	assert_differ("{\"a\":[1,[2]]}", "{\"a\":[[1],2]}");
	/* escapes that decode differently */
	assert_differ("{\"s\":\"\\n\"}", "{\"s\":\"\\\\n\"}");
	assert_differ("{\"s\":\"\\u0000\"}", "{\"s\":\"\"}");
	assert_differ("{\"s\":\"a\"}", "{\"s\":\"A\"}");
	assert_differ("{\"s\":\"\\u00e9\"}", "{\"s\":\"e\\u0301\"}"); /* not NFC-folded */
	/* deep differences */
	assert_differ("{\"a\":{\"b\":{\"c\":[{\"d\":1}]}}}", "{\"a\":{\"b\":{\"c\":[{\"d\":2}]}}}");
	assert_differ("{\"a\":{\"b\":1},\"c\":2}", "{\"a\":{\"b\":1,\"c\":2}}");
	/* member boundaries: a value can not spill into the next member */
	assert_differ("{\"a\":\"b\",\"c\":\"d\"}", "{\"a\":\"b\\\",\\\"c\\\":\\\"d\"}");
	assert_differ("{\"a\":[\"x\",\"y\"]}", "{\"a\":[\"x\\\",\\\"y\"]}");
}

static void duplicate_keys_refused(void **state)
{
	(void)state;
	assert_refused("{\"a\":1,\"a\":1}");
	assert_refused("{\"a\":1,\"b\":2,\"a\":3}");
	assert_refused("{\"temperature\":0,\"temperature\":1}");
	assert_refused("{\"x\":{\"k\":1,\"k\":2}}");
	assert_refused("{\"x\":[{\"k\":1},{\"k\":1,\"j\":0,\"k\":2}]}");
	assert_refused("{\"a\":1,\"\\u0061\":1}");
	assert_refused("{\"\xc3\xa9\":1,\"\\u00e9\":1}");
	assert_refused("{\"\":1,\"\":2}");
	assert_refused("{\"\\u00e9\":1,\"\\u00E9\":2}");
	assert_refused("{\"\\n\":1,\"\\u000a\":2}");
	assert_refused("{\"a\\ud83d\\ude00\":1,\"a\xf0\x9f\x98\x80\":2}");
	/* the same key at two levels, or in two objects, is fine */
	struct canon_facts f;
	assert_int_equal(canon_str("{\"k\":{\"k\":{\"k\":1}},\"j\":[{\"k\":1},{\"k\":2}]}", &f), 0);
}

static void invalid_json_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    /* not one object */
	    "",
	    " ",
	    "[]",
	    "\"s\"",
	    "1",
	    "true",
	    "null",
	    "{}{}",
	    "{} x",
	    "{}]",
	    "{",
	    "}",
	    "\xef\xbb\xbf{}",
	    "/* c */{}",
	    "{}//",
	    "{\"a\":1}}",
	    /* structure */
	    "{,}",
	    "{\"a\":1,}",
	    "{\"a\" 1}",
	    "{\"a\":}",
	    "{\"a\"}",
	    "{a:1}",
	    "{'a':1}",
	    "{\"a\":1 \"b\":2}",
	    "{\"a\":[1,]}",
	    "{\"a\":[,1]}",
	    "{\"a\":[1 2]}",
	    "{\"a\":[}",
	    "{\"a\":[1}",
	    "{\"a\":{]}",
	    "{1:1}",
	    "{\"a\":1;\"b\":2}",
	    "{\"a\"::1}",
	    /* literals */
	    "{\"a\":tru}",
	    "{\"a\":True}",
	    "{\"a\":nul}",
	    "{\"a\":falsey}",
	    "{\"a\":NaN}",
	    "{\"a\":Infinity}",
	    "{\"a\":-Infinity}",
	    "{\"a\":undefined}",
	    "{\"a\":t}",
	    /* numbers */
	    "{\"a\":01}",
	    "{\"a\":-01}",
	    "{\"a\":1.}",
	    "{\"a\":.5}",
	    "{\"a\":+1}",
	    "{\"a\":-}",
	    "{\"a\":1e}",
	    "{\"a\":1e+}",
	    "{\"a\":1e-}",
	    "{\"a\":1.e5}",
	    "{\"a\":0x10}",
	    "{\"a\":1_000}",
	    "{\"a\":--1}",
	    "{\"a\":1.5.2}",
	    "{\"a\":1e5e5}",
	    "{\"a\":-.5}",
	    /* strings */
	    "{\"a\":\"x}",
	    "{\"a}",
	    "{\"a\":\"\t\"}",
	    "{\"a\":\"\n\"}",
	    "{\"a\":\"\x1f\"}",
	    "{\"\x01\":1}",
	    "{\"a\":\"\\x41\"}",
	    "{\"a\":\"\\a\"}",
	    "{\"a\":\"\\'\"}",
	    "{\"a\":\"\\u12\"}",
	    "{\"a\":\"\\u12g4\"}",
	    "{\"a\":\"\\U0041\"}",
	    "{\"a\":\"\\\"}",
	    "{\"a\":\"\\ud800\"}",
	    "{\"a\":\"\\udc00\"}",
	    "{\"a\":\"\\ud800x\"}",
	    "{\"a\":\"\\ud800\\u0041\"}",
	    "{\"a\":\"\\ud800\\ud800\"}",
	    "{\"a\":\"\\ude00\\ud83d\"}",
	    "{\"\\ud800\":1}",
	    /* UTF-8 */
	    "{\"a\":\"\x80\"}",
	    "{\"a\":\"\xbf\"}",
	    "{\"a\":\"\xc0\x80\"}",
	    "{\"a\":\"\xc1\xbf\"}",
	    "{\"a\":\"\xe0\x80\x80\"}",
	    "{\"a\":\"\xe0\x9f\xbf\"}",
	    "{\"a\":\"\xed\xa0\x80\"}",
	    "{\"a\":\"\xed\xbf\xbf\"}",
	    "{\"a\":\"\xf0\x80\x80\x80\"}",
	    "{\"a\":\"\xf0\x8f\xbf\xbf\"}",
	    "{\"a\":\"\xf4\x90\x80\x80\"}",
	    "{\"a\":\"\xf5\x80\x80\x80\"}",
	    "{\"a\":\"\xff\"}",
	    "{\"a\":\"\xfe\"}",
	    "{\"a\":\"\xe2\x82\"}",
	    "{\"a\":\"\xe2\x82\"",
	    "{\"a\":\"\xc3\"}",
	    "{\"a\":\"\xc3\x28\"}",
	    "{\"a\":\"\xf0\x9f\x98\"}",
	    "{\"\xc3\":1}",
	    "{\"a\":1}\xc3",
	    /* whitespace JSON does not have */
	    "{\"a\":1,\f\"b\":2}",
	    "{\"a\":\v1}",
	    "\xc2\xa0{}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_refused(bad[i]);
	/* NUL outside and inside strings, and a body cut before its end */
	assert_refused_n("{\"a\":1}\0", 8);
	assert_refused_n("{\"a\":\0}", 7);
	assert_refused_n("{\"a\":\"\0\"}", 9);
	assert_refused_n("{\"a\":1}", 6);
	assert_refused_n("{\"a\":tr", 7);
	/* the valid edges */
	struct canon_facts f;
	static const char *const good[] = {
	    "{\"a\":0}",
	    "{\"a\":-0}",
	    "{\"a\":-0.0e-0}",
	    "{\"a\":1E+2}",
	    "{\"a\":123456789012345678901234567890}",
	    "{\"a\":\"\\ud83d\\ude00\"}",
	    "{\"a\":\"\xf4\x8f\xbf\xbf\"}",
	    "{\"a\":\"\xef\xbf\xbf\"}",
	    "{\"a\":\"\xed\x9f\xbf\"}",
	    "{\"a\":\"\xee\x80\x80\"}",
	    "{\"a\":\"\\u0000\"}",
	    "{\"\":\"\"}",
	    "{\"a\":[[],{},\"\",0,true,false,null]}",
	    "{\"a\":1e999}",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (canon_str(good[i], &f) != 0)
			fail_msg("refused: %s", good[i]);
}

/* CANON_DEPTH_MAX counts the top object as 1: 64 deep passes, 65 does not. */
static void depth_limit(void **state)
{
	(void)state;
	char body[512];
	struct canon_facts f;
	for (int depth = CANON_DEPTH_MAX; depth <= CANON_DEPTH_MAX + 1; depth++) {
		for (int kind = 0; kind < 2; kind++) {
			/* {"k":[[...]]} or {"k":{"k":{...}}} */
			size_t n = 0;
			body[n++] = '{';
			for (int d = 1; d < depth; d++) {
				if (kind || d == 1)
					n += (size_t)sprintf(body + n, "\"k\":");
				body[n++] = kind ? '{' : '[';
			}
			for (int d = 1; d < depth; d++)
				body[n++] = kind ? '}' : ']';
			body[n++] = '}';
			int r = canon_json(body, n, &f);
			if (r != (depth <= CANON_DEPTH_MAX ? 0 : -EINVAL))
				fail_msg("depth %d: %d for %.*s", depth, r, (int)n, body);
		}
	}
}

/* At most CANON_MEMBERS_MAX members in the objects open at once. */
static void member_limit(void **state)
{
	(void)state;
	size_t cap = 64 * (CANON_MEMBERS_MAX + 8);
	char *body = malloc(cap);
	struct canon_facts f, g, reversed;
	assert_non_null(body);
	for (int extra = 0; extra < 2; extra++) {
		size_t n = 0;
		body[n++] = '{';
		/* in reverse order, so that the sort has work to do */
		for (int i = CANON_MEMBERS_MAX - 1 + extra; i >= 0; i--)
			n += (size_t)sprintf(body + n, "%s\"k%05d\":%d", n > 1 ? "," : "", i, i);
		body[n++] = '}';
		assert_int_equal(canon_json(body, n, extra ? &f : &reversed), extra ? -EINVAL : 0);
	}
	/* in order: the same key */
	size_t n = 0;
	body[n++] = '{';
	for (int i = 0; i < CANON_MEMBERS_MAX; i++)
		n += (size_t)sprintf(body + n, "%s\"k%05d\":%d", n > 1 ? "," : "", i, i);
	body[n++] = '}';
	assert_int_equal(canon_json(body, n, &g), 0);
	assert_true(reversed.hash[0] == g.hash[0] && reversed.hash[1] == g.hash[1]);
	/* two open objects together: 2 + 4094 fit, 2 + 4095 do not */
	for (int extra = 0; extra < 2; extra++) {
		n = (size_t)sprintf(body, "{\"a\":1,\"b\":{");
		for (int i = 0; i < CANON_MEMBERS_MAX - 2 + extra; i++)
			n += (size_t)sprintf(body + n, "%s\"k%05d\":0", i ? "," : "", i);
		n += (size_t)sprintf(body + n, "}}");
		assert_int_equal(canon_json(body, n, &f), extra ? -EINVAL : 0);
	}
	/* closed objects give their members back */
	n = (size_t)sprintf(body, "{\"a\":[");
	for (int o = 0; o < 3; o++) {
		n += (size_t)sprintf(body + n, "%s{", o ? "," : "");
		for (int i = 0; i < CANON_MEMBERS_MAX - 1; i++)
			n += (size_t)sprintf(body + n, "%s\"%d\":0", i ? "," : "", i);
		body[n++] = '}';
	}
	n += (size_t)sprintf(body + n, "]}");
	assert_int_equal(canon_json(body, n, &f), 0);
	free(body);
}

static void facts_read(void **state)
{
	(void)state;
	struct canon_facts f;
	assert_int_equal(canon_str("{\"model\":\"m\"}", &f), 0);
	assert_false(f.has_temperature);
	assert_false(f.stream);
	assert_false(f.has_seed);
	assert_false(f.has_n);

	static const struct {
		const char *body;
		double t;
	} temps[] = {
	    {"{\"temperature\":0}", 0},
	    {"{\"temperature\":0.0}", 0},
	    {"{\"temperature\":-0}", 0},
	    {"{\"temperature\":0e10}", 0},
	    {"{\"temperature\":1e-9}", 1e-9},
	    {"{\"temperature\":0.7}", 0.7},
	    {"{\"temperature\":1}", 1},
	    {"{\"temperature\":2.0E0}", 2},
	    {"{\"temperature\":7E-1}", 0.7},
	    {"{\"temperature\":0.000000000000000000000001}", 1e-24},
	    {"{\"temperature\":1e400}", INFINITY},
	    {"{\"temperature\":1e-400}", 0},
	    /* subnormal: not zero to the engine, so not to the cache (read as 0 before) */
	    {"{\"temperature\":1e-310}", 1e-310},
	    {"{\"temperature\":1e-320}", 1e-320},
	    {"{\"temperature\":100000000000000000000000e-330}", 1e-307},
	    {"{\"temperature\":12345678901234567890123}", 12345678901234567890123.0},
	    {"{\"temperature\":\"0\"}", INFINITY},
	    {"{\"temperature\":[0]}", INFINITY},
	    {"{\"temperature\":{}}", INFINITY},
	    {"{\"temperature\":true}", INFINITY},
	};
	for (size_t i = 0; i < sizeof(temps) / sizeof(temps[0]); i++) {
		assert_int_equal(canon_str(temps[i].body, &f), 0);
		assert_true(f.has_temperature);
		if (!(f.temperature == temps[i].t ||
		      fabs(f.temperature - temps[i].t) <= 1e-15 * fabs(temps[i].t)))
			fail_msg("%s read as %.17g", temps[i].body, f.temperature);
		if ((f.temperature == 0) != (temps[i].t == 0))
			fail_msg("%s read as %.17g", temps[i].body, f.temperature);
	}
	assert_int_equal(canon_str("{\"temperature\":null}", &f), 0);
	assert_false(f.has_temperature);
	/* escaped key: still the top-level temperature */
	assert_int_equal(canon_str("{\"temp\\u0065rature\":0.5}", &f), 0);
	assert_true(f.has_temperature);
	assert_true(f.temperature == 0.5);
	/* nested "temperature" is not the top-level one */
	assert_int_equal(canon_str("{\"options\":{\"temperature\":0},\"a\":[{\"temperature\":0}],"
				   "\"stream\":false,\"x\":{\"stream\":true,\"seed\":1,\"n\":3}}",
				   &f),
			 0);
	assert_false(f.has_temperature);
	assert_false(f.stream);
	assert_false(f.has_seed);
	assert_false(f.has_n);
	/* near misses of the names */
	assert_int_equal(
	    canon_str("{\"Temperature\":0,\"temperatur\":0,\"temperaturee\":0,\"Stream\":true}",
		      &f),
	    0);
	assert_false(f.has_temperature);
	assert_false(f.stream);

	assert_int_equal(canon_str("{\"stream\":true}", &f), 0);
	assert_true(f.stream);
	assert_int_equal(canon_str("{\"stream\":false}", &f), 0);
	assert_false(f.stream);
	assert_int_equal(canon_str("{\"stream\":\"true\"}", &f), 0);
	assert_false(f.stream);
	assert_int_equal(canon_str("{\"stream\":1}", &f), 0);
	assert_false(f.stream);

	assert_int_equal(canon_str("{\"seed\":42,\"n\":2,\"temperature\":0.9,\"stream\":true}", &f),
			 0);
	assert_true(f.has_seed && f.has_n && f.stream && f.has_temperature);
	assert_true(f.n == 2);
	assert_true(f.temperature == 0.9);
	assert_int_equal(canon_str("{\"seed\":null,\"n\":null}", &f), 0);
	assert_false(f.has_seed);
	assert_false(f.has_n);
	assert_int_equal(canon_str("{\"n\":\"2\"}", &f), 0);
	assert_true(f.has_n && f.n == INFINITY);
	assert_int_equal(canon_str("{\"n\":1.5e1}", &f), 0);
	assert_true(f.n == 15);

	/* the facts are in the key: another temperature is another key */
	assert_differ("{\"temperature\":0,\"p\":\"x\"}", "{\"temperature\":0.0,\"p\":\"x\"}");
}

/* Nesting costs no re-reading: 64 levels around a large array is still accepted, and a key
 * inside it changes the hash (the correctness side of the tree hash; the cost is argued in
 * canon.c). */
static void deep_and_wide(void **state)
{
	(void)state;
	size_t cap = 1 << 20;
	char *body = malloc(cap);
	struct canon_facts f, g;
	assert_non_null(body);
	size_t n = 0;
	for (int d = 0; d < CANON_DEPTH_MAX - 1; d++)
		n += (size_t)sprintf(body + n, "{\"z%d\":1,\"k\":", d);
	n += (size_t)sprintf(body + n, "[");
	while (n < cap - 1000)
		n += (size_t)sprintf(body + n, "1,");
	n += (size_t)sprintf(body + n, "2]");
	for (int d = 0; d < CANON_DEPTH_MAX - 1; d++)
		body[n++] = '}';
	assert_int_equal(canon_json(body, n, &f), 0);
	body[n - CANON_DEPTH_MAX - 1] = '3';
	assert_int_equal(canon_json(body, n, &g), 0);
	assert_false(f.hash[0] == g.hash[0] && f.hash[1] == g.hash[1]);
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(order_and_whitespace_do_not_matter),
	    cmocka_unit_test(escapes_decode_to_one_form),
	    cmocka_unit_test(different_meanings_get_different_keys),
	    cmocka_unit_test(duplicate_keys_refused),
	    cmocka_unit_test(invalid_json_refused),
	    cmocka_unit_test(depth_limit),
	    cmocka_unit_test(member_limit),
	    cmocka_unit_test(facts_read),
	    cmocka_unit_test(deep_and_wide),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
