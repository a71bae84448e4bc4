/*
 * rewrite.c - writing heads. A small appender checks room once per piece, so no snprintf
 * runs per header and a head that does not fit fails cleanly.
 */
#include "http/rewrite.h"
#include "http/status.h"

#include <stdio.h>
#include <string.h>

struct out {
	char *p;
	size_t len, cap;
	int overflow;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->overflow || o->cap - o->len < n) {
		o->overflow = 1;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

/* A string literal, its length known at compile time. */
#define PUT_LIT(o, lit) put((o), (lit), sizeof(lit) - 1)

static void put_str(struct out *o, struct http_str s)
{
	put(o, s.p, s.len);
}

static void put_field(struct out *o, struct http_str name, struct http_str value)
{
	put_str(o, name);
	put(o, ": ", 2);
	put_str(o, value);
	put(o, "\r\n", 2);
}

static int finish(struct out *o)
{
	return o->overflow ? -1 : (int)o->len;
}

/* ASCII letters of <a> and <b> equal but for case, or any other byte equal (no locale). */
static inline int ascii_same(unsigned char a, unsigned char b)
{
	return a == b || ((a | 0x20) == (b | 0x20) && (a | 0x20) >= 'a' && (a | 0x20) <= 'z');
}

/* <name> is <lit>, <len> bytes long, but for the case of its letters. */
static inline int name_is(struct http_str name, const char *lit, size_t len)
{
	if (name.len != len)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!ascii_same((unsigned char)name.p[i], (unsigned char)lit[i]))
			return 0;
	return 1;
}
#define NAME_IS(name, lit) name_is((name), (lit), sizeof(lit) - 1)

/* The hop-by-hop fields every head has by name (those its Connection names aside), told by
 * length first: one comparison a field. */
static int hop_by_hop_name(struct http_str name)
{
	switch (name.len) {
	case 2:
		return NAME_IS(name, "te");
	case 7:
		return NAME_IS(name, "upgrade");
	case 10:
		return NAME_IS(name, "connection") || NAME_IS(name, "keep-alive");
	case 16:
		return NAME_IS(name, "proxy-connection");
	default:
		return 0;
	}
}

int rewrite_is_hop_by_hop(const struct http_head *h, struct http_str name)
{
	return hop_by_hop_name(name) || (h->nconn_tokens && http_conn_names(h, name));
}

/* Framing fields are never copied: they are written from what the parser decided. */
static int is_framing(struct http_str name)
{
	return NAME_IS(name, "content-length") || NAME_IS(name, "transfer-encoding");
}

static void put_content_length(struct out *o, uint64_t n)
{
	char num[24];
	size_t i = sizeof(num);
	do
		num[--i] = (char)('0' + n % 10);
	while ((n /= 10));
	PUT_LIT(o, "Content-Length: ");
	put(o, num + i, sizeof(num) - i);
	put(o, "\r\n", 2);
}

/* <name> is <lit> (<len> bytes) case-insensitively, with '_' taken for '-': CGI-style
 * backends (WSGI, PHP, Rack) read X_Client_Subject and X-Client-Subject as the same
 * HTTP_X_CLIENT_SUBJECT. */
static inline int same_cgi_len(struct http_str name, const char *lit, size_t len)
{
	if (name.len != len)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char a = (unsigned char)(name.p[i] == '_' ? '-' : name.p[i]);
		unsigned char b = (unsigned char)(lit[i] == '_' ? '-' : lit[i]);
		if (!ascii_same(a, b))
			return 0;
	}
	return 1;
}
#define SAME_CGI(name, lit) same_cgi_len((name), (lit), sizeof(lit) - 1)

/* The same for a name known only at run time (from the configuration). */
static int same_field_for_cgi(struct http_str name, const char *lit)
{
	return same_cgi_len(name, lit, strlen(lit));
}

/*
 * Fields by which a proxy in front tells the backend who the client is or what it asked
 * for; a client outside trusted_proxies may not set them (X-Forwarded-For is rewritten),
 * nor their underscore spellings (X_Forwarded_Host), which CGI-style backends read as the
 * same fields.
 */
