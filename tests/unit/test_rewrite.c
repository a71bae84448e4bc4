/*
 * test_rewrite.c - the heads the proxy writes: hop-by-hop fields dropped, forwarding fields
 * added, request ids kept or made, and the proxy's own error responses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "http/rewrite.h"

static struct http_head h;
static char out[8192];

static void parse_req(const char *t)
{
	assert_true(http_parse_request(t, strlen(t), 32768, &h) > 0);
}

static const char *rewrite_tls(const char *t, int minor, int trusted, int tls)
{
	struct rewrite_request_info info = {.client_ip = "10.1.2.3",
					    .request_id = "req-1",
					    .upstream_minor = minor,
					    .trusted = trusted,
					    .tls = tls};
	parse_req(t);
	int n = rewrite_request(out, sizeof(out), &h, &info);
	assert_true(n > 0);
	out[n] = '\0';
	return out;
}

static const char *rewrite_as(const char *t, int minor, int trusted)
{
	return rewrite_tls(t, minor, trusted, 0);
}

static const char *rewrite(const char *t, int minor)
{
	return rewrite_as(t, minor, 0);
}

/* A client on a TLS listener: the backend hears https, whatever the client claimed. */
/* An authenticated request: the identity goes on in its header (a client's own copy
 * dropped), and the credentials do not. */
static void identity_replaces_credentials(void **state)
{
	(void)state;
	struct rewrite_request_info info = {.client_ip = "10.1.2.3",
					    .request_id = "req-1",
					    .upstream_minor = 1,
					    .identity_header = "X-Tenant",
					    .identity = "acme",
					    .strip_credentials = 1};
	parse_req("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer sk-secret-0123456789\r\n"
		  "X-API-Key: sk-other-0123456789\r\nx-tenant: evil\r\nAccept: */*\r\n\r\n");
	int n = rewrite_request(out, sizeof(out), &h, &info);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "X-Tenant: acme\r\n"));
	assert_non_null(strstr(out, "Accept: */*\r\n"));
	assert_null(strstr(out, "evil"));
	assert_null(strstr(out, "sk-"));
	info.strip_credentials = 0; /* routes.auth.pass_credentials */
	n = rewrite_request(out, sizeof(out), &h, &info);
	out[n] = '\0';
	assert_non_null(strstr(out, "Authorization: Bearer sk-secret-0123456789\r\n"));
}

/* Fields only the proxy sets (the client certificate, TLS facts): the client's copies are
 * dropped whatever their case, values go out with no control byte, a NULL value only drops. */
static void proxy_set_fields_cannot_be_forged_or_split(void **state)
{
	(void)state;
	const struct rewrite_field set[] = {
	    {"X-Client-Subject", "CN=a\r\nX-Admin: 1,O=\x7f\x01"
				 "b"},
	    {"X-Client-SAN", NULL},
	};
	struct rewrite_request_info info = {.client_ip = "10.1.2.3",
					    .request_id = "req-1",
					    .upstream_minor = 1,
					    .set = set,
					    .nset = 2};
	parse_req("GET / HTTP/1.1\r\nHost: a\r\nx-client-subject: CN=root\r\n"
		  "X-CLIENT-SAN: spiffe://evil\r\nAccept: */*\r\n\r\n");
	int n = rewrite_request(out, sizeof(out), &h, &info);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "X-Client-Subject: CN=a??X-Admin: 1,O=??b\r\n"));
	assert_null(strstr(out, "CN=root"));
	assert_null(strstr(out, "evil"));
	assert_null(strstr(out, "X-Client-SAN"));
	assert_non_null(strstr(out, "Accept: */*\r\n"));
}

static void forwarded_proto_says_tls(void **state)
{
	(void)state;
	const char *r =
	    rewrite_tls("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: http\r\n\r\n", 1, 0, 1);
	assert_non_null(strstr(r, "X-Forwarded-Proto: https\r\n"));
	assert_null(strstr(r, "X-Forwarded-Proto: http\r\n"));
}

