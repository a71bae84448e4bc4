/*
 * control.c - Cache-Control read into struct cache_control (see control.h).
 *
 * One pass over each field value, by hand: an element is a token, optionally "=" and a token
 * or a quoted-string, then optional whitespace and a comma. Commas inside a quoted-string
 * (no-cache="Set-Cookie, Foo") do not end the element. Whatever does not fit that shape is
 * skipped up to the next comma outside quotes, and if its name is known the directive still
 * counts with a malformed argument: a directive that restricts caching (no-store, private,
 * must-revalidate ...) is obeyed whatever its argument, a delta-seconds directive with a
 * malformed argument is taken as control.h says, and a directive that widens caching
 * (public, must-understand, immutable) is believed only bare. Numbers saturate at 2^31 while
 * they are read, so no value, however long, overflows. Nothing is allocated or copied.
 *
 * CDN-Cache-Control (RFC 9213) is read in a response as a Structured Fields dictionary (RFC
 * 8941 3.2, its lines joined in order): keys, values (integer, decimal, string, token, byte
 * sequence, boolean, inner list) and parameters are checked as that grammar says, and a field
 * that breaks it anywhere, or holds more than TARGETED_MAX members, is not used at all. A
 * valid field with members replaces every Cache-Control line (and Expires, fresh.c) for this
 * cache. Its members then go through the same directive table: a key given twice counts
 * once, its last value (a dictionary's rule); ?0 is the directive not given; a numeric
 * directive must be an integer (a string, decimal or token there is malformed, taken as
 * above); parameters are skipped.
 */
#include "cache/control.h"

#include <string.h>

enum dir_kind {
	DIR_MAX_AGE,
	DIR_S_MAXAGE,
	DIR_MAX_STALE,
	DIR_MIN_FRESH,
	DIR_SWR,
	DIR_SIE,
	DIR_NO_STORE,
	DIR_NO_CACHE,
	DIR_PRIVATE,
	DIR_PUBLIC,
	DIR_MUST_REVALIDATE,
	DIR_PROXY_REVALIDATE,
	DIR_MUST_UNDERSTAND,
	DIR_ONLY_IF_CACHED,
	DIR_NO_TRANSFORM,
	DIR_IMMUTABLE,
	DIR_UNKNOWN,
};

static const struct {
	const char *name;
	enum dir_kind kind;
} directives[] = {
    {"max-age", DIR_MAX_AGE},
    {"s-maxage", DIR_S_MAXAGE},
    {"max-stale", DIR_MAX_STALE},
    {"min-fresh", DIR_MIN_FRESH},
    {"stale-while-revalidate", DIR_SWR},
    {"stale-if-error", DIR_SIE},
    {"no-store", DIR_NO_STORE},
    {"no-cache", DIR_NO_CACHE},
    {"private", DIR_PRIVATE},
    {"public", DIR_PUBLIC},
    {"must-revalidate", DIR_MUST_REVALIDATE},
    {"proxy-revalidate", DIR_PROXY_REVALIDATE},
    {"must-understand", DIR_MUST_UNDERSTAND},
    {"only-if-cached", DIR_ONLY_IF_CACHED},
    {"no-transform", DIR_NO_TRANSFORM},
    {"immutable", DIR_IMMUTABLE},
};

/* One element of the list: its name, its argument (quotes removed) and how it looked. */
struct directive {
	struct http_str name, arg;
	int has_arg;   /* "=" was there */
	int quoted;    /* the argument was a quoted-string */
	int malformed; /* anything off: no name, bad argument, junk after it */
};

static int is_ows(char c)
{
	return c == ' ' || c == '\t';
}