static int is_forwarding(struct http_str name)
{
	return SAME_CGI(name, "x-forwarded-for") || SAME_CGI(name, "x-real-ip") ||
	       SAME_CGI(name, "forwarded") || SAME_CGI(name, "x-forwarded-host") ||
	       SAME_CGI(name, "x-forwarded-port") || SAME_CGI(name, "x-forwarded-prefix") ||
	       SAME_CGI(name, "x-client-ip") || SAME_CGI(name, "true-client-ip") ||
	       SAME_CGI(name, "cf-connecting-ip") || SAME_CGI(name, "x-original-forwarded-for");
}

static int is_set_by_proxy(const struct rewrite_request_info *info, struct http_str name)
{
	for (unsigned i = 0; i < info->nset; i++)
		if (same_field_for_cgi(name, info->set[i].name))
			return 1;
	return 0;
}

/* Is <name> one the edit sets or removes? */
static int is_edited(const struct rewrite_edit *e, struct http_str name)
{
	for (unsigned i = 0; e && i < e->nset; i++)
		if (same_field_for_cgi(name, e->set[i].name))
			return 1;
	return 0;
}

/* On a route with auth: a credential field the guard did not read (X_API_Key, which a CGI
 * backend reads as HTTP_X_API_KEY like the X-API-Key the guard checked), and unless the route
 * passes them on (pass_credentials), the credential fields themselves. */
static int is_unchecked_credential(const struct rewrite_request_info *info, struct http_str name)
{
	if (!info->identity_header)
		return 0;
	if (NAME_IS(name, "authorization") || NAME_IS(name, "x-api-key"))
		return info->strip_credentials;
	return SAME_CGI(name, "x-api-key");
}

/* Fields of the trace context and the timing request: the proxy writes traceparent itself,
 * passes tracestate only along a traceparent it took, and answers X-Accelnet-Timing itself. */
static int is_trace_field(const struct rewrite_request_info *info, struct http_str name)
{
	return NAME_IS(name, "traceparent") || NAME_IS(name, "x-accelnet-timing") ||
	       (!info->pass_tracestate && NAME_IS(name, "tracestate"));
}

/* "<name>: <value>\r\n" with every byte of <value> outside printable ASCII as '?'. */
static void put_safe_field(struct out *o, const char *name, const char *value)
{
	puts_(o, name);
	put(o, ": ", 2);
	size_t n = strlen(value);
	if (o->overflow || o->cap - o->len < n + 2) {
		o->overflow = 1;
		return;
	}
	rewrite_safe_copy(o->p + o->len, value, n);
	o->len += n;
	put(o, "\r\n", 2);
}

/* The edit's fields with a value: set ones, then added ones. */
static void put_edit(struct out *o, const struct rewrite_edit *e)
{
	for (unsigned i = 0; e && i < e->nset; i++)
		if (e->set[i].value)
			put_safe_field(o, e->set[i].name, e->set[i].value);
	for (unsigned i = 0; e && i < e->nadd; i++)
		put_safe_field(o, e->add[i].name, e->add[i].value);
}

int rewrite_incoming_request_id(const struct http_head *req, char *out)
{
	const struct http_header *f = http_find_only_header(req, "x-request-id");
	if (!f || !f->value.len || f->value.len > REQUEST_ID_MAX)
		return 0;
	for (uint32_t i = 0; i < f->value.len; i++) {
		char c = f->value.p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == ':' || c == '-'))
			return 0;
	}
	memcpy(out, f->value.p, f->value.len);
	out[f->value.len] = '\0';
	return 1;
}

