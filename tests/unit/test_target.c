/*
 * test_target.c - the normal form of a request target (http/target.h): RFC 3986's dot
 * segment examples, the spellings a lenient backend reads as one path, what is refused in
 * every mode, and the head rewritten in its buffer.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "http/target.h"

struct pair {
	const char *in, *out;
};

/* <in> normalised (mode, flags): its return value, and the result in out[]. */
static int norm(const char *in, enum http_target_mode mode, unsigned flags, char *out, size_t cap)
{
	size_t n = strlen(in);
	assert_true(n < cap);
	memcpy(out, in, n + 1);
	const char *why = NULL;
	int rc = http_target_normalize(out, &n, mode, flags, &why);
	if (rc < 0) {
		assert_non_null(why);
		assert_string_equal(out, in); /* a refused target is left as it was */
	}
	out[n] = 0;
	return rc;
}

static void check_pairs(const struct pair *p, size_t np, unsigned flags)
{
	char buf[256], again[256];
	for (size_t i = 0; i < np; i++) {
		int rc = norm(p[i].in, HTTP_TARGET_NORMALIZE, flags, buf, sizeof(buf));
		if (!p[i].out) {
			if (rc != -EINVAL)
				fail_msg("%s: not refused (%s)", p[i].in, buf);
			continue;
		}
		if (rc < 0 || strcmp(buf, p[i].out) != 0)
			fail_msg("%s: got %s (rc %d), want %s", p[i].in, buf, rc, p[i].out);
		assert_int_equal(rc, strcmp(p[i].in, p[i].out) != 0);
		/* a fixed point, and refuse mode takes it as it is */
		assert_int_equal(norm(buf, HTTP_TARGET_NORMALIZE, flags, again, sizeof(again)), 0);
		assert_string_equal(again, buf);
		assert_int_equal(norm(buf, HTTP_TARGET_REFUSE, flags, again, sizeof(again)), 0);
		/* refuse mode refuses every spelling that is not it */
		if (strcmp(p[i].in, p[i].out) != 0 &&
		    norm(p[i].in, HTTP_TARGET_REFUSE, flags, again, sizeof(again)) != -EINVAL)
			fail_msg("%s: taken in refuse mode", p[i].in);
	}
}

/* RFC 3986 5.4.1 and 5.4.2, each reference merged with the base path "/b/c/d;p" (5.2.3)
 * and its dot segments removed; the examples that climb above the root are refused here,
 * where the RFC drops the extra "..". */
static void rfc3986_examples(void **state)
{
	(void)state;
	static const struct pair p[] = {
	    {"/b/c/g", "/b/c/g"},
	    {"/b/c/./g", "/b/c/g"},
	    {"/b/c/g/", "/b/c/g/"},
	    {"/g", "/g"},
	    {"/b/c/g?y", "/b/c/g?y"},
	    {"/b/c/g;x", "/b/c/g;x"},
	    {"/b/c/g;x?y", "/b/c/g;x?y"},
	    {"/b/c/.", "/b/c/"},
	    {"/b/c/./", "/b/c/"},
	    {"/b/c/..", "/b/"},
	    {"/b/c/../", "/b/"},
	    {"/b/c/../g", "/b/g"},
	    {"/b/c/../..", "/"},
	    {"/b/c/../../", "/"},
	    {"/b/c/../../g", "/g"},
	    {"/b/c/../../../g", NULL},
	    {"/b/c/../../../../g", NULL},
	    {"/./g", "/g"},
	    {"/../g", NULL},
	    {"/b/c/g.", "/b/c/g."},
	    {"/b/c/.g", "/b/c/.g"},
	    {"/b/c/g..", "/b/c/g.."},
	    {"/b/c/..g", "/b/c/..g"},
	    {"/b/c/./../g", "/b/g"},
	    {"/b/c/./g/.", "/b/c/g/"},
	    {"/b/c/g/./h", "/b/c/g/h"},
	    {"/b/c/g/../h", "/b/c/h"},
	    {"/b/c/g;x=1/./y", "/b/c/g;x=1/y"},
	    {"/b/c/g;x=1/../y", "/b/c/y"},
	    {"/b/c/g?y/./x", "/b/c/g?y/./x"},
	    {"/b/c/g?y/../x", "/b/c/g?y/../x"},
	    {"/a/b/c/./../../g", "/a/g"}, /* 5.2.4's own example */
	};
	check_pairs(p, sizeof(p) / sizeof(p[0]), 0);
}