/* Read the element at *pp (after separators); 0 at the end of the value. */
static int next_directive(const char **pp, const char *end, struct directive *d)
{
	const char *p = *pp;
	while (p < end && (is_ows(*p) || *p == ','))
		p++;
	if (p == end) {
		*pp = p;
		return 0;
	}
	*d = (struct directive){0};
	const char *start = p;
	while (p < end && http_is_tchar((unsigned char)*p))
		p++;
	d->name.p = start;
	d->name.len = (uint32_t)(p - start);
	if (d->name.len == 0)
		d->malformed = 1;
	else if (p < end && *p == '=') {
		d->has_arg = 1;
		p++;
		if (p < end && *p == '"') {
			d->quoted = 1;
			const char *q = ++p;
			while (q < end && *q != '"') {
				if (*q == '\\') {
					d->malformed =
					    1; /* an escape is never needed in a known argument */
					if (q + 1 < end)
						q++;
				}
				q++;
			}
			d->arg.p = p;
			d->arg.len = (uint32_t)(q - p);
			if (q == end)
				d->malformed = 1; /* unterminated */
			p = q < end ? q + 1 : q;
		} else {
			const char *q = p;
			while (q < end && http_is_tchar((unsigned char)*q))
				q++;
			d->arg.p = p;
			d->arg.len = (uint32_t)(q - p);
			if (d->arg.len == 0)
				d->malformed = 1;
			p = q;
		}
	}
	while (p < end && is_ows(*p))
		p++;
	if (p < end && *p != ',') {
		d->malformed = 1;
		p = http_list_member_end(p, end);
	}
	*pp = p;
	return 1;
}

static enum dir_kind kind_of(struct http_str name)
{
	for (size_t i = 0; i < sizeof(directives) / sizeof(directives[0]); i++)
		if (http_str_eq(name, directives[i].name))
			return directives[i].kind;
	return DIR_UNKNOWN;
}

/* delta-seconds = 1*DIGIT, saturated at 2^31; -1 when it is not digits. */
static int64_t delta_seconds(const struct directive *d)
{
	if (d->malformed || !d->has_arg || d->arg.len == 0)
		return -1;
	int64_t v = 0;
	for (uint32_t i = 0; i < d->arg.len; i++) {
		char c = d->arg.p[i];
		if (c < '0' || c > '9')
			return -1;
		if (v < CACHE_DELTA_MAX)
			v = v * 10 + (c - '0');
	}
	return v < CACHE_DELTA_MAX ? v : CACHE_DELTA_MAX;
}

/*
 * A delta-seconds directive into *slot, the first occurrence only. A malformed one: 0 in a
 * response for max-age and s-maxage (stale at once, RFC 9111 4.2.1) and for the stale-*
 * extensions (no stale serving); ignored in a request, where a later good one may count.
 */
static void set_delta(int64_t *slot, const struct directive *d, int is_request, int is_max_stale)
{
	if (*slot != CACHE_UNSET)
		return;
	int64_t v = delta_seconds(d);
	if (v >= 0) {
		*slot = v;
		return;
	}
	if (is_max_stale && !d->has_arg && !d->malformed) {
		*slot = CACHE_DELTA_MAX; /* max-stale alone: any staleness */
		return;
	}
	if (!is_request)
		*slot = 0;
}

static void apply(struct cache_control *cc, const struct directive *d, int is_request)
{
	int bare = !d->has_arg && !d->malformed;
	switch (kind_of(d->name)) {
	case DIR_MAX_AGE:
		set_delta(&cc->max_age, d, is_request, 0);
		break;
	case DIR_S_MAXAGE:
		if (!is_request)
			set_delta(&cc->s_maxage, d, is_request, 0);
		break;
	case DIR_MAX_STALE:
		if (is_request)
			set_delta(&cc->max_stale, d, is_request, 1);
		break;
	case DIR_MIN_FRESH:
		if (is_request)
			set_delta(&cc->min_fresh, d, is_request, 0);
		break;
	case DIR_SWR:
		set_delta(&cc->stale_while_revalidate, d, is_request, 0);
		break;
	case DIR_SIE:
		set_delta(&cc->stale_if_error, d, is_request, 0);
		break;
	/* restrictive: obeyed whatever follows the name (no-cache="F", private="F" included) */
	case DIR_NO_STORE:
		cc->no_store = 1;
		break;
	case DIR_NO_CACHE:
		cc->no_cache = 1;
		break;
	case DIR_PRIVATE:
		cc->private_ = 1;
		break;
	case DIR_MUST_REVALIDATE:
		cc->must_revalidate = 1;
		break;
	case DIR_PROXY_REVALIDATE:
		cc->proxy_revalidate = 1;
		break;
	case DIR_ONLY_IF_CACHED:
		cc->only_if_cached = 1;
		break;
	case DIR_NO_TRANSFORM:
		cc->no_transform = 1;
		break;
	/* permissive: believed only as the RFC spells them */
	case DIR_PUBLIC:
		cc->public_ |= bare;
		break;
	case DIR_MUST_UNDERSTAND:
		cc->must_understand |= bare;
		break;
	case DIR_IMMUTABLE:
		cc->immutable |= bare;
		break;
	case DIR_UNKNOWN:
		break;
	}
}