int rewrite_request(char *buf, size_t cap, const struct http_head *req,
		    const struct rewrite_request_info *info)
{
	struct out o = {buf, 0, cap, 0};

	put_str(&o, req->method);
	put(&o, " ", 1);
	put_str(&o, info->path.p ? info->path : req->path);
	if (info->upstream_minor)
		PUT_LIT(&o, " HTTP/1.1\r\n");
	else
		PUT_LIT(&o, " HTTP/1.0\r\n");
	if (info->host)
		put_field(&o, (struct http_str){"Host", 4},
			  (struct http_str){info->host, (uint32_t)strlen(info->host)});
	else if (req->host.p)
		put_field(&o, (struct http_str){"Host", 4}, req->host);
	for (unsigned i = 0; i < req->nheaders; i++) {
		const struct http_header *f = &req->headers[i];
		if (rewrite_is_hop_by_hop(req, f->name) || is_framing(f->name) ||
		    NAME_IS(f->name, "host") || SAME_CGI(f->name, "x-forwarded-proto") ||
		    SAME_CGI(f->name, "x-request-id") || NAME_IS(f->name, "expect") ||
		    is_trace_field(info, f->name) ||
		    (is_forwarding(f->name) &&
		     (!info->trusted || SAME_CGI(f->name, "x-forwarded-for"))) ||
		    (info->identity_header && same_field_for_cgi(f->name, info->identity_header)) ||
		    is_set_by_proxy(info, f->name) || is_unchecked_credential(info, f->name) ||
		    is_edited(info->edit, f->name))
			continue;
		put_field(&o, f->name, f->value);
	}
	if (req->flags & HTTP_F_HAS_TE)
		PUT_LIT(&o, "Transfer-Encoding: chunked\r\n");
	else if (req->flags & HTTP_F_HAS_CL)
		put_content_length(&o, req->content_length);
	if (info->upgrade)
		PUT_LIT(&o, "Connection: Upgrade\r\nUpgrade: websocket\r\n");
	/* X-Forwarded-For: the earlier hops a trusted proxy reports, then this client */
	PUT_LIT(&o, "X-Forwarded-For: ");
	for (unsigned i = 0; info->trusted && i < req->nheaders; i++) {
		const struct http_header *f = &req->headers[i];
		if (NAME_IS(f->name, "x-forwarded-for") && f->value.len) {
			put_str(&o, f->value);
			put(&o, ", ", 2);
		}
	}
	puts_(&o, info->client_ip);
	if (info->tls)
		PUT_LIT(&o, "\r\nX-Forwarded-Proto: https\r\nX-Request-Id: ");
	else
		PUT_LIT(&o, "\r\nX-Forwarded-Proto: http\r\nX-Request-Id: ");
	puts_(&o, info->request_id);
	PUT_LIT(&o, "\r\n");
	if (info->traceparent) {
		PUT_LIT(&o, "traceparent: ");
		puts_(&o, info->traceparent);
		PUT_LIT(&o, "\r\n");
	}
	if (info->identity_header && info->identity) { /* who the proxy authenticated */
		puts_(&o, info->identity_header);
		puts_(&o, ": ");
		puts_(&o, info->identity);
		puts_(&o, "\r\n");
	}
	for (unsigned i = 0; i < info->nset; i++)
		if (info->set[i].value)
			put_safe_field(&o, info->set[i].name, info->set[i].value);
	put_edit(&o, info->edit);
	PUT_LIT(&o, "\r\n");
	return finish(&o);
}

int rewrite_response(char *buf, size_t cap, const struct http_head *resp, int keep_alive,
		     const char *request_id, const char *timing)
{
	return rewrite_response_edit(buf, cap, resp, keep_alive, request_id, timing, NULL);
}

/* Is the backend's field <name> one the client's head never carries as it came: hop-by-hop
 * (rewrite_is_hop_by_hop), framing (is_framing), the proxy's own (X-Request-Id,
 * X-Accelnet-Timing, X-Accelnet-Llm) or edited? Told by its length first: one comparison a
 * field, not nine. */
static int response_field_dropped(const struct http_head *resp, struct http_str name,
				  const struct rewrite_edit *edit)
{
	if (rewrite_is_hop_by_hop(resp, name))
		return 1;
	switch (name.len) {
	case 12:
		if (NAME_IS(name, "x-request-id"))
			return 1;
		break;
	case 14:
		if (NAME_IS(name, "content-length") || NAME_IS(name, "x-accelnet-llm"))
			return 1;
		break;
	case 17:
		if (NAME_IS(name, "transfer-encoding") || NAME_IS(name, "x-accelnet-timing"))
			return 1;
		break;
	default:
		break;
	}
	return is_edited(edit, name);
}

/* The fields of the client's response head, in the order they are written: the rules of
 * rewrite_response_fields(), which the HTTP/1 writer below and the HTTP/2 codec share. */