static void request_is_rewritten(void **state)
{
	(void)state;
	const char *r =
	    rewrite("POST /v1/completions HTTP/1.1\r\nHost: api\r\n"
		    "Connection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\n"
		    "X-Secret: 1\r\nTE: trailers\r\nUpgrade: h2c\r\nProxy-Connection: x\r\n"
		    "Content-Length: 2\r\nX-Forwarded-Proto: https\r\n"
		    "Expect: 100-continue\r\nAccept: */*\r\n\r\n",
		    1);
	assert_non_null(strstr(r, "POST /v1/completions HTTP/1.1\r\nHost: api\r\n"));
	assert_non_null(strstr(r, "Content-Length: 2\r\n"));
	assert_non_null(strstr(r, "Accept: */*\r\n"));
	assert_non_null(strstr(r, "X-Forwarded-For: 10.1.2.3\r\n"));
	assert_non_null(strstr(r, "X-Forwarded-Proto: http\r\n"));
	assert_non_null(strstr(r, "X-Request-Id: req-1\r\n"));
	assert_null(strstr(r, "Connection"));
	assert_null(strstr(r, "Keep-Alive"));
	assert_null(strstr(r, "X-Secret"));
	assert_null(strstr(r, "TE:"));
	assert_null(strstr(r, "Upgrade"));
	assert_null(strstr(r, "https"));
	assert_null(strstr(r, "Expect"));
	assert_string_equal(r + strlen(r) - 4, "\r\n\r\n");
}

static void forwarded_for_appends(void **state)
{
	(void)state;
	const char *fwd =
	    "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.1.1.1\r\n"
	    "X-Forwarded-For: 2.2.2.2\r\nX-Real-IP: 1.1.1.1\r\nForwarded: for=1.1.1.1\r\n\r\n";
	/* from a trusted proxy: its hops, then it */
	const char *r = rewrite_as(fwd, 1, 1);
	assert_non_null(strstr(r, "X-Forwarded-For: 1.1.1.1, 2.2.2.2, 10.1.2.3\r\n"));
	assert_non_null(strstr(r, "X-Real-IP: 1.1.1.1\r\n"));
	assert_non_null(strstr(r, "Forwarded: for=1.1.1.1\r\n"));
	/* from anyone else: the client alone */
	r = rewrite(fwd, 1);
	assert_non_null(strstr(r, "X-Forwarded-For: 10.1.2.3\r\n"));
	assert_null(strstr(r, "1.1.1.1"));
	/* absolute-form becomes origin-form; HTTP/1.0 clients are forwarded as 1.0 */
	r = rewrite("GET http://a/x?y HTTP/1.0\r\n\r\n", 0);
	assert_non_null(strstr(r, "GET /x?y HTTP/1.0\r\n"));
}

static void framing_is_written_anew(void **state)
{
	(void)state;
	const char *r = rewrite("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n", 1);
	assert_non_null(strstr(r, "Content-Length: 7\r\n"));
	assert_null(strstr(r, "007"));
	r = rewrite("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 1);
	assert_non_null(strstr(r, "Transfer-Encoding: chunked\r\n"));
	assert_null(strstr(r, "Content-Length"));
	r = rewrite("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", 1);
	assert_non_null(strstr(r, "Content-Length: 0\r\n"));
	/* a response whose Connection names its framing keeps it */
	const char *t = "HTTP/1.1 200 OK\r\nConnection: content-length, x-a\r\nX-A: 1\r\n"
			"Content-Length: 5\r\n\r\n";
	assert_true(http_parse_response(t, strlen(t), 32768, HTTP_GET, &h) > 0);
	int n = rewrite_response(out, sizeof(out), &h, 1, NULL, NULL);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "Content-Length: 5\r\n"));
	assert_null(strstr(out, "X-A"));
	/* 204 declares no body; HEAD's answer keeps the length it declares */
	t = "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n";
	assert_true(http_parse_response(t, strlen(t), 32768, HTTP_GET, &h) > 0);
	n = rewrite_response(out, sizeof(out), &h, 1, NULL, NULL);
	out[n] = '\0';
	assert_null(strstr(out, "Content-Length"));
	t = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
	assert_true(http_parse_response(t, strlen(t), 32768, HTTP_HEAD, &h) > 0);
	n = rewrite_response(out, sizeof(out), &h, 1, NULL, NULL);
	out[n] = '\0';
	assert_non_null(strstr(out, "Content-Length: 5\r\n"));
}

/* A WebSocket handshake the proxy tunnels: its own Connection: Upgrade and Upgrade:
 * websocket go upstream (the client's own Upgrade value never does), the Sec-WebSocket-*
 * fields pass; without the flag the Upgrade is dropped as any hop-by-hop field. The 101
 * back says the same, whatever the backend's Connection named. */