/* The spellings of issue 24: each is "/v1/completions" to uvicorn, nginx or both. */
static void spellings_of_one_path(void **state)
{
	(void)state;
	static const struct pair p[] = {
	    {"/v1/completions", "/v1/completions"},
	    {"/v1/%63ompletions", "/v1/completions"},
	    {"/%76%31/%63%6F%6D%70%6c%65%74%69%6f%6e%73", "/v1/completions"},
	    {"//v1/completions", "/v1/completions"},
	    {"/v1//completions", "/v1/completions"},
	    {"/v1///completions//", "/v1/completions/"},
	    {"/./v1/completions", "/v1/completions"},
	    {"/v1/./completions", "/v1/completions"},
	    {"/x/../v1/completions", "/v1/completions"},
	    {"/x/%2e%2E/v1/completions", "/v1/completions"},
	    {"/x/.%2e/v1/%2E/completions", "/v1/completions"},
	    {"/x//..//v1/completions", "/v1/completions"},
	    {"/v1/completions?a=%2F&b=//x/../y#", NULL},
	    {"/v1/completions?a=%2F&b=//x/../y", "/v1/completions?a=%2F&b=//x/../y"},
	    {"/v1/%63ompletions?x=%63", "/v1/completions?x=%63"},
	    /* escapes that stay: upper-case hex, one spelling */
	    {"/a%c3%a9", "/a%C3%A9"},
	    {"/a%C3%A9", "/a%C3%A9"},
	    {"/a%3a%3F%25", "/a%3A%3F%25"},
	    {"/a%7e%5f%2d%2E", "/a~_-."},
	    {"/%41%5A%61%7A%30%39", "/AZaz09"},
	    {"/", "/"},
	    {"//", "/"},
	    {"/.", "/"},
	    {"/%2e", "/"},
	    {"/..", NULL},
	    {"/%2e%2e", NULL},
	    {"/a/../..", NULL},
	    {"/a/./../b/../../c", NULL},
	    {"/...", "/..."},
	    {"/a/.../b", "/a/.../b"},
	};
	check_pairs(p, sizeof(p) / sizeof(p[0]), 0);
}

/* Refused in both modes: encoded separators and controls, bad escapes, backslash, '#'. */
static void refused_always(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "/v1%2Fcompletions",
	    "/v1%2fcompletions",
	    "/v1%5Ccompletions",
	    "/v1%5ccompletions",
	    "/v1\\completions",
	    "/a%00",
	    "/a%0a",
	    "/a%0D%0A",
	    "/a%1f",
	    "/a%7F",
	    "/a%",
	    "/a%4",
	    "/a%4g",
	    "/a%%41",
	    "/a#b",
	    "/a?b#c",
	    "a/b",
	    "",
	    "/a%2F..",
	    "/a/%2e%2e/%2e%2e",
	};
	char buf[64];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		for (int m = HTTP_TARGET_NORMALIZE; m <= HTTP_TARGET_REFUSE; m++)
			if (norm(bad[i], (enum http_target_mode)m, 0, buf, sizeof(buf)) != -EINVAL)
				fail_msg("%s: taken (mode %d)", bad[i], m);
	/* the query is not the path: its %2F, %00 and backslash are the backend's business */
	assert_int_equal(norm("/a?x=%2F%00\\", HTTP_TARGET_REFUSE, 0, buf, sizeof(buf)), 0);
}

/* A purge's prefix: its last segment may be the start of a longer one. */
static void open_end(void **state)
{
	(void)state;
	static const struct pair p[] = {
	    {"/a/.", "/a/."},	    {"/a/..", "/a/.."},	 {"/..", "/.."},   {"/a/%2e", "/a/."},
	    {"/a/./b/.", "/a/b/."}, {"/a/../b/", "/b/"}, {"//a//", "/a/"}, {"/%61b", "/ab"},
	};
	check_pairs(p, sizeof(p) / sizeof(p[0]), HTTP_TARGET_OPEN_END);
	char buf[32];
	assert_int_equal(
	    norm("/../a", HTTP_TARGET_NORMALIZE, HTTP_TARGET_OPEN_END, buf, sizeof(buf)), -EINVAL);
}

