/*
 * fuzz_cache_control.c - libFuzzer target: the cache's RFC 9111 decisions (cache/control.h,
 * fresh.h, cond.h, vary.h) on a request and a response made from the input (a response's
 * CDN-Cache-Control included: the corpus has one).
 *
 * Input: 16 bytes of knobs (method, status, times, rules, body size), then the request's
 * header lines, a NUL, the response's header lines ('\n' written out as CRLF). Every
 * function runs on them, and what each promises is checked: lifetimes and ages in [0, 2^31],
 * ranges inside the body, Vary names sorted and unique, any parsed date read back the same.
 */
#include "cache/cond.h"
#include "cache/control.h"
#include "cache/fresh.h"
#include "cache/vary.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t build(char *out, size_t cap, const char *first, const uint8_t *p, size_t n)
{
	size_t len = strlen(first);
	memcpy(out, first, len);
	for (size_t i = 0; i < n && len + 6 < cap; i++) {
		if (p[i] == '\n')
			out[len++] = '\r';
		out[len++] = (char)p[i];
	}
	memcpy(out + len, "\r\n\r\n", 4);
	return len + 4;
}

static uint64_t knob(const uint8_t *k, int at, int bytes)
{
	uint64_t v = 0;
	for (int i = 0; i < bytes; i++)
		v = v << 8 | k[at + i];
	return v;
}

static void check_date(struct http_str s)
{
	int64_t t, back;
	char out[30];
	if (cache_parse_http_date(s, &t) < 0)
		return;
	cache_format_http_date(t, out);
	if (cache_parse_http_date((struct http_str){out, 29}, &back) < 0 || back != t)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const methods[] = {"GET", "HEAD", "POST", "PUT"};
	static const int statuses[] = {200, 203, 204, 206, 300, 301, 302, 304,
				       307, 308, 404, 410, 418, 500, 503, 599};
	static char qbuf[8192], sbuf[8192], first[64];
	static struct http_head req, resp;
	if (size < 16)
		return 0;
	const uint8_t *k = data, *body = data + 16;
	size_t n = size - 16;
	const uint8_t *nul = memchr(body, 0, n);
	size_t qn = nul ? (size_t)(nul - body) : n;
	const uint8_t *sp = nul ? nul + 1 : body + n;
	size_t sn = nul ? n - qn - 1 : 0;

	snprintf(first, sizeof(first), "%s / HTTP/1.1\r\nHost: a\r\n", methods[k[0] & 3]);
	size_t ql = build(qbuf, sizeof(qbuf), first, body, qn);
	if (http_parse_request(qbuf, ql, sizeof(qbuf), &req) <= 0)
		return 0;
	snprintf(first, sizeof(first), "HTTP/1.1 %d X\r\n", statuses[k[1] & 15]);
	size_t sl = build(sbuf, sizeof(sbuf), first, sp, sn);
	if (http_parse_response(sbuf, sl, sizeof(sbuf), req.meth, &resp) <= 0)
		return 0;

	struct cache_control rq, rs;
	cache_control_parse(&req, 1, &rq);
	cache_control_parse(&resp, 0, &rs);
	struct cache_rules rules = {
	    .store_cookies = k[2] & 1,
	    .store_authorized = (k[2] >> 1) & 1,
	    .heuristic_pct = (unsigned)knob(k, 3, 4),
	    .heuristic_max_s = (int64_t)knob(k, 7, 1) * 1000 - 1000,
	    .stale_while_revalidate_s = (int64_t)(k[8] & 0x7f) - 1,
	    .stale_if_error_s = (int64_t)(k[9] & 0x7f) - 1,
	};
	(void)cache_storable(&req, &rq, &resp, &rs, &rules);

	/* times around the present, with the request up to ~18 hours either side */
	int64_t response_time = 1700000000 + (int64_t)knob(k, 10, 2) * 1000;
	int64_t request_time = response_time - ((int64_t)(int8_t)k[12]) * 256;
	int64_t now = response_time + (int64_t)knob(k, 13, 2) * (k[15] & 0x80 ? 100000 : 1);
	struct cache_times t;
	cache_times_compute(&resp, &rs, request_time, response_time, &rules, &t);
	if (t.lifetime < 0 || t.lifetime > CACHE_DELTA_MAX || t.corrected_initial_age < 0 ||
	    t.corrected_initial_age > CACHE_DELTA_MAX)
		abort();
	int64_t age = cache_current_age(&t, now);
	if (age < t.corrected_initial_age || age > CACHE_DELTA_MAX)
		abort();
	enum cache_use use = cache_decide_use(&t, &rq, now);
	if (use == CACHE_USE_FRESH && age >= t.lifetime)
		abort();
	if ((use == CACHE_USE_STALE || use == CACHE_USE_SWR) && t.must_revalidate)
		abort();
	(void)cache_stale_if_error_ok(&t, &rq, now);

	const struct http_header *etag = http_find_header(&resp, "etag");
	const struct http_header *lm = http_find_header(&resp, "last-modified");
	struct http_str e = etag ? etag->value : (struct http_str){0};
	struct http_str l = lm ? lm->value : (struct http_str){0};
	(void)cache_cond_not_modified(&req, e, l);
	uint64_t total = knob(k, 10, 6) >> (k[15] & 63), a = 0, b = 0;
	enum cache_range r = cache_range_of(&req, total, e, l, &a, &b);
	if (r == CACHE_RANGE_PART && (a > b || b >= total))
		abort();

	char names[256], values[512];
	size_t nl, vl;
	int v = cache_vary_names(&resp, names, sizeof(names), &nl);
	if (v == 0) {
		for (size_t i = 0, prev = 0, start = 0; i < nl; i++) {
			if (names[i] != '\n')
				continue;
			if (i == start)
				abort(); /* an empty name */
			if (start > 0) {
				size_t plen = start - 1 - prev, clen = i - start;
				int c =
				    memcmp(names + prev, names + start, plen < clen ? plen : clen);
				if (c > 0 || (c == 0 && plen >= clen))
					abort(); /* not sorted, or repeated */
			}
			prev = start;
			start = i + 1;
		}
		if (cache_vary_values(&req, names, nl, values, sizeof(values), &vl) == 0 &&
		    vl > sizeof(values))
			abort();
	}
	(void)cache_vary_names(&resp, names, 8, &nl);

	for (unsigned i = 0; i < req.nheaders; i++)
		check_date(req.headers[i].value);
	for (unsigned i = 0; i < resp.nheaders; i++)
		check_date(resp.headers[i].value);
	return 0;
}
