/*
 * test_parse.c - the strict HTTP/1.1 head parser: what it accepts, and every ambiguity it
 * must refuse with the status a client would see.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "http/parse.h"

#define MAX_HEAD 32768

static struct http_head h;

static int req(const char *text)
{
	return http_parse_request(text, strlen(text), MAX_HEAD, &h);
}

static int resp(const char *text, enum http_method m)
{
	return http_parse_response(text, strlen(text), MAX_HEAD, m, &h);
}

static void simple_get(void **state)
{
	(void)state;
	const char *t = "GET /v1/models?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n";
	assert_int_equal(req(t), (int)strlen(t));
	assert_int_equal(h.meth, HTTP_GET);
	assert_true(http_str_eq(h.path, "/v1/models?x=1"));
	assert_true(http_str_eq(h.host, "example.com"));
	assert_int_equal(h.minor, 1);
	assert_int_equal(h.nheaders, 2);
	assert_int_equal(h.framing, HTTP_BODY_NONE);
	assert_int_equal(h.flags & HTTP_F_CLOSE, 0);
}

static void incomplete_needs_more(void **state)
{
	(void)state;
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\n"), 0);
	assert_int_equal(req("GET / HTTP/1.1\r"), 0);
	assert_int_equal(req(""), 0);
}

static void body_framing(void **state)
{
	(void)state;
	assert_true(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 42\r\n\r\n") > 0);
	assert_int_equal(h.framing, HTTP_BODY_LENGTH);
	assert_int_equal(h.content_length, 42);
	assert_true(req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n") > 0);
	assert_int_equal(h.framing, HTTP_BODY_CHUNKED);
	assert_true(req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n") > 0);
	assert_int_equal(h.framing, HTTP_BODY_CHUNKED);
	/* identical duplicates and lists are refused too: one field, one number */
	assert_int_equal(
	    req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"),
	    -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n"), -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5,\r\n\r\n"), -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n"), -400);
	assert_true(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n") > 0);
	assert_int_equal(h.content_length, 5);
	assert_true(h.flags & HTTP_F_HAS_CL);
	assert_true(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n") > 0);
	assert_int_equal(h.framing, HTTP_BODY_NONE);
}

static void rejects_smuggling(void **state)
{
	(void)state;
	/* both framings */
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: "
			     "5\r\nTransfer-Encoding: chunked\r\n\r\n"),
			 -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
			     "chunked\r\nContent-Length: 5\r\n\r\n"),
			 -400);
	/* differing lengths */
	assert_int_equal(
	    req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
	    -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n"), -400);
	/* bad length syntax */
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n"), -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5a\r\n\r\n"), -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n"), -400);
	assert_int_equal(
	    req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
	    -400);
	/* transfer codings other than a single final chunked */
	assert_int_equal(
	    req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"), -400);
	assert_int_equal(
	    req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), -400);
	assert_int_equal(
	    req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"), -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
			     "chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
			 -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n"),
			 -501);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"),
			 -501);
	/* Transfer-Encoding in HTTP/1.0 */
	assert_int_equal(req("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), -400);
}

static void rejects_bad_syntax(void **state)
{
	(void)state;
	/* obs-fold */
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"), -400);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n"), -400);
	/* whitespace before the colon */
	assert_int_equal(req("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), -400);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n"), -400);
	/* bare CR, bare LF */
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\rX\r\n\r\n"), -400);
	assert_int_equal(req("GET / HTTP/1.1\nHost: a\n\n"), -400);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\n\r\n"), -400);
	/* control characters */
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\001c\r\n\r\n"), -400);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\177\r\n\r\n"), -400);
	assert_int_equal(req("GET /a\001b HTTP/1.1\r\nHost: a\r\n\r\n"), -400);
	/* request line */
	assert_int_equal(req("GET  / HTTP/1.1\r\nHost: a\r\n\r\n"), -400);
	assert_int_equal(req("GET / HTTP/1.1 \r\nHost: a\r\n\r\n"), -400);
	assert_int_equal(req("G(T / HTTP/1.1\r\nHost: a\r\n\r\n"), -400);
	assert_int_equal(req("GET foo HTTP/1.1\r\nHost: a\r\n\r\n"), -400);
	assert_int_equal(req("GET / FTP/1.1\r\nHost: a\r\n\r\n"), -400);
	assert_int_equal(req("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), -505);
	/* header names */
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\n: empty\r\n\r\n"), -400);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nNo colon\r\n\r\n"), -400);
	/* Host: exactly one in HTTP/1.1 */
	assert_int_equal(req("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"), -400);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), -400);
	/* unsupported */
	assert_int_equal(req("CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n"), -501);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n"), -417);
}

