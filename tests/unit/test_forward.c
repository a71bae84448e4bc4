/*
 * test_forward.c - what a route changes in what it forwards: the path rewrite
 * (strip_prefix, prefix, regex) on its own, the credential line put into a head at any write
 * offset, and the field edits of the request and response heads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "http/rewrite.h"
#include "proxy/forward.h"

static char out[FORWARD_TARGET_MAX];

static struct fwd_rewrite rw(const char *strip, const char *prefix, const char *match,
			     const char *replace)
{
	struct fwd_rewrite r = {.strip_prefix = (char *)strip,
				.prefix = (char *)prefix,
				.match = (char *)match,
				.replace = (char *)replace,
				.on = 1};
	if (match) {
		int code;
		PCRE2_SIZE at;
		r.re = pcre2_compile((PCRE2_SPTR)match, PCRE2_ZERO_TERMINATED,
				     PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
		assert_non_null(r.re);
	}
	return r;
}

static const char *apply(const struct fwd_rewrite *r, const char *path)
{
	int n = forward_rewrite_path(r, path, strlen(path), out, sizeof(out));
	if (n < 0)
		return n == -1 ? "<too long>" : "<no path>";
	out[n] = 0;
	return out;
}

static void strip_and_prefix(void **state)
{
	(void)state;
	struct fwd_rewrite r = rw("/a", "/v1", NULL, NULL);
	assert_string_equal(apply(&r, "/a/chat/completions"), "/v1/chat/completions");
	assert_string_equal(apply(&r, "/a"), "/v1/");
	assert_string_equal(apply(&r, "/a/"), "/v1/");
	assert_string_equal(apply(&r, "/ab/x"), "/v1/ab/x"); /* not a segment: not stripped */
	assert_string_equal(apply(&r, "/x"), "/v1/x");
	struct fwd_rewrite s = rw("/a/", NULL, NULL, NULL);
	assert_string_equal(apply(&s, "/a/x"), "/x");
	assert_string_equal(apply(&s, "/a"), "/a"); /* "/a" does not start with "/a/" */
	struct fwd_rewrite p = rw(NULL, "/v1/", NULL, NULL);
	assert_string_equal(apply(&p, "/x"), "/v1/x");
	struct fwd_rewrite root = rw("/a", NULL, NULL, NULL);
	assert_string_equal(apply(&root, "/a"), "/");
}

static void regex_groups_and_dollars(void **state)
{
	(void)state;
	struct fwd_rewrite r = rw(NULL, NULL, "^/r/(\\w+)/(.*)$", "/v1/$2/$1$$");
	assert_string_equal(apply(&r, "/r/abc/d/e"), "/v1/d/e/abc$");
	assert_string_equal(apply(&r, "/other"), "/other"); /* no match: as it is */
	struct fwd_rewrite mid = rw(NULL, NULL, "old", "new");
	assert_string_equal(apply(&mid, "/x/old/old"), "/x/new/old"); /* the first match */
	struct fwd_rewrite unset = rw(NULL, NULL, "^/(a)?(b)", "/[$1]$2$0");
	assert_string_equal(apply(&unset, "/b/c"), "/[]b/b/c");
	struct fwd_rewrite bad = rw(NULL, NULL, "^/bad/(.*)$", "x$1");
	assert_string_equal(apply(&bad, "/bad/y"), "<no path>");
	struct fwd_rewrite all = rw("/s", "/v1", "^/v1/(.*)$", "/v2/$1");
	assert_string_equal(apply(&all, "/s/m"), "/v2/m");
	pcre2_code_free(r.re);
	pcre2_code_free(mid.re);
	pcre2_code_free(unset.re);
	pcre2_code_free(bad.re);
	pcre2_code_free(all.re);
}

/* A client writes the path a configured expression runs on: backtracking is bounded. */
static void backtracking_is_bounded(void **state)
{
	(void)state;
	struct fwd_rewrite r = rw(NULL, NULL, "^/(a+)+$", "/x");
	char path[64] = "/";
	memset(path + 1, 'a', 40);
	path[41] = 'b';
	assert_string_equal(apply(&r, path), "<no path>");
	assert_string_equal(apply(&r, "/aaa"), "/x");
	/* a byte that is no UTF-8 does not match, and goes as it came */
	struct fwd_rewrite u = rw(NULL, NULL, "^/z(.)$", "/$1");
	assert_string_equal(apply(&u, "/z\xc3"), "/z\xc3");
	pcre2_code_free(r.re);
	pcre2_code_free(u.re);
}