static int walk_response(const struct http_head *resp, int keep_alive, const char *request_id,
			 const char *timing, const struct rewrite_edit *edit,
			 rewrite_field_fn *emit, void *ctx)
{
	int rc = 0;
	for (unsigned i = 0; i < resp->nheaders && !rc; i++) {
		const struct http_header *f = &resp->headers[i];
		if (response_field_dropped(resp, f->name, edit))
			continue;
		rc = emit(ctx, REWRITE_RELAYED, f->name.p, f->name.len, f->value.p, f->value.len);
	}
	for (unsigned i = 0; edit && i < edit->nset && !rc; i++)
		if (edit->set[i].value)
			rc = emit(ctx, REWRITE_SAFE, edit->set[i].name, strlen(edit->set[i].name),
				  edit->set[i].value, strlen(edit->set[i].value));
	for (unsigned i = 0; edit && i < edit->nadd && !rc; i++)
		rc = emit(ctx, REWRITE_SAFE, edit->add[i].name, strlen(edit->add[i].name),
			  edit->add[i].value, strlen(edit->add[i].value));
	/* a 1xx or 204 has no body and may not declare one; a HEAD or 304 answer declares
	 * the length the body would have */
	if (!rc && resp->status >= 200 && resp->status != 204) {
		if (resp->flags & HTTP_F_HAS_TE) {
			rc = emit(ctx, REWRITE_HOP, "Transfer-Encoding", 17, "chunked", 7);
		} else if (resp->flags & HTTP_F_HAS_CL) {
			char num[24];
			size_t k = sizeof(num);
			uint64_t n = resp->content_length;
			do
				num[--k] = (char)('0' + n % 10);
			while ((n /= 10));
			rc = emit(ctx, REWRITE_OWN, "Content-Length", 14, num + k, sizeof(num) - k);
		}
	}
	if (!rc && request_id)
		rc = emit(ctx, REWRITE_OWN, "X-Request-Id", 12, request_id, strlen(request_id));
	if (!rc && timing)
		rc = emit(ctx, REWRITE_OWN, "X-Accelnet-Timing", 17, timing, strlen(timing));
	if (!rc && resp->status == 101)
		rc = emit(ctx, REWRITE_HOP, "Connection", 10, "Upgrade", 7) ||
		     emit(ctx, REWRITE_HOP, "Upgrade", 7, "websocket", 9);
	else if (!rc && !keep_alive)
		rc = emit(ctx, REWRITE_HOP, "Connection", 10, "close", 5);
	return rc;
}

int rewrite_response_fields(const struct http_head *resp, int keep_alive, const char *request_id,
			    const char *timing, const struct rewrite_edit *edit,
			    rewrite_field_fn *emit, void *ctx)
{
	return walk_response(resp, keep_alive, request_id, timing, edit, emit, ctx);
}

void rewrite_safe_copy(char *dst, const char *src, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)src[i];
		dst[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
}

/* The HTTP/1 writer's sink: each field as its line. */
static int put_line(void *ctx, enum rewrite_kind kind, const char *name, size_t nlen,
		    const char *value, size_t vlen)
{
	struct out *o = ctx;
	put(o, name, nlen);
	put(o, ": ", 2);
	if (kind != REWRITE_SAFE) {
		put(o, value, vlen);
	} else if (!o->overflow && o->cap - o->len >= vlen) {
		rewrite_safe_copy(o->p + o->len, value, vlen);
		o->len += vlen;
	} else {
		o->overflow = 1;
	}
	put(o, "\r\n", 2);
	return o->overflow;
}

int rewrite_response_edit(char *buf, size_t cap, const struct http_head *resp, int keep_alive,
			  const char *request_id, const char *timing,
			  const struct rewrite_edit *edit)
{
	struct out o = {buf, 0, cap, 0};
	char status[16];

	if (resp->status >= 100 && resp->status <= 999) { /* always, from the parser */
		memcpy(status, "HTTP/1.1 000 ", 14);
		status[9] = (char)('0' + resp->status / 100);
		status[10] = (char)('0' + resp->status / 10 % 10);
		status[11] = (char)('0' + resp->status % 10);
	} else {
		snprintf(status, sizeof(status), "HTTP/1.1 %03d ", resp->status);
	}
	put(&o, status, resp->status >= 100 && resp->status <= 999 ? 13 : strlen(status));
	if (resp->reason.len)
		put_str(&o, resp->reason);
	else
		puts_(&o, http_status_text(resp->status));
	put(&o, "\r\n", 2);
	(void)walk_response(resp, keep_alive, request_id, timing, edit, put_line, &o);
	put(&o, "\r\n", 2);
	return finish(&o);
}