/* <pre>, then v[0..vlen), then "\r\n\r\n" into t (a value may hold a NUL). Its length. */
static size_t with_value(char *t, const char *pre, const char *v, size_t vlen)
{
	size_t n = strlen(pre);
	memcpy(t, pre, n);
	memcpy(t + n, v, vlen);
	memcpy(t + n + vlen, "\r\n\r\n", 4);
	return n + vlen + 4;
}

/* Every byte, at every place of a value long enough to be read a word at a time (and in its
 * tail), is taken or refused as RFC 9110's field-value grammar says: VCHAR, obs-text, SP and
 * HTAB taken (SP and HTAB at the ends trimmed), any other control and DEL refused; the same in
 * a response. */
static void value_bytes(void **state)
{
	(void)state;
	char t[128], v[24];
	for (int c = 0; c < 256; c++) {
		int ok = c == '\t' || (c >= 0x20 && c != 0x7f);
		if (c == '\r' || c == '\n')
			continue; /* a line's end: the bare-CR and bare-LF cases above */
		for (size_t at = 0; at < sizeof(v); at++) {
			memset(v, 'x', sizeof(v));
			v[at] = (char)c;
			size_t n =
			    with_value(t, "GET / HTTP/1.1\r\nHost: a\r\nX-V: ", v, sizeof(v));
			int r = http_parse_request(t, n, MAX_HEAD, &h);
			assert_int_equal(r, ok ? (int)n : -400);
			if (ok) {
				int edge =
				    (c == ' ' || c == '\t') && (at == 0 || at == sizeof(v) - 1);
				assert_int_equal(h.headers[1].value.len, sizeof(v) - (size_t)edge);
			}
			n = with_value(t, "HTTP/1.1 200 OK\r\nX-V: ", v, sizeof(v));
			r = http_parse_response(t, n, MAX_HEAD, HTTP_GET, &h);
			assert_int_equal(r, ok ? (int)n : -502);
		}
	}
}

/* Every byte, at every place of a field name long enough to be read a word at a time (and
 * in its tail), is taken or refused as a token's grammar says (RFC 9110 5.1: tchars only; a
 * colon ends the name), in a request and in a response. */
static void name_bytes(void **state)
{
	(void)state;
	static const char tchars[] = "!#$%&'*+-.^_`|~";
	char t[128], name[24];
	for (int c = 1; c < 256; c++) {
		int tchar = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
			    (c >= 'a' && c <= 'z') || strchr(tchars, c);
		if (c == '\r' || c == '\n')
			continue;
		for (size_t at = 0; at < sizeof(name); at++) {
			memset(name, 'N', sizeof(name));
			name[at] = (char)c;
			size_t len = c == ':' ? at : sizeof(name); /* the name as read */
			int ok = (tchar || c == ':') && len > 0;
			const char *pre[] = {"GET / HTTP/1.1\r\nHost: a\r\n",
					     "HTTP/1.1 200 OK\r\n"};
			for (int resp_ = 0; resp_ < 2; resp_++) {
				size_t n = strlen(pre[resp_]);
				memcpy(t, pre[resp_], n);
				memcpy(t + n, name, sizeof(name));
				memcpy(t + n + sizeof(name), ": v\r\n\r\n", 7);
				n += sizeof(name) + 7;
				int r = resp_ ? http_parse_response(t, n, MAX_HEAD, HTTP_GET, &h)
					      : http_parse_request(t, n, MAX_HEAD, &h);
				assert_int_equal(r, ok ? (int)n : resp_ ? -502 : -400);
				if (ok)
					assert_int_equal(h.headers[h.nheaders - 1].name.len, len);
			}
		}
	}
}

