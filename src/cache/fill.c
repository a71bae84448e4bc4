/*
 * fill.c - a backend's response into a stored object (see fill.h).
 */
#include "cache/fill.h"
#include "cache/control.h"
#include "cache/head.h"
#include "cache/vary.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#define STORED_HEAD_MAX 16384
#define VARY_MAX 1024
#define AGE_LINES_MAX 256

/* Room for a stored head: <cap>, or less where the context says so. */
static size_t head_cap(const struct cache_fill_ctx *c, size_t cap)
{
	return c->head_max && c->head_max < cap ? c->head_max : cap;
}

/* A credentialed request's answer, not public: its scope goes into the variant's names and
 * values, after the response's own Vary (the store compares them in the object's order). */
static int add_scope(const struct cache_fill_ctx *c, char *names, size_t ncap, size_t *nlen,
		     char *values, size_t vcap, size_t *vlen)
{
	static const char name[] = CACHE_SCOPE_FIELD "\n";
	if (*nlen + sizeof(name) - 1 > ncap || *vlen + c->scope_len + 2 > vcap)
		return -ENOSPC;
	memcpy(names + *nlen, name, sizeof(name) - 1);
	*nlen += sizeof(name) - 1;
	values[(*vlen)++] = '\2';
	memcpy(values + *vlen, c->scope, c->scope_len);
	*vlen += c->scope_len;
	values[(*vlen)++] = '\n';
	return 0;
}

int cache_fill_start(struct cache_fill_ctx *c, struct cache_obj *o, const struct http_head *h,
		     const struct http_head *req, const char **why)
{
	struct cache_control rq, rs;
	struct http_head as_get;
	int64_t now = (int64_t)time(NULL);
	if (c->inference && req->meth == HTTP_POST) {
		/* its body is in its key: RFC 9111's rules for a GET apply to it */
		memcpy(&as_get, req, sizeof(as_get));
		as_get.meth = HTTP_GET;
		req = &as_get;
	}
	cache_control_parse(req, 1, &rq);
	cache_control_parse(h, 0, &rs);
	if ((*why = cache_storable(req, &rq, h, &rs, &c->rules))) {
		/* a credentialed request (or one with no-store) says nothing of the answers other
		 * requests for the key get: no pass marker, which would send them all past the
		 * cache for pass_s (and let one client keep any key from being cached) */
		if (rq.no_store || c->rules.authorization || http_find_header(req, "authorization"))
			cache_fill_end(c->store, o, 0);
		else
			cache_fill_pass(c->store, o, now + (int64_t)c->pass_s);
		return 0;
	}
	char head[STORED_HEAD_MAX], vary[VARY_MAX], values[VARY_MAX];
	size_t vlen = 0, vvlen = 0;
	long hlen = cache_head_build(h, head, head_cap(c, sizeof(head)) - 40); /* room for a Date */
	if (hlen >= 0 && !http_find_header(h, "date")) {
		/* RFC 9110 6.6.1: a response kept without a Date gets the time it came */
		memcpy(head + hlen, "Date: ", 6);
		cache_format_http_date(now, head + hlen + 6);
		memcpy(head + hlen + 35, "\r\n", 2);
		hlen += 37;
	}
	if (hlen < 0 || cache_vary_names(h, vary, sizeof(vary), &vlen) != 0 ||
	    (vlen && cache_vary_values(req, vary, vlen, values, sizeof(values), &vvlen) < 0) ||
	    (c->scope_len && !rs.public_ &&
	     add_scope(c, vary, sizeof(vary), &vlen, values, sizeof(values), &vvlen) < 0)) {
		*why = "head too large";
		cache_fill_end(c->store, o, 0);
		return 0;
	}
	struct cache_times t;
	cache_times_compute(h, &rs, c->request_time, now, &c->rules, &t);
	uint64_t total = h->framing == HTTP_BODY_LENGTH ? h->content_length
			 : h->framing == HTTP_BODY_NONE ? 0
							: UINT64_MAX;
	int err = cache_fill_head(c->store, o, head, (size_t)hlen, h->status, &t, vary, vlen,
				  values, vvlen, total);
	if (err) {
		*why = err == -EFBIG ? "too large" : "out of memory";
		cache_fill_end(c->store, o, 0);
		return 0;
	}
	c->framing = h->framing;
	http_chunked_init(&c->ch);
	return 1;
}

