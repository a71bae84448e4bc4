/*
 * head.c - building and updating stored heads (see head.h).
 */
#include "cache/head.h"
#include "http/rewrite.h"
#include "http/status.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

struct out {
	char *p;
	size_t len, cap;
	int overflow;
};

static void put(struct out *o, const char *p, size_t n)
{
	if (o->overflow || n > o->cap - o->len) {
		o->overflow = 1;
		return;
	}
	memcpy(o->p + o->len, p, n);
	o->len += n;
}

/* Is the field <name> of <h> one a stored head never keeps? */
static int left_out(const struct http_head *h, struct http_str name)
{
	return rewrite_is_hop_by_hop(h, name) || http_str_eq(name, "content-length") ||
	       http_str_eq(name, "transfer-encoding") || http_str_eq(name, "age") ||
	       http_str_eq(name, "x-request-id") || http_str_eq(name, "x-accelnet-timing") ||
	       http_str_eq(name, "trailer");
}

static void put_field(struct out *o, const struct http_header *f)
{
	put(o, f->name.p, f->name.len);
	put(o, ": ", 2);
	put(o, f->value.p, f->value.len);
	put(o, "\r\n", 2);
}

long cache_head_build(const struct http_head *resp, char *out, size_t cap)
{
	struct out o = {out, 0, cap, 0};
	char line[16];
	if (resp->status < 100 || resp->status > 999)
		return -1;
	snprintf(line, sizeof(line), "HTTP/1.1 %03d ", resp->status);
	put(&o, line, 13);
	if (resp->reason.len)
		put(&o, resp->reason.p, resp->reason.len);
	else
		put(&o, http_status_text(resp->status), strlen(http_status_text(resp->status)));
	put(&o, "\r\n", 2);
	for (unsigned i = 0; i < resp->nheaders; i++)
		if (!left_out(resp, resp->headers[i].name))
			put_field(&o, &resp->headers[i]);
	return o.overflow ? -1 : (long)o.len;
}

long cache_head_merge(const char *old, size_t olen, const struct http_head *upd, char *out,
		      size_t cap)
{
	struct out o = {out, 0, cap, 0};
	const char *p = old, *end = old + olen;
	int first = 1;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		size_t n = eol ? (size_t)(eol - p) + 1 : (size_t)(end - p);
		const char *colon = first ? NULL : memchr(p, ':', n);
		int replaced = 0;
		if (colon) {
			struct http_str name = {p, (uint32_t)(colon - p)};
			for (unsigned i = 0; i < upd->nheaders && !replaced; i++)
				replaced =
				    upd->headers[i].name.len == name.len &&
				    strncasecmp(upd->headers[i].name.p, name.p, name.len) == 0 &&
				    !left_out(upd, name);
		}
		if (!replaced)
			put(&o, p, n);
		first = 0;
		p += n;
	}
	for (unsigned i = 0; i < upd->nheaders; i++)
		if (!left_out(upd, upd->headers[i].name))
			put_field(&o, &upd->headers[i]);
	return o.overflow ? -1 : (long)o.len;
}
