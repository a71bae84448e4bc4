/*
 * purge.c - an admin purge's parameters, and which stored objects they mean (see purge.h).
 *
 * The parameters are checked as strictly as a request line would be: a host or target is
 * taken only with bytes a request's Host or target can hold (visible ASCII, no '#' in a
 * target, no '/', '?', '#' or userinfo in a host), since anything else could never match a
 * stored key and a purge that quietly matches nothing is worse than a clear 400. Values are
 * percent-decoded once; a target's own %XX is therefore written %25XX in a parameter. The
 * target is then brought to the normal form every request target is given before it is
 * keyed (http/target.h), so "/a%62c", "//abc" and "/abc" purge the one object the proxy
 * stored for all three, and a target it would refuse (%2F, "..") is refused here too; a
 * prefix's last segment is left open ("/a/." is the start of "/a/.well-known").
 *
 * Keys are split from their end: the target never holds a space (the request line is split
 * on spaces), so the last space-separated word is the target, or " POST" and the hash of an
 * inference body whose word before is the target; the host is what lies between the scheme
 * letter and the target (a Host with a space inside would still split right).
 */
#include "cache/purge.h"
#include "cache/key.h"
#include "cache/store.h"
#include "core/hex.h"
#include "http/target.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static int refuse(char *err, size_t errlen, const char *fmt,
							...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static unsigned char lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

static int same_nocase(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
			return 0;
	return 1;
}

static int is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static int is_visible(unsigned char c)
{
	return c > 0x20 && c < 0x7f;
}

/* s[0..n) percent-decoded into out[0..cap) (*olen bytes). 0, -EINVAL (a bad %XX), -ENOSPC. */
static int pct_decode(const char *s, size_t n, char *out, size_t cap, size_t *olen)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];
		if (c == '%') {
			int hi = i + 2 < n ? hex_value(s[i + 1]) : -1;
			int lo = i + 2 < n ? hex_value(s[i + 2]) : -1;
			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = hi << 4 | lo;
			i += 2;
		}
		if (len + 1 >= cap)
			return -ENOSPC;
		out[len++] = (char)c;
	}
	*olen = len;
	return 0;
}

/* Can s[0..n) be the printable part of a message (a parameter's name, at most 40 bytes)? */
static int quotable(const char *s, size_t n)
{
	if (n > 40)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!is_visible((unsigned char)s[i]) || s[i] == '"' || s[i] == '\\')
			return 0;
	return 1;
}

/* A host (from a URI's authority or host=) into p->host, lower-cased. 0 or -EINVAL. */
static int take_host(struct cache_purge *p, const char *h, size_t n, const char *what, char *err,
		     size_t errlen)
{
	if (!n)
		return refuse(err, errlen, "%s: the host is empty", what);
	if (n >= sizeof(p->host))
		return refuse(err, errlen, "%s: the host is longer than %d bytes", what,
			      CACHE_PURGE_MAX - 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)h[i];
		if (c == '@')
			return refuse(err, errlen,
				      "%s: no user@ before the host (a request's Host has none)",
				      what);
		if (!is_visible(c) || c == '/' || c == '?' || c == '#')
			return refuse(err, errlen,
				      "%s: the host may hold only visible ASCII, without / ? #",
				      what);
		p->host[i] = (char)lower(c);
	}
	p->host_len = n;
	return 0;
}

/*
 * The value of uri= or prefix= (decoded, in p->target[0..n)) split into p->host and p->target;
 * <host> (decoded host=, or NULL) for a value that is a path. 0 or -EINVAL.
 */
