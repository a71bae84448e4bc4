/*
 * h2head.c - an HTTP/2 request's header list written as an HTTP/1.1 head (see h2head.h).
 */
#include "http/h2head.h"
#include "http/grpc.h"
#include "http/grpc_web.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int put(struct h2head *hh, const char *s, size_t n)
{
	if (hh->len + n > hh->cap)
		return hh->err = -431;
	memcpy(hh->p + hh->len, s, n);
	hh->len += n;
	return 0;
}

/* No byte that would end or split an HTTP/1 line (nghttp2 checks too: this is the
 * writer's own guard, since the parser cannot tell a smuggled line from a real one). */
static int line_safe(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
			return 0;
	return 1;
}

static int method_bodyless(const char *m, size_t n)
{
	return (n == 3 && !memcmp(m, "GET", 3)) || (n == 4 && !memcmp(m, "HEAD", 4)) ||
	       (n == 6 && !memcmp(m, "DELETE", 6)) || (n == 7 && !memcmp(m, "OPTIONS", 7));
}

int h2head_begin(struct h2head *hh, char *p, size_t cap, const char *m, size_t mlen,
		 const char *path, size_t plen, const char *auth, size_t alen)
{
	*hh = (struct h2head){.p = p, .cap = cap};
	if (!m || !mlen || !path || !plen || !line_safe(m, mlen) || !line_safe(path, plen) ||
	    memchr(path, ' ', plen) || (auth && !line_safe(auth, alen)))
		return hh->err = -400;
	if (put(hh, m, mlen) || put(hh, " ", 1) || put(hh, path, plen) ||
	    put(hh, " HTTP/1.1\r\n", 11))
		return hh->err;
	if (auth && alen) {
		if (put(hh, "Host: ", 6) || put(hh, auth, alen) || put(hh, "\r\n", 2))
			return hh->err;
		hh->has_auth = 1;
	}
	hh->bodyless = method_bodyless(m, mlen);
	hh->line = 1;
	return 0;
}

int h2head_field(struct h2head *hh, const char *name, size_t nlen, const char *value, size_t vlen)
{
	if (hh->err)
		return hh->err;
	if (!line_safe(name, nlen) || !line_safe(value, vlen) || memchr(name, ':', nlen) ||
	    memchr(name, ' ', nlen) || !nlen)
		return hh->err = -400;
	if (nlen == 4 && !memcmp(name, "host", 4) && hh->has_auth)
		return 0; /* :authority names the host (RFC 9113 8.3.1) */
	if (hh->websocket && ((nlen == 17 && !memcmp(name, "sec-websocket-key", 17)) ||
			      (nlen == 7 && !memcmp(name, "upgrade", 7)) ||
			      (nlen == 10 && !memcmp(name, "connection", 10)) ||
			      (nlen == 14 && !memcmp(name, "content-length", 14))))
		return 0; /* the proxy's own (h2head_websocket) */
	if (nlen == 14 && !memcmp(name, "content-length", 14))
		hh->has_cl = 1;
	if (nlen == 6 && !memcmp(name, "cookie", 6) && hh->cookie) {
		/* joined with "; " into the one Cookie line (RFC 9113 8.2.3) */
		if (hh->len + 2 + vlen > hh->cap)
			return hh->err = -431;
		char *at = hh->p + hh->cookie_at;
		memmove(at + 2 + vlen, at, hh->len - hh->cookie_at);
		memcpy(at, "; ", 2);
		memcpy(at + 2, value, vlen);
		hh->len += 2 + vlen;
		hh->cookie_at += 2 + vlen;
		return 0;
	}
	if (put(hh, name, nlen) || put(hh, ": ", 2) || put(hh, value, vlen))
		return hh->err;
	if (nlen == 6 && !memcmp(name, "cookie", 6)) {
		hh->cookie = 1;
		hh->cookie_at = hh->len;
	}
	return put(hh, "\r\n", 2);
}

int h2head_websocket(struct h2head *hh, const char *key, size_t klen)
{
	if (hh->err)
		return hh->err;
	if (!hh->line || !line_safe(key, klen))
		return hh->err = -400;
	if (put(hh, "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: ", 60) ||
	    put(hh, key, klen) || put(hh, "\r\n", 2))
		return hh->err;
	hh->websocket = 1;
	return 0;
}