/* --- CDN-Cache-Control: a Structured Fields dictionary (RFC 8941) --- */

#define TARGETED_MAX 64 /* members read; a field with more is not used */

static int is_lcalpha(char c)
{
	return c >= 'a' && c <= 'z';
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int is_alpha(char c)
{
	return is_lcalpha(c) || (c >= 'A' && c <= 'Z');
}

/* key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ): its end, or NULL. */
static const char *sf_key(const char *p, const char *end)
{
	if (p == end || !(is_lcalpha(*p) || *p == '*'))
		return NULL;
	for (p++; p < end; p++)
		if (!is_lcalpha(*p) && !is_digit(*p) && *p != '_' && *p != '-' && *p != '.' &&
		    *p != '*')
			break;
	return p;
}

/* A number: 1-15 digits, or a decimal of 1-12 digits "." 1-3 digits, after an optional
 * "-". Its end, or NULL; *integer says which (a non-negative integer, for directives). */
static const char *sf_number(const char *p, const char *end, int *integer)
{
	int neg = p < end && *p == '-';
	const char *q = p + neg, *digits = q;
	while (q < end && is_digit(*q))
		q++;
	size_t n = (size_t)(q - digits);
	*integer = 0;
	if (!n)
		return NULL;
	if (q == end || *q != '.') {
		*integer = !neg;
		return n <= 15 ? q : NULL;
	}
	const char *frac = ++q;
	while (q < end && is_digit(*q))
		q++;
	return n <= 12 && q > frac && q - frac <= 3 ? q : NULL;
}

/*
 * A bare item at <p> into <d>'s argument: its end, or NULL when it is none. A boolean sets
 * *truth (?1: 1, ?0: 0) and no argument; any item but an integer or a token is malformed
 * for a directive (directive arguments are integers or tokens, or flags).
 */
static const char *sf_bare_item(const char *p, const char *end, struct directive *d, int *truth)
{
	const char *q = p;
	int integer;
	*truth = 1;
	if (p == end)
		return NULL;
	if (*p == '-' || is_digit(*p)) {
		if (!(q = sf_number(p, end, &integer)))
			return NULL;
		d->malformed |= !integer;
	} else if (*p == '"') {
		for (q = p + 1; q < end && *q != '"'; q++) {
			if (*q == '\\' && q + 1 < end && (q[1] == '"' || q[1] == '\\'))
				q++;
			else if (*q == '\\' || *q < 0x20 || *q > 0x7e)
				return NULL;
		}
		if (q == end)
			return NULL;
		d->quoted = 1;
		d->malformed = 1;
		d->has_arg = 1;
		d->arg = (struct http_str){p + 1, (uint32_t)(q - p - 1)};
		return q + 1;
	} else if (is_alpha(*p) || *p == '*') {
		for (q = p + 1; q < end; q++)
			if (!http_is_tchar((unsigned char)*q) && *q != ':' && *q != '/')
				break;
	} else if (*p == ':') {
		for (q = p + 1; q < end && *q != ':'; q++)
			if (!is_alpha(*q) && !is_digit(*q) && *q != '+' && *q != '/' && *q != '=')
				return NULL;
		if (q == end)
			return NULL;
		d->malformed = 1;
		q++;
	} else if (*p == '?') {
		if (end - p < 2 || (p[1] != '0' && p[1] != '1'))
			return NULL;
		*truth = p[1] == '1';
		return p + 2;
	} else {
		return NULL;
	}
	d->has_arg = 1;
	d->arg = (struct http_str){p, (uint32_t)(q - p)};
	return q;
}

/* parameters = *( ";" *SP key [ "=" bare-item ] ): their end, or NULL. */
static const char *sf_params(const char *p, const char *end)
{
	struct directive scratch;
	int truth;
	while (p < end && *p == ';') {
		for (p++; p < end && *p == ' ';)
			p++;
		if (!(p = sf_key(p, end)))
			return NULL;
		if (p < end && *p == '=') {
			scratch = (struct directive){0};
			if (!(p = sf_bare_item(p + 1, end, &scratch, &truth)))
				return NULL;
		}
	}
	return p;
}

/* A member's value: an item with parameters, or an inner list "(" items ")" parameters. */
static const char *sf_value(const char *p, const char *end, struct directive *d, int *truth)
{
	struct directive scratch;
	int t;
	if (p == end || *p != '(') {
		p = sf_bare_item(p, end, d, truth);
		return p ? sf_params(p, end) : NULL;
	}
	d->has_arg = 1;
	d->malformed = 1; /* no directive takes a list */
	*truth = 1;
	p++;
	for (;;) {
		while (p < end && *p == ' ')
			p++;
		if (p == end)
			return NULL;
		if (*p == ')')
			return sf_params(p + 1, end);
		scratch = (struct directive){0};
		if (!(p = sf_bare_item(p, end, &scratch, &t)) || !(p = sf_params(p, end)))
			return NULL;
		if (p < end && *p != ' ' && *p != ')')
			return NULL;
	}
}

struct sf_member {
	struct directive d;
	int truth;
};

/*
 * The members of one dictionary field value <v> appended to m[*n..cap): 0, or -1 when <v>
 * is no dictionary or the members pass <cap>.
 */
static int sf_dict_read(struct http_str v, struct sf_member *m, size_t cap, size_t *n)
{
	const char *p = v.p, *end = v.p + v.len;
	while (p < end && *p == ' ')
		p++;
	while (end > p && end[-1] == ' ')
		end--;
	while (p < end) {
		if (*n == cap)
			return -1;
		struct sf_member *e = &m[(*n)++];
		const char *k = p;
		*e = (struct sf_member){.truth = 1};
		if (!(p = sf_key(p, end)))
			return -1;
		e->d.name = (struct http_str){k, (uint32_t)(p - k)};
		p = p < end && *p == '=' ? sf_value(p + 1, end, &e->d, &e->truth)
					 : sf_params(p, end);
		if (!p)
			return -1;
		while (p < end && is_ows(*p))
			p++;
		if (p == end)
			break;
		if (*p != ',')
			return -1;
		for (p++; p < end && is_ows(*p);)
			p++;
		if (p == end)
			return -1; /* a trailing comma */
	}
	return 0;
}

/* Nothing said: every age unset. */
static const struct cache_control cc_none = {
    .max_age = CACHE_UNSET,
    .s_maxage = CACHE_UNSET,
    .max_stale = CACHE_UNSET,
    .min_fresh = CACHE_UNSET,
    .stale_while_revalidate = CACHE_UNSET,
    .stale_if_error = CACHE_UNSET,
};

/* Read <h>'s CDN-Cache-Control into <cc> in place of Cache-Control when it is valid and
 * not empty. */
static void targeted_parse(const struct http_head *h, struct cache_control *cc)
{
	struct sf_member m[TARGETED_MAX];
	size_t n = 0;
	int seen = 0;
	for (unsigned i = 0; i < h->nheaders; i++) {
		const struct http_header *f = &h->headers[i];
		if (!http_str_eq(f->name, "cdn-cache-control"))
			continue;
		seen = 1;
		if (sf_dict_read(f->value, m, TARGETED_MAX, &n) < 0)
			return;
	}
	if (!seen || !n)
		return;
	*cc = cc_none;
	cc->present = cc->targeted = 1;
	for (size_t i = 0; i < n; i++) {
		size_t j = i + 1;
		while (j < n && !(m[j].d.name.len == m[i].d.name.len &&
				  memcmp(m[j].d.name.p, m[i].d.name.p, m[i].d.name.len) == 0))
			j++;
		if (j == n && m[i].truth) /* the last of its key, and not ?0 */
			apply(cc, &m[i].d, 0);
	}
}

void cache_control_parse(const struct http_head *h, int is_request, struct cache_control *cc)
{
	*cc = cc_none;
	for (unsigned i = 0; i < h->nheaders; i++) {
		const struct http_header *f = &h->headers[i];
		if (!http_str_eq(f->name, "cache-control"))
			continue;
		cc->present = 1;
		const char *p = f->value.p, *end = f->value.p + f->value.len;
		struct directive d;
		while (next_directive(&p, end, &d))
			if (d.name.len)
				apply(cc, &d, is_request);
	}
	if (is_request && !cc->present) {
		for (unsigned i = 0; i < h->nheaders; i++) {
			const struct http_header *f = &h->headers[i];
			if (http_str_eq(f->name, "pragma") &&
			    http_list_has(f->value, "no-cache", 8))
				cc->no_cache = 1;
		}
	}
	if (!is_request)
		targeted_parse(h, cc);
}