static void websocket_handshake_keeps_its_upgrade(void **state)
{
	(void)state;
	struct rewrite_request_info info = {
	    .client_ip = "10.1.2.3", .request_id = "req-1", .upstream_minor = 1, .upgrade = 1};
	parse_req("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade, X-Hop\r\n"
		  "Upgrade: WebSocket, evil/1\r\nX-Hop: 1\r\nSec-WebSocket-Key: abc==\r\n"
		  "Sec-WebSocket-Version: 13\r\n\r\n");
	int n = rewrite_request(out, sizeof(out), &h, &info);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"));
	assert_non_null(strstr(out, "Sec-WebSocket-Key: abc==\r\n"));
	assert_non_null(strstr(out, "Sec-WebSocket-Version: 13\r\n"));
	assert_null(strstr(out, "evil"));
	assert_null(strstr(out, "X-Hop"));
	assert_null(strstr(out, "keep-alive"));
	info.upgrade = 0;
	n = rewrite_request(out, sizeof(out), &h, &info);
	out[n] = '\0';
	assert_null(strstr(out, "pgrade"));
	assert_non_null(strstr(out, "Sec-WebSocket-Key: abc==\r\n"));
	const char *t = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
			"Connection: Upgrade, X-B\r\nX-B: 1\r\nSec-WebSocket-Accept: xyz=\r\n\r\n";
	assert_true(http_parse_response(t, strlen(t), 32768, HTTP_GET, &h) > 0);
	n = rewrite_response(out, sizeof(out), &h, 0, "req-1", NULL);
	assert_true(n > 0);
	out[n] = '\0';
	assert_true(strncmp(out, "HTTP/1.1 101 Switching Protocols\r\n", 34) == 0);
	assert_non_null(strstr(out, "Sec-WebSocket-Accept: xyz=\r\n"));
	assert_non_null(strstr(out, "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"));
	assert_null(strstr(out, "X-B"));
	assert_null(strstr(out, "close"));
}