int h2head_end(struct h2head *hh, int end_stream)
{
	if (hh->err)
		return hh->err;
	if (!hh->line)
		return hh->err = -400;
	if (!hh->has_cl && !end_stream) {
		/* a body of no declared length: chunked to the backend, as DATA comes */
		if (put(hh, "Transfer-Encoding: chunked\r\n", 28))
			return hh->err;
	} else if (!hh->has_cl && end_stream && !hh->bodyless) {
		if (put(hh, "Content-Length: 0\r\n", 19))
			return hh->err;
	}
	if (put(hh, "\r\n", 2))
		return hh->err;
	return (int)hh->len;
}

int h2head_end_sized(struct h2head *hh, uint64_t length)
{
	char cl[48];
	int k = snprintf(cl, sizeof(cl), "Content-Length: %llu\r\n", (unsigned long long)length);
	if (hh->err)
		return hh->err;
	if (!hh->line)
		return hh->err = -400;
	if (!hh->has_cl && (length || !hh->bodyless) && put(hh, cl, (size_t)k))
		return hh->err;
	if (put(hh, "\r\n", 2))
		return hh->err;
	return (int)hh->len;
}

/* Fields a trailer may not carry, lower case (h2head.h). */
static const char *const trailer_refused[] = {
    "authorization",
    "connection",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "cookie",
    "expect",
    "forwarded",
    "host",
    "keep-alive",
    "max-forwards",
    "proxy-authorization",
    "proxy-connection",
    "set-cookie",
    "te",
    "trailer",
    "transfer-encoding",
    "traceparent",
    "tracestate",
    "upgrade",
    "x-real-ip",
    "x-request-id",
};

int h2head_unique_field(const char *name, size_t nlen)
{
	return (nlen == 12 && !memcmp(name, "x-request-id", 12)) ||
	       (nlen == 11 && !memcmp(name, "traceparent", 11));
}

/* The ASCII letters of the bytes packed in <x> lowered, every other byte as it is. */
static inline uint64_t lower_word(uint64_t x)
{
	const uint64_t high = 0x8080808080808080ull;
	uint64_t low7 = x & ~high;			/* each byte's low seven bits ... */
	uint64_t from_a = low7 + 0x3f3f3f3f3f3f3f3full; /* ... reach 0x80 from 'A' */
	uint64_t past_z = low7 + 0x2525252525252525ull; /* ... and from past 'Z' */
	return x | (from_a & ~past_z & ~x & high) >> 2; /* 0x20 on 'A'..'Z' alone */
}

void h2head_lower(char *dst, const char *src, size_t n)
{
	uint64_t x;
	size_t k = 0;
	for (; k + 8 <= n; k += 8) {
		memcpy(&x, src + k, 8);
		x = lower_word(x);
		memcpy(dst + k, &x, 8);
	}
	if (k == n)
		return;
	if (n >= 8) { /* the tail as the last eight bytes (those before it lowered again) */
		memcpy(&x, src + n - 8, 8);
		x = lower_word(x);
		memcpy(dst + n - 8, &x, 8);
		return;
	}
	if (n >= 4) { /* four to seven: two words of four, overlapping */
		uint32_t a, b;
		memcpy(&a, src, 4);
		memcpy(&b, src + n - 4, 4);
		a = (uint32_t)lower_word(a);
		b = (uint32_t)lower_word(b);
		memcpy(dst, &a, 4);
		memcpy(dst + n - 4, &b, 4);
		return;
	}
	for (; k < n; k++)
		dst[k] = src[k] >= 'A' && src[k] <= 'Z' ? (char)(src[k] + 32) : src[k];
}

int h2head_trailer_ok(const char *name, size_t nlen)
{
	char low[24];
	if (!nlen || name[0] == ':')
		return 0;
	if (nlen >= 12 && !strncasecmp(name, "x-forwarded-", 12))
		return 0;
	if (nlen >= sizeof(low))
		return 1;
	for (size_t i = 0; i < nlen; i++)
		low[i] = name[i] >= 'A' && name[i] <= 'Z' ? (char)(name[i] + 32) : name[i];
	low[nlen] = 0;
	for (size_t i = 0; i < sizeof(trailer_refused) / sizeof(trailer_refused[0]); i++)
		if (!strcmp(low, trailer_refused[i]))
			return 0;
	return 1;
}