int rewrite_edit_fields(char *p, size_t len, size_t cap, const struct rewrite_edit *edit)
{
	size_t w = 0;
	for (size_t r = 0; r < len;) {
		const char *eol = memchr(p + r, '\n', len - r);
		size_t n = eol ? (size_t)(eol + 1 - (p + r)) : len - r;
		const char *colon = memchr(p + r, ':', n);
		struct http_str name = {p + r, colon ? (uint32_t)(colon - (p + r)) : 0};
		if (!colon || !is_edited(edit, name)) {
			memmove(p + w, p + r, n);
			w += n;
		}
		r += n;
	}
	struct out o = {p, w, cap, 0};
	put_edit(&o, edit);
	return finish(&o);
}

int rewrite_head_lines(char *head, size_t len, size_t cap, const char *lines, size_t n)
{
	if (len < 2 || n > cap - len)
		return -1;
	memcpy(head + len - 2, lines, n);
	memcpy(head + len - 2 + n, "\r\n", 2);
	return (int)(len + n);
}

int rewrite_sse_head(char *out, size_t cap, const char *request_id)
{
	int n = snprintf(out, cap,
			 "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			 "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
			 "X-Request-Id: %s\r\n\r\n",
			 request_id);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* <payload> as one chunk of a chunked body, then the last chunk too when <last>. */
static int chunk(char *out, size_t cap, const char *payload, int plen, int last)
{
	int n =
	    snprintf(out, cap, "%x\r\n%.*s\r\n%s", plen, plen, payload, last ? "0\r\n\r\n" : "");
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int rewrite_sse_comment(char *out, size_t cap, const char *text)
{
	char line[128];
	int n = snprintf(line, sizeof(line), ": %s\n\n", text);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -1;
	return chunk(out, cap, line, n, 0);
}

/* <s> as the inside of a JSON string (the proxy's own texts; escaped all the same). */
static int json_text(char *out, size_t cap, const char *s)
{
	size_t o = 0;
	for (; *s && o + 7 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20) {
			o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
	return (int)o;
}

/* The "type" and "code" the OpenAI API gives an error of <status>. */
static void openai_kind(int status, const char **type, const char **code)
{
	*code = NULL;
	if (status == 401) {
		*type = "invalid_request_error";
		*code = "invalid_api_key";
	} else if (status == 403) {
		*type = "permission_error";
	} else if (status == 429) {
		*type = "requests";
		*code = "rate_limit_exceeded";
	} else if (status >= 500) {
		*type = "server_error";
		if (status == 503)
			*code = "service_unavailable";
	} else {
		*type = "invalid_request_error";
	}
}

/* The error object (the part inside {"error": ...}) for <e>: the OpenAI API's on an OpenAI
 * route, else the proxy's own. Its length, or -1. */
static int error_object(char *out, size_t cap, const struct rewrite_error_info *e)
{
	char msg[300];
	json_text(msg, sizeof(msg), e->detail); /* a line break in it would end an SSE data line */
	int n;
	if (e->openai) {
		const char *type, *code;
		openai_kind(e->status, &type, &code);
		if (e->openai_type)
			type = e->openai_type;
		if (e->openai_code)
			code = e->openai_code;
		const char *param = e->openai_param;
		n = snprintf(
		    out, cap,
		    "{\"message\":\"%s\",\"type\":\"%s\",\"param\":%s%s%s,\"code\":%s%s%s}", msg,
		    type, param ? "\"" : "", param ? param : "null", param ? "\"" : "",
		    code ? "\"" : "", code ? code : "null", code ? "\"" : "");
	} else {
		n = snprintf(out, cap,
			     "{\"status\":%d,\"message\":\"%s\",\"type\":\"proxy_error\"}",
			     e->status, msg);
	}
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int rewrite_sse_error_event(char *out, size_t cap, const struct rewrite_error_info *e)
{
	char obj[400];
	const char *rid = e->request_id;
	if (error_object(obj, sizeof(obj), e) < 0)
		return -1;
	int n = snprintf(out, cap, "event: error\ndata: {\"error\":%s%s%s%s}\n\n", obj,
			 rid ? ",\"request_id\":\"" : "", rid ? rid : "", rid ? "\"" : "");
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int rewrite_sse_error(char *out, size_t cap, const struct rewrite_error_info *e)
{
	char ev[512];
	int n = rewrite_sse_error_event(ev, sizeof(ev), e);
	return n < 0 ? -1 : chunk(out, cap, ev, n, 1);
}

int rewrite_error(char *buf, size_t cap, const struct rewrite_error_info *e)
{
	char body[768], obj[400], extra[160] = ""; /* Retry-After, or a 401's challenges */
	char timing[160] = "";
	const char *rid = e->request_id;
	int blen;
	if (e->openai) {
		if (error_object(obj, sizeof(obj), e) < 0)
			obj[0] = '\0';
		blen = snprintf(body, sizeof(body), "{\"error\":%s%s%s%s}\n", obj,
				rid ? ",\"request_id\":\"" : "", rid ? rid : "", rid ? "\"" : "");
	} else {
		blen = snprintf(body, sizeof(body), "%d %s: %s%s%s%s\n", e->status,
				http_status_text(e->status), e->detail, rid ? " (request id " : "",
				rid ? rid : "", rid ? ")" : "");
	}
	/* left out whole when it does not fit: cut before its CRLF, it would swallow the next */
	if (e->timing && (size_t)snprintf(timing, sizeof(timing), "X-Accelnet-Timing: %s\r\n",
					  e->timing) >= sizeof(timing))
		timing[0] = '\0';
	if (blen < 0 || (size_t)blen >= sizeof(body))
		blen = (int)sizeof(body) - 1;
	if (e->retry_after_s)
		snprintf(extra, sizeof(extra), "Retry-After: %u\r\n", e->retry_after_s);
	else if (e->status == 401) /* the proxy answers 401 only for its own authentication */
		snprintf(extra, sizeof(extra), "%s%s",
			 e->challenges & REWRITE_CHALLENGE_BASIC
			     ? "WWW-Authenticate: Basic realm=\"accelnet\", charset=\"UTF-8\"\r\n"
			     : "",
			 e->challenges & REWRITE_CHALLENGE_BASIC &&
				 !(e->challenges & REWRITE_CHALLENGE_BEARER)
			     ? ""
			     : "WWW-Authenticate: Bearer realm=\"accelnet\"\r\n");
	int n = snprintf(
	    buf, cap,
	    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
	    "%s%s%s%s%s%sCache-Control: no-store\r\n%s\r\n%.*s",
	    e->status, http_status_text(e->status), e->openai ? "application/json" : "text/plain",
	    blen, rid ? "X-Request-Id: " : "", rid ? rid : "", rid ? "\r\n" : "", timing, extra,
	    e->more_headers ? e->more_headers : "", e->keep_alive ? "" : "Connection: close\r\n",
	    e->head_only ? 0 : blen, body);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int rewrite_continue(char *out, size_t cap)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	if (cap < sizeof(cont) - 1)
		return -1;
	memcpy(out, cont, sizeof(cont) - 1);
	return (int)(sizeof(cont) - 1);
}

int rewrite_chunk_size(char *out, size_t cap, uint64_t n)
{
	int len = snprintf(out, cap, "%llx\r\n", (unsigned long long)n);
	return len < 0 || (size_t)len >= cap ? -1 : len;
}

const char *rewrite_chunk_tail(int had_size)
{
	return had_size ? "\r\n0\r\n\r\n" : "0\r\n\r\n";
}

int rewrite_json(char *out, size_t cap, int status, const char *json, size_t len,
		 const char *request_id, int keep_alive)
{
	int n = snprintf(out, cap,
			 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: "
			 "%zu\r\n%s%s%sCache-Control: no-store\r\n%s\r\n",
			 status, http_status_text(status), len, request_id ? "X-Request-Id: " : "",
			 request_id ? request_id : "", request_id ? "\r\n" : "",
			 keep_alive ? "" : "Connection: close\r\n");
	if (n < 0 || (size_t)n >= cap || cap - (size_t)n < len)
		return -1;
	memcpy(out + n, json, len);
	return n + (int)len;
}
