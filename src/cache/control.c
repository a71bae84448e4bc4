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
 */
#include "cache/control.h"

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

void cache_control_parse(const struct http_head *h, int is_request, struct cache_control *cc)
{
	*cc = (struct cache_control){
	    .max_age = CACHE_UNSET,
	    .s_maxage = CACHE_UNSET,
	    .max_stale = CACHE_UNSET,
	    .min_fresh = CACHE_UNSET,
	    .stale_while_revalidate = CACHE_UNSET,
	    .stale_if_error = CACHE_UNSET,
	};
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
}
