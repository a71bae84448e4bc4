/*
 * target.c - the normal form of a request target (see target.h).
 *
 * Two passes over the path. The first only reads: it finds what must be refused, whether
 * the path is normal already (the common case, which then costs nothing more), and whether
 * a ".." would climb above the root, so that a refused target is never half rewritten. The
 * second writes the normal form over the path, segment by segment: the write position never
 * passes the read position, since every step writes at most the bytes it read (a run of
 * slashes becomes one, an escape one byte or itself). A segment is written first and judged
 * after, so that an encoded dot ("%2e") is a dot like any other; ".." takes the write
 * position back over the segment before it, which the first pass proved is there.
 */
#include "http/target.h"
#include "core/hex.h"

#include <errno.h>
#include <string.h>

/* RFC 3986 2.3: ALPHA DIGIT - . _ ~ */
static int is_unreserved(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

static char upper_hex(char c)
{
	return c >= 'a' && c <= 'f' ? (char)(c - 32) : c;
}

/* 1 for ".", 2 for "..", 0 for any other segment s[0..n) (already decoded). */
static int dot_segment(const char *s, size_t n)
{
	if (n == 1 && s[0] == '.')
		return 1;
	if (n == 2 && s[0] == '.' && s[1] == '.')
		return 2;
	return 0;
}

static int refuse(const char **why, const char *text)
{
	*why = text;
	return -EINVAL;
}

/*
 * The reading pass over the path s[0..plen): -EINVAL for what is refused in every mode, else
 * 0 when the path is normal, 1 when the writing pass would change it.
 */
static int path_check(const char *s, size_t plen, unsigned flags, const char **why)
{
	int changed = 0;
	size_t depth = 0, i = 0;
	while (i < plen) {
		size_t run = 0;
		while (i < plen && s[i] == '/')
			i++, run++;
		if (run > 1)
			changed = 1;
		char seg[2] = {0};
		size_t n = 0;
		while (i < plen && s[i] != '/') {
			int c = (unsigned char)s[i];
			if (c == '\\')
				return refuse(why, "a backslash in the request path");
			if (c == '%') {
				int hi = i + 2 < plen ? hex_value(s[i + 1]) : -1;
				int lo = i + 2 < plen ? hex_value(s[i + 2]) : -1;
				if (hi < 0 || lo < 0)
					return refuse(why, "a % without two hex digits in the "
							   "request path");
				c = hi << 4 | lo;
				if (c == '/' || c == '\\')
					return refuse(why,
						      "an encoded / or \\ in the request path");
				if (c < 0x20 || c == 0x7f)
					return refuse(why, "an encoded control byte in the request "
							   "path");
				if (is_unreserved(c) || s[i + 1] != upper_hex(s[i + 1]) ||
				    s[i + 2] != upper_hex(s[i + 2]))
					changed = 1;
				i += 3;
			} else {
				i++;
			}
			if (n < sizeof(seg))
				seg[n] = (char)c;
			n++;
		}
		if (!n || (i == plen && (flags & HTTP_TARGET_OPEN_END)))
			continue;
		int dot = dot_segment(seg, n);
		if (!dot) {
			depth++;
			continue;
		}
		changed = 1;
		if (dot == 2 && depth-- == 0)
			return refuse(why, "a .. above the root of the request path");
	}
	return changed;
}

/* The writing pass: the normal form of the path s[0..plen) over it; its new length. */
static size_t path_rewrite(char *s, size_t plen, unsigned flags)
{
	size_t o = 0, i = 0;
	while (i < plen) {
		while (i < plen && s[i] == '/')
			i++;
		if (!o || s[o - 1] != '/')
			s[o++] = '/';
		size_t seg = o;
		while (i < plen && s[i] != '/') {
			if (s[i] != '%') {
				s[o++] = s[i++];
				continue;
			}
			char hi = s[i + 1], lo = s[i + 2];
			int c = hex_value(hi) << 4 | hex_value(lo);
			i += 3;
			if (is_unreserved(c)) {
				s[o++] = (char)c;
			} else {
				s[o++] = '%';
				s[o++] = upper_hex(hi);
				s[o++] = upper_hex(lo);
			}
		}
		int dot = dot_segment(s + seg, o - seg);
		if (!dot || (i == plen && (flags & HTTP_TARGET_OPEN_END)))
			continue;
		o = seg; /* just after a '/' */
		if (dot == 2) {
			o--; /* on the '/' before "..", then back to the one before that segment */
			while (s[o - 1] != '/')
				o--;
		}
	}
	return o;
}

int http_target_normalize(char *s, size_t *len, enum http_target_mode mode, unsigned flags,
			  const char **why)
{
	size_t n = *len;
	if (!n || s[0] != '/')
		return refuse(why, "a request path must begin with /");
	if (memchr(s, '#', n))
		return refuse(why, "a # in the request target");
	const char *q = memchr(s, '?', n);
	size_t plen = q ? (size_t)(q - s) : n;
	int changed = path_check(s, plen, flags, why);
	if (changed <= 0)
		return changed;
	if (mode == HTTP_TARGET_REFUSE)
		return refuse(why, "a request path not in its normal form (limits.path: refuse)");
	size_t o = path_rewrite(s, plen, flags);
	memmove(s + o, s + plen, n - plen);
	*len = o + (n - plen);
	return 1;
}

int http_target_normalize_head(char *buf, struct http_head *h, enum http_target_mode mode,
			       const char **why)
{
	/* "OPTIONS *", and the "/" of an absolute-form target without a path (not in buf) */
	if (h->path.len < 2 || h->path.p[0] != '/')
		return 0;
	char *path = buf + (h->path.p - buf), *start = buf + (h->method.p - buf);
	size_t n = h->path.len;
	int rc = http_target_normalize(path, &n, mode, 0, why);
	if (rc <= 0 || n == h->path.len)
		return rc < 0 ? rc : 0;
	/* the path is a suffix of the target, and the target ends where it did */
	size_t shift = h->path.len - n;
	memmove(path + shift, path, n);
	memmove(start + shift, start, (size_t)(path - start));
	h->method.p += shift;
	h->target.p += shift;
	h->target.len -= (uint32_t)shift;
	h->path.p += shift;
	h->path.len = (uint32_t)n;
	size_t unused = (size_t)(start + shift - buf);
	h->head_len -= (uint32_t)unused;
	return (int)unused;
}