static void too_long_is_refused(void **state)
{
	(void)state;
	static char big[FORWARD_TARGET_MAX];
	memset(big, 'x', sizeof(big) - 1);
	big[0] = '/';
	struct fwd_rewrite r = rw(NULL, "/v1", NULL, NULL);
	assert_int_equal(forward_rewrite_path(&r, big, strlen(big), out, sizeof(out)), -1);
	struct fwd_rewrite g = rw(NULL, NULL, "^(.*)$", "$1$1");
	assert_int_equal(forward_rewrite_path(&g, big, 5000, out, sizeof(out)), -1);
	pcre2_code_free(g.re);
}

/* The credential line goes before the head's last CRLF, whatever was written before. */
static void credential_at_every_offset(void **state)
{
	(void)state;
	static const char head[] = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
	static const char cred[] = "Authorization: Bearer k\r\n";
	static const char want[] = "GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\r\n\r\n";
	size_t end = sizeof(head) - 1, cl = sizeof(cred) - 1;
	for (size_t off = 0; off < end + cl; off++) {
		struct iovec iov[3];
		char got[128];
		size_t n = 0;
		int k = forward_iov(head, end, off, cred, cl, iov);
		assert_true(k >= 1 && k <= 3);
		for (int i = 0; i < k; i++) {
			memcpy(got + n, iov[i].iov_base, iov[i].iov_len);
			n += iov[i].iov_len;
		}
		assert_int_equal(n, end + cl - off);
		assert_memory_equal(got, want + off, n);
	}
	struct iovec iov[3];
	assert_int_equal(forward_iov(head, end, end + cl, cred, cl, iov), 0);
	assert_int_equal(forward_iov(head, end, 3, NULL, 0, iov), 1);
	assert_int_equal(iov[0].iov_len, end - 3);
}

static void edits_in_both_heads(void **state)
{
	(void)state;
	static const char req[] = "GET /x HTTP/1.1\r\nHost: h\r\nX-Set: client\r\nX_Set: two\r\n"
				  "X-Drop: 1\r\nX-Add: mine\r\nAuthorization: Bearer c\r\n\r\n";
	struct http_head h;
	char buf[2048];
	assert_true(http_parse_request(req, strlen(req), 32768, &h) > 0);
	struct rewrite_field set[] = {
	    {"X-Set", "proxy\r\nX-Evil: 1"}, {"X-Drop", NULL}, {"Authorization", NULL}};
	struct rewrite_field add[] = {{"X-Add", "ours"}};
	struct rewrite_edit e = {set, 3, add, 1};
	struct rewrite_request_info info = {.client_ip = "10.1.2.3",
					    .request_id = "r",
					    .upstream_minor = 1,
					    .edit = &e,
					    .path = {"/v1/x?q", 7},
					    .host = "inner:8000"};
	int n = rewrite_request(buf, sizeof(buf), &h, &info);
	assert_true(n > 0);
	buf[n] = 0;
	assert_non_null(strstr(buf, "GET /v1/x?q HTTP/1.1\r\nHost: inner:8000\r\n"));
	assert_null(strstr(buf, "client"));
	assert_null(strstr(buf, "two"));
	assert_null(strstr(buf, "X-Drop"));
	assert_null(strstr(buf, "Bearer c"));
	assert_null(strstr(buf, "\r\nX-Evil"));
	assert_non_null(strstr(buf, "X-Set: proxy??X-Evil: 1\r\n"));
	assert_non_null(strstr(buf, "X-Add: mine\r\n"));
	assert_non_null(strstr(buf, "X-Add: ours\r\n\r\n"));

	static const char resp[] = "HTTP/1.1 200 OK\r\nServer: up\r\nX-Internal: 1\r\n"
				   "Content-Length: 0\r\n\r\n";
	assert_true(http_parse_response(resp, strlen(resp), 32768, HTTP_GET, &h) > 0);
	struct rewrite_field rset[] = {{"Server", "accelnet"}, {"X_Internal", NULL}};
	struct rewrite_field radd[] = {{"Access-Control-Allow-Origin", "*"}};
	struct rewrite_edit re = {rset, 2, radd, 1};
	n = rewrite_response_edit(buf, sizeof(buf), &h, 1, "r", NULL, &re);
	assert_true(n > 0);
	buf[n] = 0;
	assert_null(strstr(buf, "Server: up"));
	assert_null(strstr(buf, "X-Internal"));
	assert_non_null(strstr(buf, "Server: accelnet\r\nAccess-Control-Allow-Origin: *\r\n"));
	assert_non_null(strstr(buf, "Content-Length: 0\r\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(strip_and_prefix),
	    cmocka_unit_test(regex_groups_and_dollars),
	    cmocka_unit_test(backtracking_is_bounded),
	    cmocka_unit_test(too_long_is_refused),
	    cmocka_unit_test(credential_at_every_offset),
	    cmocka_unit_test(edits_in_both_heads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
