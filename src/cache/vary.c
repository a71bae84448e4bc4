/*
 * vary.c - Vary's field names and a request's values for them (see vary.h).
 *
 * The names are kept sorted in the caller's buffer as they are read: each new one is looked
 * up by a scan of what is there and inserted in place, so a response with many names costs
 * O(names x buffer), bounded by the buffer the caller gives, and nothing is allocated. A Vary
 * member that is not a field-name (a quote, a space inside it, a byte outside tchar) makes
 * the response as uncacheable as "Vary: *": a secondary key we cannot read is never guessed.
 *
 * Values are normalised only where RFC 9111 4.1 lets two requests match: the lines of a field
 * are combined (RFC 9110 5.3) and the whitespace around the commas between members dropped,
 * members joined by ", ". A comma or whitespace inside a quoted-string is left alone, and
 * empty members are kept (as ""), so the mapping from a field's members to the bytes written
 * is one-to-one: two requests whose values differ in anything but that whitespace and line
 * splitting get different bytes. Case is kept: whether a value is case-insensitive is the
 * field's business, not the cache's.
 */
#include "cache/vary.h"

#include <errno.h>

static int is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static unsigned char lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* <name> (lower-cased as compared) against the stored lower-case entry e[0..elen). */
static int name_cmp(const char *name, size_t nlen, const char *e, size_t elen)
{
	size_t n = nlen < elen ? nlen : elen;
	for (size_t i = 0; i < n; i++) {
		int a = lower((unsigned char)name[i]), b = (unsigned char)e[i];
		if (a != b)
			return a - b;
	}
	return nlen < elen ? -1 : nlen > elen ? 1 : 0;
}

/* Insert name[0..nlen) into the sorted list out[0..*n); 0, or -ENOSPC. */
static int insert_name(char *out, size_t cap, size_t *n, const char *name, size_t nlen)
{
	size_t pos = 0;
	while (pos < *n) {
		const char *nl = memchr(out + pos, '\n', *n - pos);
		size_t elen = (size_t)(nl - (out + pos));
		int c = name_cmp(name, nlen, out + pos, elen);
		if (c == 0)
			return 0;
		if (c < 0)
			break;
		pos += elen + 1;
	}
	if (nlen + 1 > cap - *n)
		return -ENOSPC;
	memmove(out + pos + nlen + 1, out + pos, *n - pos);
	for (size_t i = 0; i < nlen; i++)
		out[pos + i] = (char)lower((unsigned char)name[i]);
	out[pos + nlen] = '\n';
	*n += nlen + 1;
	return 0;
}

int cache_vary_names(const struct http_head *resp, char *out, size_t cap, size_t *len)
{
	size_t n = 0;
	int full = 0;
	*len = 0;
	for (unsigned i = 0; i < resp->nheaders; i++) {
		const struct http_header *f = &resp->headers[i];
		if (!http_str_eq(f->name, "vary"))
			continue;
		const char *p = f->value.p, *end = f->value.p + f->value.len;
		for (;;) {
			while (p < end && (is_ows(*p) || *p == ','))
				p++;
			if (p == end)
				break;
			const char *start = p;
			while (p < end && http_is_tchar((unsigned char)*p))
				p++;
			size_t nlen = (size_t)(p - start);
			while (p < end && is_ows(*p))
				p++;
			if (nlen == 0 || (p < end && *p != ','))
				return 1; /* not a field-name: as bad as "*" */
			if (nlen == 1 && *start == '*')
				return 1;
			if (!full && insert_name(out, cap, &n, start, nlen) < 0)
				full = 1; /* keep reading: a later "*" still says 1 */
		}
	}
	if (full)
		return -ENOSPC;
	*len = n;
	return 0;
}

static int put(char *out, size_t cap, size_t *n, const char *s, size_t slen)
{
	if (slen > cap - *n)
		return -ENOSPC;
	memcpy(out + *n, s, slen);
	*n += slen;
	return 0;
}

/* One field line's value, its members trimmed and joined by ", ". */
static int put_value(char *out, size_t cap, size_t *n, struct http_str v)
{
	const char *p = v.p, *end = v.p + v.len;
	for (int first = 1;; first = 0) {
		while (p < end && is_ows(*p))
			p++;
		const char *s = p;
		p = http_list_member_end(p, end);
		const char *e = p;
		while (e > s && is_ows(e[-1]))
			e--;
		if ((!first && put(out, cap, n, ", ", 2) < 0) ||
		    put(out, cap, n, s, (size_t)(e - s)) < 0)
			return -ENOSPC;
		if (p == end)
			return 0;
		p++;
	}
}

int cache_vary_values(const struct http_head *req, const char *names, size_t nlen, char *out,
		      size_t cap, size_t *len)
{
	size_t n = 0;
	const char *p = names, *end = names + nlen;
	*len = 0;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		size_t name_len = (size_t)(e - p);
		int found = 0;
		for (unsigned i = 0; i < req->nheaders; i++) {
			const struct http_header *f = &req->headers[i];
			if (f->name.len != name_len || strncasecmp(f->name.p, p, name_len) != 0)
				continue;
			if (put(out, cap, &n, found ? ", " : "\2", found ? 2 : 1) < 0 ||
			    put_value(out, cap, &n, f->value) < 0)
				return -ENOSPC;
			found = 1;
		}
		if ((!found && put(out, cap, &n, "\1", 1) < 0) || put(out, cap, &n, "\n", 1) < 0)
			return -ENOSPC;
		p = e + (nl != NULL);
	}
	*len = n;
	return 0;
}