static int take_uri(struct cache_purge *p, size_t n, const char *host, size_t host_len, int prefix,
		    const char *what, char *err, size_t errlen)
{
	char *t = p->target;
	size_t skip = 0;
	if (n > 7 && same_nocase(t, "http://", 7))
		skip = 7;
	else if (n > 8 && same_nocase(t, "https://", 8))
		skip = 8;
	if (skip) {
		if (host)
			return refuse(err, errlen,
				      "%s: the host is given twice, in the URI and in host=", what);
		size_t a = skip;
		while (a < n && t[a] != '/' && t[a] != '?' && t[a] != '#')
			a++;
		int rc = take_host(p, t + skip, a - skip, what, err, errlen);
		if (rc < 0)
			return rc;
		if (a == n) {
			t[0] = '/'; /* http://host is http://host/ */
			n = 1;
		} else if (t[a] == '?') {
			t[0] = '/';
			memmove(t + 1, t + a, n - a);
			n = n - a + 1;
		} else {
			memmove(t, t + a, n - a);
			n -= a;
		}
	} else if (n && t[0] == '/') {
		if (!host)
			return refuse(err, errlen,
				      "%s: a path needs host=HOST (or give the whole URI, "
				      "http://HOST/PATH)",
				      what);
		int rc = take_host(p, host, host_len, "host", err, errlen);
		if (rc < 0)
			return rc;
	} else {
		return refuse(err, errlen,
			      "%s: expected http://HOST/PATH, https://HOST/PATH, or /PATH with "
			      "host=HOST",
			      what);
	}
	for (size_t i = 0; i < n; i++) {
		if (t[i] == '#')
			return refuse(err, errlen,
				      "%s: no fragment (#...): it never reaches the server", what);
		if (!is_visible((unsigned char)t[i]))
			return refuse(
			    err, errlen,
			    "%s: the target may hold only visible ASCII (percent-encode it "
			    "as clients send it, with %%25 for each %%)",
			    what);
	}
	const char *why = NULL;
	unsigned flags = prefix && !memchr(t, '?', n) ? HTTP_TARGET_OPEN_END : 0;
	if (http_target_normalize(t, &n, HTTP_TARGET_NORMALIZE, flags, &why) < 0)
		return refuse(err, errlen, "%s: %s (a request with it is refused)", what, why);
	p->target_len = n;
	return 0;
}

static int take_tag(struct cache_purge *p, char *err, size_t errlen)
{
	const char *t = p->tag;
	size_t n = p->tag_len;
	if (!n)
		return refuse(err, errlen, "tag: empty");
	if (is_ows(t[0]) || is_ows(t[n - 1]))
		return refuse(err, errlen, "tag: spaces around it (tags are trimmed in the field)");
	for (size_t i = 0; i < n; i++) {
		if (t[i] == ',')
			return refuse(err, errlen, "tag: one tag, without a comma");
		if (!is_visible((unsigned char)t[i]) && !is_ows(t[i]))
			return refuse(err, errlen, "tag: only visible ASCII, spaces and tabs");
	}
	return 0;
}

enum { P_URI, P_PREFIX, P_TAG, P_ALL, P_HOST, P_N };
static const char *const param_names[P_N] = {"uri", "prefix", "tag", "all", "host"};

int cache_purge_parse(struct cache_purge *p, const char *params, size_t len, char *err,
		      size_t errlen)
{
	const char *val[P_N] = {0};
	size_t vlen[P_N] = {0}, dlen;
	char host[CACHE_PURGE_MAX];
	unsigned seen = 0, kinds = 0;
	int kind = -1, rc;
	p->kind = 0;
	p->field = NULL;
	p->field_len = 0;
	p->host_len = p->target_len = p->tag_len = 0;
	for (size_t at = 0; at < len;) {
		const char *piece = params + at, *amp = memchr(piece, '&', len - at);
		size_t plen = amp ? (size_t)(amp - piece) : len - at;
		at += plen + 1;
		if (!plen)
			continue;
		const char *eq = memchr(piece, '=', plen);
		size_t nlen = eq ? (size_t)(eq - piece) : plen;
		int i = 0;
		while (i < P_N && !(strlen(param_names[i]) == nlen &&
				    memcmp(param_names[i], piece, nlen) == 0))
			i++;
		if (i == P_N) {
			if (quotable(piece, nlen))
				return refuse(
				    err, errlen,
				    "unknown parameter \"%.*s\": purge takes uri, prefix, "
				    "tag or all (and host); write an & inside a value as %%26",
				    (int)nlen, piece);
			return refuse(err, errlen,
				      "unknown parameter: purge takes uri, prefix, tag or all (and "
				      "host); write an & inside a value as %%26");
		}
		if (seen & 1u << i)
			return refuse(err, errlen, "%s is given twice", param_names[i]);
		seen |= 1u << i;
		val[i] = eq ? eq + 1 : piece + plen;
		vlen[i] = eq ? plen - nlen - 1 : 0;
		if (i != P_HOST) {
			kinds++;
			kind = i;
		}
	}
	if (!kinds)
		return refuse(err, errlen, "say what to purge: uri=, prefix=, tag= or all=1");
	if (kinds > 1)
		return refuse(err, errlen,
			      "one purge at a time: uri=, prefix=, tag= or all=1, not several");
	if ((seen & 1u << P_HOST) && kind != P_URI && kind != P_PREFIX)
		return refuse(err, errlen, "host= goes with a path in uri= or prefix=");

	const char *what = param_names[kind];
	size_t cap = kind == P_TAG ? sizeof(p->tag) : sizeof(p->target);
	char *out = kind == P_TAG ? p->tag : p->target;
	rc = pct_decode(val[kind], vlen[kind], out, cap, &dlen);
	if (rc == -ENOSPC)
		return refuse(err, errlen, "%s: longer than %d bytes", what, CACHE_PURGE_MAX - 1);
	if (rc < 0)
		return refuse(err, errlen,
			      "%s: bad percent-encoding (%% must be followed by two hex "
			      "digits; %%25 is a %%)",
			      what);
	switch (kind) {
	case P_ALL:
		if (dlen != 1 || out[0] != '1')
			return refuse(err, errlen,
				      "all=1 purges everything; nothing else is taken");
		p->kind = CACHE_PURGE_ALL;
		return 0;
	case P_TAG:
		p->tag_len = dlen;
		if ((rc = take_tag(p, err, errlen)) < 0)
			return rc;
		p->kind = CACHE_PURGE_TAG;
		return 0;
	default:
		if (!dlen)
			return refuse(err, errlen, "%s: empty", what);
		size_t hlen = 0;
		if (seen & 1u << P_HOST) {
			rc = pct_decode(val[P_HOST], vlen[P_HOST], host, sizeof(host), &hlen);
			if (rc == -ENOSPC)
				return refuse(err, errlen, "host: longer than %d bytes",
					      CACHE_PURGE_MAX - 1);
			if (rc < 0)
				return refuse(err, errlen, "host: bad percent-encoding");
		}
		rc = take_uri(p, dlen, seen & 1u << P_HOST ? host : NULL, hlen, kind == P_PREFIX,
			      what, err, errlen);
		if (rc < 0)
			return rc;
		p->kind = kind == P_URI ? CACHE_PURGE_URI : CACHE_PURGE_PREFIX;
		return 0;
	}
}