int h2head_trailer_line(char *p, size_t cap, const char *name, size_t nlen, const char *value,
			size_t vlen)
{
	if (!nlen || nlen + vlen + 4 > cap || !line_safe(name, nlen) || !line_safe(value, vlen) ||
	    memchr(name, ':', nlen) || memchr(name, ' ', nlen))
		return -1;
	memcpy(p, name, nlen);
	memcpy(p + nlen, ": ", 2);
	memcpy(p + nlen + 2, value, vlen);
	memcpy(p + nlen + 2 + vlen, "\r\n", 2);
	return (int)(nlen + vlen + 4);
}

size_t h2head_trailer_fields(char *p, size_t len, struct h2head_field *out, size_t max)
{
	char *end = p + len;
	size_t n = 0;
	while (p < end && n < max) {
		char *eol = memchr(p, '\r', (size_t)(end - p));
		char *colon = eol ? memchr(p, ':', (size_t)(eol - p)) : NULL;
		if (!colon)
			break; /* the final CRLF */
		char *v = colon + 1, *ve = eol;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		for (char *c = p; c < colon; c++)
			*c = *c >= 'A' && *c <= 'Z' ? (char)(*c + 32) : *c;
		if (h2head_trailer_ok(p, (size_t)(colon - p)))
			out[n++] =
			    (struct h2head_field){p, v, (size_t)(colon - p), (size_t)(ve - v)};
		p = eol + 2;
	}
	return n;
}

static int chunked(const struct h2resp *r)
{
	return r->head_in && !r->has_cl && r->status != 204 && r->status != 304;
}

static int put_at(char *p, size_t cap, const char *s, size_t n)
{
	if (n > cap)
		return -1;
	memcpy(p, s, n);
	return (int)n;
}

/* Room in gRPC-Web's trailer message that only grpc-status may take ("grpc-status: N\r\n"
 * as h2head_trailer_line() writes it, before its space goes), so a backend's long metadata
 * ahead of it never pushes out the one field a client must have. */
#define WEB_STATUS_ROOM 32

/* A trailer field joins gRPC-Web's trailer message (r->web), if it may cross and fits. */
static int web_trailer(struct h2resp *r, const char *name, size_t nlen, const char *value,
		       size_t vlen)
{
	if (!chunked(r) || !h2head_trailer_ok(name, nlen))
		return 0;
	int status = nlen == 11 && !memcmp(name, "grpc-status", 11);
	size_t room = sizeof(r->web) - r->web_len;
	if (!status && !r->web_status)
		room = room > WEB_STATUS_ROOM ? room - WEB_STATUS_ROOM : 0;
	int k = h2head_trailer_line(r->web + r->web_len, room, name, nlen, value, vlen);
	if (k > 0) { /* "name:value" (RFC 9110's field line without the space) */
		memmove(r->web + r->web_len + nlen + 1, r->web + r->web_len + nlen + 2,
			(size_t)k - nlen - 2);
		r->web_len = (uint16_t)(r->web_len + k - 1);
		r->web_status |= (unsigned)status;
	}
	r->trailers = 1;
	return 0;
}

int h2resp_field(struct h2resp *r, char *p, size_t cap, const char *name, size_t nlen,
		 const char *value, size_t vlen)
{
	if (nlen == 7 && !memcmp(name, ":status", 7)) {
		int st = 0;
		for (size_t i = 0; i < vlen && i < 3; i++)
			st = st * 10 + (value[i] - '0');
		if (vlen != 3 || st < 100 || st > 599 || st == 101)
			return -1; /* no 101 over HTTP/2 (RFC 9113 8.6): never a tunnel */
		r->status = st;
		if (cap < 16)
			return -1;
		int k = snprintf(p, cap, "HTTP/1.1 %03d \r\n", st);
		return k > 0 && (size_t)k < cap ? k : -1;
	}
	if (nlen && name[0] == ':')
		return 0;
	int pre = 0;
	if (r->head_in && r->grpc_web)
		return web_trailer(r, name, nlen, value, vlen);
	if (!r->head_in && r->grpc_web && nlen == 12 && !memcmp(name, "content-type", 12) &&
	    http_grpc_is(value, vlen)) { /* application/grpc-web(-text), and the rest of it */
		const char *ct = r->grpc_web_text ? "content-type: application/grpc-web-text"
						  : "content-type: application/grpc-web";
		size_t n = strlen(ct);
		if (vlen + n + 4 > cap || !line_safe(value, vlen))
			return -1;
		memcpy(p, ct, n);
		memcpy(p + n, value + 16, vlen - 16);
		memcpy(p + n + vlen - 16, "\r\n", 2);
		r->web_text_body = r->grpc_web_text;
		return (int)(n + vlen - 16 + 2);
	}
	if (r->head_in) {
		if (!chunked(r) || !h2head_trailer_ok(name, nlen))
			return 0;
		if (!r->trailers) {
			if ((pre = put_at(p, cap, "0\r\n", 3)) < 0)
				return -1;
			r->trailers = 1;
		}
	} else if (nlen == 14 && !memcmp(name, "content-length", 14)) {
		if (r->grpc_web) /* the trailer message makes the body longer: it goes chunked */
			return 0;
		r->has_cl = 1;
	}
	int k = h2head_trailer_line(p + pre, cap - (size_t)pre, name, nlen, value, vlen);
	return k < 0 ? -1 : pre + k;
}

