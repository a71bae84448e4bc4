/*
 * apipath.c - the admin API's paths (see apipath.h).
 *
 * The path is cut at '?' and split on '/'; each segment is compared raw except POOL and
 * ADDRESS, which are percent-decoded into fixed buffers. Nothing is read past <len>.
 */
#include "control/apipath.h"

#include <string.h>

#define SEGMENTS_MAX 8

struct seg {
	const char *p;
	size_t n;
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decode <s> into out[APIPATH_SEGMENT_MAX]. 0, or 400 with <why>. */
static int decode(struct seg s, char *out, const char **why)
{
	size_t o = 0;
	for (size_t i = 0; i < s.n; i++) {
		unsigned char c = (unsigned char)s.p[i];
		if (c == '%') {
			int hi = i + 2 < s.n ? hexval(s.p[i + 1]) : -1;
			int lo = i + 2 < s.n ? hexval(s.p[i + 2]) : -1;
			if (hi < 0 || lo < 0) {
				*why = "a badly percent-encoded path segment";
				return 400;
			}
			c = (unsigned char)(hi * 16 + lo);
			i += 2;
		}
		if (c < ' ' || c == 0x7f || c == '/') {
			*why = "a path segment holds a control character or '/'";
			return 400;
		}
		if (o + 1 >= APIPATH_SEGMENT_MAX) {
			*why = "a path segment is too long";
			return 400;
		}
		out[o++] = (char)c;
	}
	if (!o) {
		*why = "an empty path segment";
		return 400;
	}
	out[o] = '\0';
	return 0;
}

static int seg_is(struct seg s, const char *lit)
{
	size_t n = strlen(lit);
	return s.n == n && memcmp(s.p, lit, n) == 0;
}

/* 0 when <meth> is one of <a>/<b> (HTTP_OTHER: none), else 405 with out->allow. */
static int method(enum http_method meth, enum http_method a, enum http_method b, const char *allow,
		  struct apipath *out, const char **why)
{
	if (meth == a || (b != HTTP_OTHER && meth == b))
		return 0;
	out->allow = allow;
	*why = "method not allowed";
	return 405;
}

/* POST .../backends/ADDRESS/ACTION */
static int action(struct seg s, struct apipath *out)
{
	static const struct {
		const char *name;
		enum apipath_call call;
	} actions[] = {{"drain", APIPATH_DRAIN},
		       {"enable", APIPATH_ENABLE},
		       {"disable", APIPATH_DISABLE},
		       {"remove", APIPATH_REMOVE}};
	for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
		if (seg_is(s, actions[i].name)) {
			out->call = actions[i].call;
			return 0;
		}
	return 404;
}

int apipath_parse(enum http_method meth, const char *path, size_t len, struct apipath *out,
		  const char **why)
{
	struct seg seg[SEGMENTS_MAX];
	size_t n = 0;
	const char *q = memchr(path, '?', len);
	if (q)
		len = (size_t)(q - path);
	memset(out, 0, sizeof(*out));
	*why = "no such admin API call (see docs/operations.md, \"Runtime admin API\")";
	if (len < 5 || memcmp(path, "/api/", 5) != 0)
		return 404;
	for (size_t i = 5, start = 5; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		if (n == SEGMENTS_MAX)
			return 404;
		seg[n++] = (struct seg){path + start, i - start};
		start = i + 1;
	}
	if (n == 1 && seg_is(seg[0], "backends")) {
		out->call = APIPATH_BACKENDS;
		return method(meth, HTTP_GET, HTTP_HEAD, "GET", out, why);
	}
	if (n == 1 && seg_is(seg[0], "maintenance")) {
		out->call = meth == HTTP_GET || meth == HTTP_HEAD ? APIPATH_MAINTENANCE_GET
								  : APIPATH_MAINTENANCE_SET;
		if (meth == HTTP_GET || meth == HTTP_HEAD)
			return 0;
		return method(meth, HTTP_POST, HTTP_PUT, "GET, POST, PUT", out, why);
	}
	if (n == 1 && seg_is(seg[0], "reload")) {
		out->call = APIPATH_RELOAD;
		return method(meth, HTTP_POST, HTTP_OTHER, "POST", out, why);
	}
	if (n == 2 && seg_is(seg[0], "cache") && seg_is(seg[1], "purge")) {
		out->call = APIPATH_PURGE;
		return method(meth, HTTP_POST, HTTP_OTHER, "POST", out, why);
	}
	if (n < 3 || n > 5 || !seg_is(seg[0], "pools") || !seg_is(seg[2], "backends"))
		return 404;
	int rc = decode(seg[1], out->pool, why);
	if (rc)
		return rc;
	if (n == 3) {
		out->call = APIPATH_ADD;
		return method(meth, HTTP_POST, HTTP_OTHER, "POST", out, why);
	}
	if ((rc = decode(seg[3], out->backend, why)))
		return rc;
	if (n == 5) {
		if (action(seg[4], out))
			return 404;
		return method(meth, HTTP_POST, HTTP_OTHER, "POST", out, why);
	}
	if (meth == HTTP_DELETE) {
		out->call = APIPATH_REMOVE;
		return 0;
	}
	out->call = APIPATH_CHANGE;
	return method(meth, HTTP_PATCH, HTTP_PUT, "PATCH, PUT, DELETE", out, why);
}