static void rejects_oversize(void **state)
{
	(void)state;
	char big[MAX_HEAD + 100];
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET / HTTP/1.1\r\nHost: a\r\nX: ", 28);
	assert_int_equal(http_parse_request(big, sizeof(big), MAX_HEAD, &h), -431);
	/* too many fields */
	char many[8192];
	size_t n = (size_t)snprintf(many, sizeof(many), "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < HTTP_MAX_HEADERS + 1; i++)
		n += (size_t)snprintf(many + n, sizeof(many) - n, "X-%d: v\r\n", i);
	n += (size_t)snprintf(many + n, sizeof(many) - n, "\r\n");
	assert_int_equal(http_parse_request(many, n, MAX_HEAD, &h), -431);
}

static void connection_semantics(void **state)
{
	(void)state;
	assert_true(req("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") > 0);
	assert_true(h.flags & HTTP_F_CLOSE);
	assert_true(req("GET / HTTP/1.0\r\n\r\n") > 0);
	assert_true(h.flags & HTTP_F_CLOSE);
	assert_true(req("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n") > 0);
	assert_false(h.flags & HTTP_F_CLOSE);
	assert_true(
	    req("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n") >
	    0);
	assert_true(h.flags & HTTP_F_EXPECT_CONTINUE);
	/* leading empty lines are skipped */
	assert_true(req("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n") > 0);
	assert_int_equal(h.meth, HTTP_GET);
	/* absolute-form: routed by its path, Host from the authority stays as sent */
	assert_true(req("GET http://example.com/x/y HTTP/1.1\r\nHost: example.com\r\n\r\n") > 0);
	assert_true(http_str_eq(h.path, "/x/y"));
	/* OWS around values is trimmed */
	assert_true(req("GET / HTTP/1.1\r\nHost:   a  \r\n\r\n") > 0);
	assert_true(http_str_eq(h.host, "a"));
}

static void head_end_detection(void **state)
{
	(void)state;
	const char *t = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
	size_t n = strlen(t);
	assert_false(http_head_may_be_complete(t, 0, n - 1));
	assert_true(http_head_may_be_complete(t, 0, n));
	assert_true(http_head_may_be_complete(t, n - 2, n));
	assert_true(http_head_may_be_complete("GET / HTTP/1.1\nHost: a\n\n", 0, 24));
}

static void responses(void **state)
{
	(void)state;
	assert_true(resp("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", HTTP_GET) > 0);
	assert_int_equal(h.status, 200);
	assert_int_equal(h.framing, HTTP_BODY_LENGTH);
	assert_true(resp("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", HTTP_HEAD) > 0);
	assert_int_equal(h.framing, HTTP_BODY_NONE);
	assert_true(resp("HTTP/1.1 204 No Content\r\n\r\n", HTTP_GET) > 0);
	assert_int_equal(h.framing, HTTP_BODY_NONE);
	assert_true(resp("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", HTTP_GET) > 0);
	assert_int_equal(h.framing, HTTP_BODY_NONE);
	assert_true(resp("HTTP/1.1 100 Continue\r\n\r\n", HTTP_POST) > 0);
	assert_int_equal(h.status, 100);
	assert_int_equal(h.framing, HTTP_BODY_NONE);
	assert_true(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", HTTP_GET) > 0);
	assert_int_equal(h.framing, HTTP_BODY_CHUNKED);
	assert_true(resp("HTTP/1.1 200 OK\r\n\r\n", HTTP_GET) > 0);
	assert_int_equal(h.framing, HTTP_BODY_CLOSE);
	assert_true(resp("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", HTTP_GET) > 0);
	assert_true(h.flags & HTTP_F_CLOSE);
	assert_true(resp("HTTP/1.1 200\r\nContent-Length: 1\r\n\r\n", HTTP_GET) > 0);
	assert_int_equal(h.reason.len, 0);
	/* malformed responses are the backend's fault: 502 */
	assert_int_equal(resp("HTTP/1.1 2000 OK\r\n\r\n", HTTP_GET), -502);
	assert_int_equal(
	    resp("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		 HTTP_GET),
	    -502);
	assert_int_equal(
	    resp("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", HTTP_GET),
	    -502);
	assert_int_equal(resp("ICY 200 OK\r\n\r\n", HTTP_GET), -502);
	assert_int_equal(resp("HTTP/1.1 200 OK\nContent-Length: 1\n\n", HTTP_GET), -502);
	assert_int_equal(resp("HTTP/1.1 200 OK\r\n", HTTP_GET), 0);
}

static void connection_options(void **state)
{
	(void)state;
	/* a request may not name its framing or Host as hop-by-hop */
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nConnection: "
			     "content-length\r\nContent-Length: 1\r\n\r\n"),
			 -400);
	assert_int_equal(req("POST / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nConnection: "
			     "Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n"),
			 -400);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nConnection: x, HOST\r\n\r\n"), -400);
	/* options of every Connection field count; at most HTTP_MAX_CONN_TOKENS */
	assert_true(
	    req("GET / HTTP/1.1\r\nHost: a\r\nConnection: a, ,b\r\nConnection: close\r\n\r\n") > 0);
	assert_int_equal(h.nconn_tokens, 3);
	assert_true(http_conn_names(&h, (struct http_str){"B", 1}));
	assert_true(http_conn_names(&h, (struct http_str){"close", 5}));
	assert_false(http_conn_names(&h, (struct http_str){"c", 1}));
	assert_true(h.flags & HTTP_F_CLOSE);
	char many[1024] = "GET / HTTP/1.1\r\nHost: a\r\nConnection: ";
	for (int i = 0; i <= HTTP_MAX_CONN_TOKENS; i++)
		strcat(many, "x,");
	strcat(many, "\r\n\r\n");
	assert_int_equal(req(many), -400);
	/* a response's framing options are ignored: its framing is written anew */
	assert_true(
	    resp("HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 2\r\n\r\n",
		 HTTP_GET) > 0);
	assert_int_equal(h.framing, HTTP_BODY_LENGTH);
	assert_int_equal(h.nconn_tokens, 0);
	/* HTTP/1.2 to 1.9 are not 1.1 */
	assert_int_equal(req("GET / HTTP/1.2\r\nHost: a\r\n\r\n"), -505);
	assert_int_equal(req("GET / HTTP/1.9\r\nHost: a\r\n\r\n"), -505);
}

static void list_tokens(void **state)
{
	(void)state;
	struct http_str v = {"keep-alive, Upgrade ,x-foo", 26};
	assert_true(http_list_has(v, "upgrade", 7));
	assert_true(http_list_has(v, "x-foo", 5));
	assert_false(http_list_has(v, "close", 5));
	assert_false(http_list_has(v, "keep", 4));
}

/* A head fed byte by byte is parsed once it is whole; junk is refused within 32 bytes. */
static void head_reader(void **state)
{
	(void)state;
	const char req[] = "GET /a HTTP/1.1\r\nHost: x\r\nX-Long: 0123456789abcdef\r\n\r\n";
	struct http_head_reader r = {0};
	size_t len = sizeof(req) - 1;
	for (size_t i = 1; i < len; i++)
		assert_int_equal(http_head_read(&r, req, i, 32768, &h), 0);
	assert_int_equal(http_head_read(&r, req, len, 32768, &h), (int)len);
	assert_int_equal(h.meth, HTTP_GET);

	const char junk[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
	http_head_reader_reset(&r);
	assert_int_equal(http_head_read(&r, junk, sizeof(junk) - 1, 32768, &h), -400);

	/* a head that never ends is refused once it reaches the limit */
	char big[64];
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /", 5);
	http_head_reader_reset(&r);
	assert_int_equal(http_head_read(&r, big, 40, 64, &h), 0);
	assert_true(http_head_read(&r, big, 64, 64, &h) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(simple_get),
	    cmocka_unit_test(incomplete_needs_more),
	    cmocka_unit_test(body_framing),
	    cmocka_unit_test(rejects_smuggling),
	    cmocka_unit_test(rejects_bad_syntax),
	    cmocka_unit_test(value_bytes),
	    cmocka_unit_test(name_bytes),
	    cmocka_unit_test(rejects_oversize),
	    cmocka_unit_test(connection_semantics),
	    cmocka_unit_test(head_end_detection),
	    cmocka_unit_test(responses),
	    cmocka_unit_test(list_tokens),
	    cmocka_unit_test(connection_options),
	    cmocka_unit_test(head_reader),
	};
	return cmocka_run_group_tests_name("http parser", tests, NULL, NULL);
}