int h2resp_head_end(struct h2resp *r, char *p, size_t cap, int end_stream)
{
	if (!r->status)
		return -1;
	if (r->status < 200) {
		r->has_cl = 0;
		r->status = 0;
		return put_at(p, cap, "\r\n", 2); /* an interim: the final head follows */
	}
	r->head_in = 1;
	const char *framing = r->has_cl || r->status == 204 || r->status == 304 ? "\r\n"
			      : end_stream ? "Content-Length: 0\r\n\r\n"
					   : "Transfer-Encoding: chunked\r\n\r\n";
	if (end_stream)
		r->has_cl = 1; /* its length is said: no last chunk follows at h2resp_end() */
	return put_at(p, cap, framing, strlen(framing));
}

int h2resp_data_begin(const struct h2resp *r, char *p, size_t cap, size_t len)
{
	if (!chunked(r) || !len)
		return 0;
	if (cap < 20)
		return -1;
	int k = snprintf(p, cap, "%zx\r\n", len);
	return k > 0 && (size_t)k < cap ? k : -1;
}

int h2resp_data_end(const struct h2resp *r, char *p, size_t cap, size_t len)
{
	return chunked(r) && len ? put_at(p, cap, "\r\n", 2) : 0;
}

int h2resp_data_join(char *chunk, size_t *total, size_t len, const char *data, size_t add,
		     size_t cap)
{
	char size[24];
	size_t line = *total - len - 2;
	int k = snprintf(size, sizeof(size), "%zx\r\n", len + add);
	if (k <= 0 || (size_t)k < line || (size_t)k + len + add + 2 > cap)
		return -1;
	if ((size_t)k != line)
		memmove(chunk + k, chunk + line, len);
	memcpy(chunk, size, (size_t)k);
	memcpy(chunk + k + len, data, add);
	memcpy(chunk + k + len + add, "\r\n", 2);
	*total = (size_t)k + len + add + 2;
	return 0;
}

int h2resp_end(struct h2resp *r, char *p, size_t cap)
{
	if (!chunked(r))
		return 0;
	if (r->grpc_web && r->trailers) { /* 0x80, its length (big-endian), the fields */
		size_t n = r->web_len;
		unsigned char m[5 + sizeof(r->web)];
		m[0] = 0x80;
		m[1] = (unsigned char)(n >> 24), m[2] = (unsigned char)(n >> 16);
		m[3] = (unsigned char)(n >> 8), m[4] = (unsigned char)n;
		memcpy(m + 5, r->web, n);
		/* a text client's: base64, a run of its own (its padding ends it) */
		size_t len = r->web_text_body ? (n + 5 + 2) / 3 * 4 : n + 5;
		int k = snprintf(p, cap, "%zx\r\n", len);
		if (k <= 0 || (size_t)k + len + 7 > cap)
			return -1;
		if (r->web_text_body)
			grpc_web_b64(m, n + 5, p + k);
		else
			memcpy(p + k, m, n + 5);
		memcpy(p + k + len, "\r\n0\r\n\r\n", 7);
		return (int)((size_t)k + len + 7);
	}
	return r->trailers ? put_at(p, cap, "\r\n", 2) : put_at(p, cap, "0\r\n\r\n", 5);
}
