/*
 * cond.c - If-None-Match, If-Modified-Since, Range and If-Range against a stored response
 * (see cond.h).
 *
 * Each field is read strictly and, when it is not what RFC 9110 says it is, the request gets
 * the full response: a malformed If-None-Match is never a 304 (and still hides
 * If-Modified-Since, as a present If-None-Match must), a malformed Range or If-Range is never
 * a 206 or a 416. Only the failures that the RFC itself makes errors are errors: a single
 * range that starts at or past the end, or a suffix of zero bytes, is 416. Entity-tags are
 * compared byte for byte with their quotes (opaque-tag), weakly (W/ ignored on both sides)
 * for If-None-Match and strongly (both must be strong) for If-Range. Range numbers that do
 * not fit 64 bits make the Range ignored rather than clamped. Nothing is allocated.
 */
#include "cache/cond.h"
#include "cache/fresh.h"

static int is_ows(char c)
{
	return c == ' ' || c == '\t';
}

/* entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE at *pp; the opaque-tag (quotes included). */
static int read_etag(const char **pp, const char *end, struct http_str *opaque, int *weak)
{
	const char *p = *pp;
	*weak = 0;
	if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
		*weak = 1;
		p += 2;
	}
	if (p == end || *p != '"')
		return -1;
	const char *q = p + 1;
	for (; q < end && *q != '"'; q++) {
		unsigned char c = (unsigned char)*q;
		if (c < 0x21 || c == 0x7f) /* etagc = %x21 / %x23-7E / obs-text */
			return -1;
	}
	if (q == end)
		return -1;
	opaque->p = p;
	opaque->len = (uint32_t)(q + 1 - p);
	*pp = q + 1;
	return 0;
}

/* A whole field value that is exactly one entity-tag. */
static int whole_etag(struct http_str v, struct http_str *opaque, int *weak)
{
	if (!v.p)
		return -1;
	const char *p = v.p, *end = v.p + v.len;
	return read_etag(&p, end, opaque, weak) == 0 && p == end ? 0 : -1;
}

static int same_opaque(struct http_str a, struct http_str b)
{
	return a.len == b.len && memcmp(a.p, b.p, a.len) == 0;
}

/*
 * The If-None-Match fields of <req> against the stored <etag>: 1 when one of their members
 * matches weakly (or is "*": the cache holds a representation), 0 when none does or when a
 * field is not a list of entity-tags.
 */
static int none_match_hits(const struct http_head *req, struct http_str etag)
{
	struct http_str stored = {0};
	int weak, have_stored = whole_etag(etag, &stored, &weak) == 0, hit = 0;
	for (unsigned i = 0; i < req->nheaders; i++) {
		const struct http_header *f = &req->headers[i];
		if (!http_str_eq(f->name, "if-none-match"))
			continue;
		const char *p = f->value.p, *end = f->value.p + f->value.len;
		int members = 0;
		for (;;) {
			while (p < end && (is_ows(*p) || *p == ','))
				p++;
			if (p == end)
				break;
			struct http_str tag;
			if (*p == '*') {
				p++;
				hit = 1;
			} else if (read_etag(&p, end, &tag, &weak) < 0) {
				return 0;
			} else if (have_stored && same_opaque(tag, stored)) {
				hit = 1;
			}
			members++;
			while (p < end && is_ows(*p))
				p++;
			if (p < end && *p != ',')
				return 0;
		}
		if (members == 0)
			return 0;
	}
	return hit;
}

int cache_cond_not_modified(const struct http_head *req, struct http_str etag,
			    struct http_str last_modified)
{
	if (req->meth != HTTP_GET && req->meth != HTTP_HEAD)
		return 0;
	if (http_find_header(req, "if-none-match"))
		return none_match_hits(req, etag);
	const struct http_header *ims = http_find_only_header(req, "if-modified-since");
	int64_t since, modified;
	if (!ims || !last_modified.p || cache_parse_http_date(ims->value, &since) < 0 ||
	    cache_parse_http_date(last_modified, &modified) < 0)
		return 0;
	return modified <= since;
}

/* 1*DIGIT at *pp into a uint64; -1 when there is none or it does not fit. */
static int read_u64(const char **pp, const char *end, uint64_t *out)
{
	const char *p = *pp;
	uint64_t v = 0;
	if (p == end || *p < '0' || *p > '9')
		return -1;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*pp = p;
	*out = v;
	return 0;
}

/* If-Range (13.1.5): 1 when it is absent or its validator still holds, 0 otherwise. */
static int if_range_holds(const struct http_head *req, struct http_str etag,
			  struct http_str last_modified)
{
	if (!http_find_header(req, "if-range"))
		return 1;
	const struct http_header *f = http_find_only_header(req, "if-range");
	if (!f || f->value.len == 0)
		return 0;
	struct http_str v = f->value, want, have;
	int weak_want, weak_have;
	if (v.p[0] == '"' || (v.len >= 2 && v.p[0] == 'W' && v.p[1] == '/'))
		return whole_etag(v, &want, &weak_want) == 0 &&
		       whole_etag(etag, &have, &weak_have) == 0 && !weak_want && !weak_have &&
		       same_opaque(want, have);
	int64_t date, modified;
	return last_modified.p && cache_parse_http_date(v, &date) == 0 &&
	       cache_parse_http_date(last_modified, &modified) == 0 && date == modified;
}

enum cache_range cache_range_of(const struct http_head *req, uint64_t total, struct http_str etag,
				struct http_str last_modified, uint64_t *first, uint64_t *last)
{
	if (req->meth != HTTP_GET || !http_find_header(req, "range"))
		return CACHE_RANGE_FULL;
	const struct http_header *f = http_find_only_header(req, "range");
	if (!f || f->value.len < 6 || strncasecmp(f->value.p, "bytes=", 6) != 0)
		return CACHE_RANGE_FULL;
	const char *p = f->value.p + 6, *end = f->value.p + f->value.len;
	uint64_t a = 0, b = 0;
	int specs = 0, suffix = 0, has_last = 0;
	for (;;) {
		while (p < end && (is_ows(*p) || *p == ','))
			p++;
		if (p == end)
			break;
		if (++specs > 1)
			return CACHE_RANGE_FULL; /* several ranges: the whole response instead */
		if (*p == '-') {
			p++;
			suffix = 1;
			if (read_u64(&p, end, &b) < 0)
				return CACHE_RANGE_FULL;
		} else {
			if (read_u64(&p, end, &a) < 0 || p == end || *p != '-')
				return CACHE_RANGE_FULL;
			p++;
			if (p < end && *p >= '0' && *p <= '9') {
				if (read_u64(&p, end, &b) < 0)
					return CACHE_RANGE_FULL;
				has_last = 1;
			}
		}
		while (p < end && is_ows(*p))
			p++;
		if (p < end && *p != ',')
			return CACHE_RANGE_FULL;
	}
	if (specs == 0 || (!suffix && has_last && b < a))
		return CACHE_RANGE_FULL;
	if (!if_range_holds(req, etag, last_modified))
		return CACHE_RANGE_FULL;
	if (suffix) {
		if (b == 0)
			return CACHE_RANGE_UNSATISFIABLE;
		if (total == 0)
			return CACHE_RANGE_FULL; /* no byte to send: the (empty) whole */
		*first = total - (b < total ? b : total);
		*last = total - 1;
		return CACHE_RANGE_PART;
	}
	if (a >= total)
		return CACHE_RANGE_UNSATISFIABLE;
	*first = a;
	*last = has_last && b < total - 1 ? b : total - 1;
	return CACHE_RANGE_PART;
}