/* May the merged head <m> (Cache-Control <cc>) be kept for whoever <stale> answers? What the
 * 304 added is judged as a 200's would be (Set-Cookie, private, no-store, Vary: *, the rules
 * of a credentialed request), and a credentialed request's answer that is not public goes
 * only into a copy of its own scope: a 304 to one client never rewrites everyone's copy with
 * that client's fields. */
static int merged_storable(const struct cache_fill_ctx *c, const struct cache_obj *stale,
			   const struct http_head *m, const struct cache_control *cc)
{
	static const char scope[] = CACHE_SCOPE_FIELD "\n"; /* last when there (add_scope) */
	const size_t n = sizeof(scope) - 1;
	struct http_head get;
	struct cache_control rq;
	memset(&get, 0, sizeof(get));
	get.meth = HTTP_GET;
	cache_control_parse(&get, 1, &rq);
	if (cache_storable(&get, &rq, m, cc, &c->rules))
		return 0;
	int scoped =
	    stale->vary_len >= n && memcmp(stale->vary + stale->vary_len - n, scope, n) == 0;
	return !c->scope_len || cc->public_ || scoped;
}

int cache_fill_304(struct cache_fill_ctx *c, struct cache_obj *o, struct cache_obj *stale,
		   const struct http_head *h)
{
	char head[STORED_HEAD_MAX + AGE_LINES_MAX + 2];
	long hlen =
	    cache_head_merge(stale->head, stale->head_len, h, head, head_cap(c, STORED_HEAD_MAX));
	struct http_head merged;
	if (hlen < 0)
		goto fail;
	/* its freshness from the merged head: the 304's fields, the stored ones for the rest;
	 * and its age from the 304's Age (4.3.4, 4.2.3), which the stored head never keeps:
	 * put after it for the parse alone (every copy: a repeated Age is believed in none) */
	size_t plen = (size_t)hlen;
	for (unsigned i = 0; i < h->nheaders; i++) {
		const struct http_header *f = &h->headers[i];
		if (!http_str_eq(f->name, "age"))
			continue;
		if (plen + 7 + f->value.len > (size_t)hlen + AGE_LINES_MAX)
			goto fail;
		memcpy(head + plen, "Age: ", 5);
		memcpy(head + plen + 5, f->value.p, f->value.len);
		memcpy(head + plen + 5 + f->value.len, "\r\n", 2);
		plen += 7 + f->value.len;
	}
	memcpy(head + plen, "\r\n", 2);
	if (http_parse_response(head, plen + 2, sizeof(head), HTTP_GET, &merged) <= 0)
		goto fail;
	struct cache_control cc;
	struct cache_times t;
	cache_control_parse(&merged, 0, &cc);
	if (!merged_storable(c, stale, &merged, &cc))
		goto fail;
	cache_times_compute(&merged, &cc, c->request_time, (int64_t)time(NULL), &c->rules, &t);
	uint64_t left = cache_obj_body_len(stale);
	if (cache_fill_head(c->store, o, head, (size_t)hlen, stale->status, &t, stale->vary,
			    stale->vary_len, stale->vary_values, stale->vary_values_len, left) < 0)
		goto fail;
	for (const struct cache_seg *g = cache_obj_body(stale); g && left; g = g->next) {
		size_t k = g->len < left ? g->len : (size_t)left;
		if (cache_fill_body(c->store, o, g->data, k) < 0)
			goto fail;
		left -= k;
	}
	cache_fill_end(c->store, o, 1);
	return 0;
fail:
	cache_fill_end(c->store, o, 0);
	return -1;
}

int cache_fill_bytes(struct cache_fill_ctx *c, struct cache_obj *o, const char *p, size_t n)
{
	c->took = 0;
	c->at = c->ch;
	if (c->framing != HTTP_BODY_CHUNKED) {
		int err = cache_fill_body(c->store, o, p, n);
		c->took = err ? 0 : n;
		return err;
	}
	size_t all = n;
	while (n) {
		int data;
		struct http_chunked before = c->ch;
		ssize_t k = http_chunked_scan(&c->ch, p, n, &data);
		if (k <= 0 && !http_chunked_done(&c->ch))
			return -EINVAL;
		if (k <= 0)
			break;
		if (data) {
			int err = cache_fill_body(c->store, o, p, (size_t)k);
			if (err) {
				c->at = before; /* the run's bytes are the caller's again */
				return err;
			}
		}
		p += k;
		n -= (size_t)k;
		c->took += (size_t)k;
	}
	c->took = all;
	c->at = c->ch;
	return 0;
}