/* Does the list value v[0..n) have the member <tag>? */
static int list_has(const char *v, size_t n, const char *tag, size_t tlen)
{
	size_t at = 0;
	while (at <= n) {
		const char *comma = memchr(v + at, ',', n - at);
		size_t a = at, b = comma ? (size_t)(comma - v) : n;
		at = b + 1;
		while (a < b && is_ows(v[a]))
			a++;
		while (b > a && is_ows(v[b - 1]))
			b--;
		if (b - a == tlen && memcmp(v + a, tag, tlen) == 0)
			return 1;
	}
	return 0;
}

int cache_purge_head_has_tag(const char *head, size_t hlen, const char *field, size_t flen,
			     const char *tag, size_t tlen)
{
	const char *nl = memchr(head, '\n', hlen);
	if (!tlen || !nl)
		return 0; /* only the status line */
	for (size_t at = (size_t)(nl - head) + 1; at < hlen;) {
		const char *line = head + at;
		nl = memchr(line, '\n', hlen - at);
		size_t n = nl ? (size_t)(nl - line) : hlen - at;
		at += n + 1;
		if (n && line[n - 1] == '\r')
			n--;
		if (n <= flen || line[flen] != ':' || !same_nocase(line, field, flen))
			continue;
		if (list_has(line + flen + 1, n - flen - 1, tag, tlen))
			return 1;
	}
	return 0;
}

int cache_purge_test(const struct cache_purge *p, const char *key, size_t klen, const char *head,
		     size_t hlen)
{
	const char *host, *target;
	size_t hl, tl;
	switch (p->kind) {
	case CACHE_PURGE_ALL:
		return 1;
	case CACHE_PURGE_TAG:
		if (!head)
			return 0;
		if (!p->field)
			return cache_purge_head_has_tag(head, hlen, "Cache-Tag", 9, p->tag,
							p->tag_len);
		return cache_purge_head_has_tag(head, hlen, p->field, p->field_len, p->tag,
						p->tag_len);
	case CACHE_PURGE_URI:
	case CACHE_PURGE_PREFIX:
		if (cache_key_split(key, klen, &host, &hl, &target, &tl) < 0 || hl != p->host_len ||
		    memcmp(host, p->host, hl) != 0)
			return 0;
		if (p->kind == CACHE_PURGE_URI)
			return tl == p->target_len && memcmp(target, p->target, tl) == 0;
		return tl >= p->target_len && memcmp(target, p->target, p->target_len) == 0;
	}
	return 0;
}

int cache_purge_pred(void *arg, const struct cache_obj *o)
{
	const struct cache_purge *p = arg;
	const char *head = NULL;
	size_t hlen = 0;
	if (p->kind == CACHE_PURGE_TAG &&
	    atomic_load_explicit(&o->has_head, memory_order_acquire) && o->head) {
		head = o->head;
		hlen = o->head_len;
	}
	return cache_purge_test(p, o->key, o->key_len, head, hlen);
}