static void request_id_kept_if_sane(void **state)
{
	(void)state;
	char id[REQUEST_ID_MAX + 1];
	parse_req("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: abc-123.x_y:z\r\n\r\n");
	assert_true(rewrite_incoming_request_id(&h, id));
	assert_string_equal(id, "abc-123.x_y:z");
	parse_req("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: bad id\r\n\r\n");
	assert_false(rewrite_incoming_request_id(&h, id));
	parse_req("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_false(rewrite_incoming_request_id(&h, id));
	/* two of them: neither is believed */
	parse_req("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: a1\r\nX-Request-Id: a2\r\n\r\n");
	assert_false(rewrite_incoming_request_id(&h, id));
	/* 64 characters at most; a quote, a slash, a comma or a non-ASCII byte is refused */
	char t[256];
	snprintf(t, sizeof(t), "GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: %064d\r\n\r\n", 7);
	parse_req(t);
	assert_true(rewrite_incoming_request_id(&h, id));
	snprintf(t, sizeof(t), "GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: %065d\r\n\r\n", 7);
	parse_req(t);
	assert_false(rewrite_incoming_request_id(&h, id));
	const char *bad[] = {"a\"b", "a/b", "a,b", "a\xc3\xa9", "a\tb", "<script>"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(t, sizeof(t), "GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: %s\r\n\r\n",
			 bad[i]);
		parse_req(t);
		assert_false(rewrite_incoming_request_id(&h, id));
	}
}

/* The trace context: the proxy's traceparent always, the client's never; its tracestate only
 * along a traceparent that was taken; X-Accelnet-Timing never reaches the backend. */
static void trace_fields(void **state)
{
	(void)state;
	const char *tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
	struct rewrite_request_info info = {
	    .client_ip = "10.1.2.3", .request_id = "req-1", .traceparent = tp, .upstream_minor = 1};
	parse_req("GET / HTTP/1.1\r\nHost: a\r\ntraceparent: 00-ffffffffffffffffffffffffffffffff-"
		  "ffffffffffffffff-01\r\ntracestate: a=1\r\nTraceState: b=2\r\n"
		  "X-Accelnet-Timing: 1\r\n\r\n");
	int n = rewrite_request(out, sizeof(out), &h, &info);
	assert_true(n > 0);
	out[n] = 0;
	assert_null(strstr(out, "ffff"));
	assert_null(strstr(out, "a=1"));
	assert_null(strstr(out, "b=2"));
	assert_null(strstr(out, "Timing"));
	assert_non_null(strstr(out, "\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-"
				    "b7ad6b7169203331-01\r\n"));
	info.pass_tracestate = 1;
	n = rewrite_request(out, sizeof(out), &h, &info);
	out[n] = 0;
	assert_non_null(strstr(out, "\r\ntracestate: a=1\r\nTraceState: b=2\r\n"));
	assert_null(strstr(out, "ffff"));
	/* no traceparent to send: none is sent */
	info.traceparent = NULL;
	n = rewrite_request(out, sizeof(out), &h, &info);
	out[n] = 0;
	assert_null(strstr(out, "traceparent"));
}

static void response_head(void **state)
{
	(void)state;
	const char *t =
	    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	    "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\r\n";
	assert_true(http_parse_response(t, strlen(t), 32768, HTTP_POST, &h) > 0);
	int n = rewrite_response(out, sizeof(out), &h, 1, "rid", NULL);
	assert_true(n > 0);
	out[n] = '\0';
	assert_string_equal(out, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				 "Transfer-Encoding: chunked\r\nX-Request-Id: rid\r\n\r\n");
	n = rewrite_response(out, sizeof(out), &h, 0, "rid", NULL);
	out[n] = '\0';
	assert_non_null(strstr(out, "Connection: close\r\n\r\n"));
	/* too small a buffer fails cleanly */
	assert_int_equal(rewrite_response(out, 10, &h, 1, "rid", NULL), -1);
	/* the backend's own request id and timing never pass: the proxy's replace them */
	t = "HTTP/1.1 200 OK\r\nX-Request-Id: backend-made\r\nX-Accelnet-Timing: ttfb;dur=0\r\n"
	    "Content-Length: 0\r\n\r\n";
	assert_true(http_parse_response(t, strlen(t), 32768, HTTP_GET, &h) > 0);
	n = rewrite_response(out, sizeof(out), &h, 1, "rid", "ttfb;dur=1.000");
	out[n] = '\0';
	assert_string_equal(out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Request-Id: rid\r\n"
				 "X-Accelnet-Timing: ttfb;dur=1.000\r\n\r\n");
}

static void error_response(void **state)
{
	(void)state;
	int n = rewrite_error(out, sizeof(out),
			      &(struct rewrite_error_info){.status = 503,
							   .detail = "no backend available",
							   .request_id = "rid",
							   .retry_after_s = 2});
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "HTTP/1.1 503 Service Unavailable\r\n"));
	assert_non_null(strstr(out, "Connection: close\r\n"));
	assert_non_null(strstr(out, "X-Request-Id: rid\r\n"));
	assert_non_null(strstr(out, "Retry-After: 2\r\n"));
	const char *body = strstr(out, "\r\n\r\n") + 4;
	assert_string_equal(body,
			    "503 Service Unavailable: no backend available (request id rid)\n");
	char cl[64];
	snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", strlen(body));
	assert_non_null(strstr(out, cl));
	/* the OpenAI shape keeps its error object and says the id beside it; the timing */
	struct rewrite_error_info e = {.status = 502,
				       .detail = "x",
				       .request_id = "rid",
				       .openai = 1,
				       .timing = "total;dur=2.000"};
	n = rewrite_error(out, sizeof(out), &e);
	out[n] = '\0';
	assert_string_equal(
	    strstr(out, "\r\n\r\n") + 4,
	    "{\"error\":{\"message\":\"x\",\"type\":\"server_error\",\"param\":null,"
	    "\"code\":null},\"request_id\":\"rid\"}\n");
	assert_non_null(strstr(out, "\r\nX-Accelnet-Timing: total;dur=2.000\r\n"));
}

/* routes.api openai: the OpenAI error JSON, with its type and code per status, escaped;
 * a 401's challenges as the route's methods ask. */