/* The head's target rewritten in its buffer: every string still right, the unused bytes
 * at the front, and the head parses again to the same (the proxy parses it anew). */
static void head_in_place(void **state)
{
	(void)state;
	static const struct {
		const char *in, *line, *path;
		int unused;
	} cases[] = {
	    {"GET /v1/%63ompletions?x=%63 HTTP/1.1\r\n", "GET /v1/completions?x=%63 HTTP/1.1",
	     "/v1/completions?x=%63", 2},
	    {"\r\n\r\nPOST //v1/./x/../completions HTTP/1.1\r\n", "POST /v1/completions HTTP/1.1",
	     "/v1/completions", 4 + 8},
	    {"GET http://example.com//a/%62 HTTP/1.1\r\n", "GET http://example.com/a/b HTTP/1.1",
	     "/a/b", 3},
	    {"GET /a%c3 HTTP/1.1\r\n", "GET /a%C3 HTTP/1.1", "/a%C3", 0},
	    {"GET /v1/completions HTTP/1.1\r\n", "GET /v1/completions HTTP/1.1", "/v1/completions",
	     0},
	    {"OPTIONS * HTTP/1.1\r\n", "OPTIONS * HTTP/1.1", "*", 0},
	    {"GET http://example.com HTTP/1.1\r\n", "GET http://example.com HTTP/1.1", "/", 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char buf[256];
		int n = snprintf(buf, sizeof(buf), "%sHost: x\r\nX-A: b\r\n\r\nbody", cases[i].in);
		int body = n - 4;
		struct http_head h, again;
		int len = http_parse_request(buf, (size_t)n, sizeof(buf), &h);
		assert_int_equal(len, body);
		const char *why = NULL;
		int unused = http_target_normalize_head(buf, &h, HTTP_TARGET_NORMALIZE, &why);
		assert_int_equal(unused, cases[i].unused);
		assert_int_equal(h.head_len, (uint32_t)(body - unused));
		assert_true(http_str_eq(h.path, cases[i].path));
		size_t ll = strlen(cases[i].line);
		assert_memory_equal(buf + unused, cases[i].line, ll);
		assert_ptr_equal(h.method.p, buf + unused);
		assert_true(h.target.p + h.target.len == buf + unused + ll - 9);
		assert_true(http_str_eq(h.headers[1].name, "x-a") &&
			    http_str_eq(h.headers[1].value, "b"));
		assert_memory_equal(buf + body, "body", 4);
		assert_int_equal(
		    http_parse_request(buf + unused, (size_t)(n - unused), sizeof(buf), &again),
		    (int)h.head_len);
		assert_true(again.path.len == h.path.len &&
			    memcmp(again.path.p, h.path.p, h.path.len) == 0);
	}
	/* refused: the buffer is as it was */
	char bad[] = "GET /x/%2F/../y HTTP/1.1\r\nHost: x\r\n\r\n", copy[sizeof(bad)];
	memcpy(copy, bad, sizeof(bad));
	struct http_head h;
	assert_true(http_parse_request(bad, sizeof(bad) - 1, sizeof(bad), &h) > 0);
	const char *why = NULL;
	assert_int_equal(http_target_normalize_head(bad, &h, HTTP_TARGET_NORMALIZE, &why), -EINVAL);
	assert_non_null(why);
	assert_memory_equal(bad, copy, sizeof(bad));
	char odd[] = "GET /x/../y HTTP/1.1\r\nHost: x\r\n\r\n";
	assert_true(http_parse_request(odd, sizeof(odd) - 1, sizeof(odd), &h) > 0);
	assert_int_equal(http_target_normalize_head(odd, &h, HTTP_TARGET_REFUSE, &why), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(rfc3986_examples), cmocka_unit_test(spellings_of_one_path),
	    cmocka_unit_test(refused_always),	cmocka_unit_test(open_end),
	    cmocka_unit_test(head_in_place),
	};
	return cmocka_run_group_tests_name("request target", tests, NULL, NULL);
}
