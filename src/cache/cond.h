/*
 * cond.h - a client's conditional and range requests answered from a stored response
 * (RFC 9110 sections 13 and 14), as pure functions.
 *
 * If-None-Match (weak comparison, "*", lists) takes precedence over If-Modified-Since, which
 * is ignored when the former is present or the stored response has no Last-Modified; only
 * GET and HEAD get 304 here (an unsafe method is never answered from the cache).
 * Range: one "bytes=" range of a stored full 200 response -- first-last, first-, or a
 * suffix -last -- answered 206; If-Range (a strong ETag compared strongly, or an HTTP-date
 * equal to Last-Modified) turns a mismatch into the full response. Several ranges, other
 * units or a malformed Range (first > last, numbers past 64 bits, several Range fields) get
 * the full response (a server may ignore Range: 14.2); only GET has ranges (HEAD: full).
 * A range that starts at or past the end, or a suffix "-0", gets 416 (unsatisfiable,
 * 14.1.1); a last past the end is clamped; a suffix of an empty body gets the full (empty)
 * response, which no Content-Range can describe. If-Range with a date is compared to
 * Last-Modified for equality without checking that it is a strong validator (13.1.5 wants
 * it strong; the stored Date is not passed here).
 */
#ifndef ACCELNET_CACHE_COND_H
#define ACCELNET_CACHE_COND_H

#include "http/parse.h"

#include <stdint.h>

/* Should the request <req> be answered 304 Not Modified, given the stored response's ETag
 * and Last-Modified (each .p NULL when it has none)? 1 yes, 0 no (the full response). */
int cache_cond_not_modified(const struct http_head *req, struct http_str etag,
			    struct http_str last_modified);

enum cache_range {
	CACHE_RANGE_FULL,	   /* no (usable) Range: the whole response, 200 */
	CACHE_RANGE_PART,	   /* 206 with bytes *first..*last of <total> */
	CACHE_RANGE_UNSATISFIABLE, /* 416, with Content-Range: bytes * / total */
};

/* The Range of <req> against a stored body of <total> bytes whose validators are <etag> and
 * <last_modified>. */
enum cache_range cache_range_of(const struct http_head *req, uint64_t total, struct http_str etag,
				struct http_str last_modified, uint64_t *first, uint64_t *last);

#endif