static void openai_error_response(void **state)
{
	(void)state;
	struct {
		int status;
		const char *body;
	} cases[] = {
	    {401, "{\"error\":{\"message\":\"the \\\"key\\\" is not valid\",\"type\":"
		  "\"invalid_request_error\",\"param\":null,\"code\":\"invalid_api_key\"}}\n"},
	    {403, "{\"error\":{\"message\":\"the \\\"key\\\" is not valid\",\"type\":"
		  "\"permission_error\",\"param\":null,\"code\":null}}\n"},
	    {429, "{\"error\":{\"message\":\"the \\\"key\\\" is not valid\",\"type\":"
		  "\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n"},
	    {503, "{\"error\":{\"message\":\"the \\\"key\\\" is not valid\",\"type\":"
		  "\"server_error\",\"param\":null,\"code\":\"service_unavailable\"}}\n"},
	    {502, "{\"error\":{\"message\":\"the \\\"key\\\" is not valid\",\"type\":"
		  "\"server_error\",\"param\":null,\"code\":null}}\n"},
	    {413, "{\"error\":{\"message\":\"the \\\"key\\\" is not valid\",\"type\":"
		  "\"invalid_request_error\",\"param\":null,\"code\":null}}\n"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rewrite_error_info e = {.status = cases[i].status,
					       .detail = "the \"key\" is not valid",
					       .keep_alive = 1,
					       .challenges = REWRITE_CHALLENGE_BEARER |
							     REWRITE_CHALLENGE_BASIC,
					       .openai = 1};
		int n = rewrite_error(out, sizeof(out), &e);
		assert_true(n > 0);
		out[n] = '\0';
		assert_non_null(strstr(out, "Content-Type: application/json\r\n"));
		assert_string_equal(strstr(out, "\r\n\r\n") + 4, cases[i].body);
		int challenged = strstr(out, "WWW-Authenticate: Bearer realm=\"accelnet\"\r\n") &&
				 strstr(out, "WWW-Authenticate: Basic realm=\"accelnet\"");
		assert_int_equal(challenged, cases[i].status == 401);
	}
	/* a token limit's 429 says so in its type, as the OpenAI API does */
	struct rewrite_error_info t = {
	    .status = 429, .detail = "x", .retry_after_s = 7, .openai = 1, .openai_type = "tokens"};
	int tn = rewrite_error(out, sizeof(out), &t);
	out[tn] = '\0';
	assert_string_equal(strstr(out, "\r\n\r\n") + 4,
			    "{\"error\":{\"message\":\"x\",\"type\":\"tokens\",\"param\":null,"
			    "\"code\":\"rate_limit_exceeded\"}}\n");
	assert_non_null(strstr(out, "Retry-After: 7\r\n"));
	/* Basic alone challenges with Basic alone */
	struct rewrite_error_info e = {
	    .status = 401, .detail = "x", .challenges = REWRITE_CHALLENGE_BASIC};
	int n = rewrite_error(out, sizeof(out), &e);
	out[n] = '\0';
	assert_null(strstr(out, "Bearer"));
	assert_non_null(strstr(out, "Content-Type: text/plain\r\n"));
}

static void sse_early_stream(void **state)
{
	(void)state;
	char buf[512];
	int n = rewrite_sse_head(buf, sizeof(buf), "abc");
	assert_true(n > 0);
	buf[n] = 0;
	assert_string_equal(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				 "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
				 "X-Request-Id: abc\r\n\r\n");
	n = rewrite_sse_comment(buf, sizeof(buf), "waiting");
	buf[n] = 0;
	assert_string_equal(buf, "b\r\n: waiting\n\n\r\n");
	struct rewrite_error_info e = {.status = 503, .detail = "queue full", .request_id = "abc"};
	n = rewrite_sse_error(buf, sizeof(buf), &e);
	buf[n] = 0;
	const char *ev =
	    "event: error\ndata: {\"error\":{\"status\":503,\"message\":\"queue full\","
	    "\"type\":\"proxy_error\"},\"request_id\":\"abc\"}\n\n";
	char want[512];
	snprintf(want, sizeof(want), "%zx\r\n%s\r\n0\r\n\r\n", strlen(ev), ev);
	assert_string_equal(buf, want);
	e.request_id = NULL;
	assert_int_equal(rewrite_sse_error(buf, 20, &e), -1);
	/* on an OpenAI route the event carries the OpenAI error object, as the body would */
	e = (struct rewrite_error_info){
	    .status = 503, .detail = "queue full", .request_id = "abc", .openai = 1};
	n = rewrite_sse_error(buf, sizeof(buf), &e);
	buf[n] = 0;
	ev = "event: error\ndata: {\"error\":{\"message\":\"queue full\",\"type\":"
	     "\"server_error\",\"param\":null,\"code\":\"service_unavailable\"},"
	     "\"request_id\":\"abc\"}\n\n";
	snprintf(want, sizeof(want), "%zx\r\n%s\r\n0\r\n\r\n", strlen(ev), ev);
	assert_string_equal(buf, want);
	e = (struct rewrite_error_info){
	    .status = 429, .detail = "t", .openai = 1, .openai_type = "tokens"};
	n = rewrite_sse_error(buf, sizeof(buf), &e);
	buf[n] = 0;
	assert_non_null(strstr(buf, "data: {\"error\":{\"message\":\"t\",\"type\":\"tokens\","
				    "\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n\n"));
}

/* The event's message is JSON inside one "data:" line whatever the detail holds: a quote, a
 * backslash or a line break in it can neither end the string nor start a forged event. */
static void sse_error_message_escaped(void **state)
{
	(void)state;
	char buf[512];
	struct rewrite_error_info e = {
	    .status = 502, .detail = "a \"b\" \\ c\nevent: forged\n\ndata: x", .request_id = "rid"};
	int n = rewrite_sse_error(buf, sizeof(buf), &e);
	assert_true(n > 0);
	buf[n] = 0;
	const char *ev = "event: error\ndata: {\"error\":{\"status\":502,\"message\":"
			 "\"a \\\"b\\\" \\\\ c\\u000aevent: forged\\u000a\\u000adata: x\","
			 "\"type\":\"proxy_error\"},\"request_id\":\"rid\"}\n\n";
	char want[512];
	snprintf(want, sizeof(want), "%zx\r\n%s\r\n0\r\n\r\n", strlen(ev), ev);
	assert_string_equal(buf, want);
}

/* An X-Accelnet-Timing value too long for its line is left out whole, never cut before its
 * CRLF (which would glue the next header line onto it). */
static void error_timing_never_cut(void **state)
{
	(void)state;
	char timing[300];
	memset(timing, '9', sizeof(timing) - 1);
	timing[sizeof(timing) - 1] = 0;
	struct rewrite_error_info e = {.status = 503,
				       .detail = "x",
				       .request_id = "rid",
				       .retry_after_s = 1,
				       .timing = timing};
	int n = rewrite_error(out, sizeof(out), &e);
	assert_true(n > 0);
	out[n] = '\0';
	assert_null(strstr(out, "X-Accelnet-Timing"));
	assert_non_null(strstr(out, "\r\nX-Request-Id: rid\r\nRetry-After: 1\r\nCache-Control:"));
}

static void json_answer_and_openai_code(void **state)
{
	(void)state;
	static const char list[] = "{\"object\":\"list\",\"data\":[]}\n";
	int n = rewrite_json(out, sizeof(out), 200, list, sizeof(list) - 1, "rid", 1);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"));
	assert_non_null(strstr(out, "Content-Length: 28\r\nX-Request-Id: rid\r\n"));
	assert_null(strstr(out, "Connection: close"));
	assert_string_equal(out + n - (sizeof(list) - 1), list);
	assert_int_equal(rewrite_json(out, 40, 200, list, sizeof(list) - 1, NULL, 0), -1);
	n = rewrite_error(out, sizeof(out),
			  &(struct rewrite_error_info){.status = 404,
						       .detail = "model 'x' not found",
						       .keep_alive = 1,
						       .openai = 1,
						       .openai_code = "model_not_found"});
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "{\"error\":{\"message\":\"model 'x' not found\",\"type\":"
				    "\"invalid_request_error\",\"param\":null,\"code\":"
				    "\"model_not_found\"}}"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(request_is_rewritten),
	    cmocka_unit_test(websocket_handshake_keeps_its_upgrade),
	    cmocka_unit_test(forwarded_proto_says_tls),
	    cmocka_unit_test(identity_replaces_credentials),
	    cmocka_unit_test(proxy_set_fields_cannot_be_forged_or_split),
	    cmocka_unit_test(forwarded_for_appends),
	    cmocka_unit_test(framing_is_written_anew),
	    cmocka_unit_test(request_id_kept_if_sane),
	    cmocka_unit_test(trace_fields),
	    cmocka_unit_test(response_head),
	    cmocka_unit_test(error_response),
	    cmocka_unit_test(openai_error_response),
	    cmocka_unit_test(sse_early_stream),
	    cmocka_unit_test(sse_error_message_escaped),
	    cmocka_unit_test(error_timing_never_cut),
	    cmocka_unit_test(json_answer_and_openai_code),
	};
	return cmocka_run_group_tests_name("head rewriting", tests, NULL, NULL);
}
