/*
 * fresh.h - RFC 9111's decisions for a shared cache, as pure functions: may a response be
 * stored (section 3), how long it stays fresh and how old it is (4.2), and what a request may
 * be given from a stored response (4.2, 4.3, RFC 5861's stale-while-revalidate and
 * stale-if-error). Times are whole seconds of the wall clock (time(NULL)), passed in.
 *
 * What the RFC leaves to the cache, and what the route's configuration decides, is in
 * struct cache_rules; every deviation from a MUST or SHOULD is written where it is made
 * and listed in docs/cache.md.
 */
#ifndef ACCELNET_CACHE_FRESH_H
#define ACCELNET_CACHE_FRESH_H

#include "cache/control.h"
#include "http/parse.h"

#include <stdint.h>

/* What a route allows beyond the RFC's defaults (routes[].cache in the config). */
struct cache_rules {
	unsigned store_cookies : 1; /* a response with Set-Cookie may be stored (and replayed) */
	unsigned
	    store_authorized : 1;   /* answers to requests with Authorization, where 3.5 allows */
	unsigned authorization : 1; /* the client's request was credentialed (Authorization,
				       X-API-Key, an identity routes.auth proved, a client
				       certificate), though what the origin got may not say so */
	unsigned heuristic_pct;	 /* heuristic freshness: this % of (Date - Last-Modified); 0 off */
	int64_t heuristic_max_s; /* ... at most this long (<= 0: off too) */
	int64_t default_ttl_s;	 /* the lifetime of a 2xx/3xx without freshness; <= 0: off */
	int64_t stale_while_revalidate_s; /* used when the response gives none; CACHE_UNSET: none */
	int64_t stale_if_error_s;	  /* likewise */
};

/*
 * May the response <resp> (Cache-Control <rs>) to the request <req> (Cache-Control <rq>) be
 * stored? NULL: yes; else a few words saying why not (for logs and Cache-Status' detail).
 * Stored only: GET (and HEAD, whose stored response has no body: not stored here) answered
 * with a final status: 200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501 (heuristically
 * cacheable) or 302, 303, 307 (understood) as section 3 allows; any other final status
 * (500, 503 ...) only with explicit freshness (max-age, s-maxage, Expires); never 206 (we
 * store whole responses only) nor 304; without no-store in the request, nor in the response
 * unless must-understand is there with an understood status (5.2.2.3); not private; not
 * Vary: * (nor a Vary that is no list of field names, or names past 1 KiB); with explicit
 * freshness, public or a heuristically cacheable status (a validator alone is not enough:
 * section 3 does not list it); must-understand with a status not understood: not stored;
 * Set-Cookie and Authorization per <rules> (Authorization: only with public, s-maxage or
 * must-revalidate, 3.5). Reasons: "not GET", "status NNN", "no-store", "private",
 * "Vary: *", "Vary too long", "Authorization", "Set-Cookie", "no freshness".
 */
const char *cache_storable(const struct http_head *req, const struct cache_control *rq,
			   const struct http_head *resp, const struct cache_control *rs,
			   const struct cache_rules *rules);

/* How long a stored response stays fresh, and how old it was when it came (4.2.1, 4.2.3). */
struct cache_times {
	int64_t response_time;	       /* when its head came (the proxy's clock) */
	int64_t corrected_initial_age; /* its age then */
	int64_t lifetime;	       /* freshness lifetime; 0: stale at once */
	int64_t stale_while_revalidate,
	    stale_if_error;	      /* seconds past lifetime; CACHE_UNSET none */
	unsigned no_cache : 1;	      /* each use must be revalidated (no-cache) */
	unsigned must_revalidate : 1; /* never served stale (must-/proxy-revalidate, s-maxage) */
	unsigned heuristic : 1;	      /* the lifetime is a heuristic (Last-Modified) */
};

/* Work out <t> for the response <resp> (<rs>) whose request went out at <request_time> and
 * whose head came at <response_time>. */
void cache_times_compute(const struct http_head *resp, const struct cache_control *rs,
			 int64_t request_time, int64_t response_time,
			 const struct cache_rules *rules, struct cache_times *t);

/* Its current age at <now> (4.2.3): what the Age field of a hit says. */
int64_t cache_current_age(const struct cache_times *t, int64_t now);

/* What a request may be given from a stored response. */
enum cache_use {
	CACHE_USE_FRESH,      /* fresh enough for the request: a hit */
	CACHE_USE_STALE,      /* stale, but the request allows it (max-stale): a hit, stale */
	CACHE_USE_SWR,	      /* stale within stale-while-revalidate: serve, refresh behind */
	CACHE_USE_REVALIDATE, /* must be validated with the origin first (or fetched again) */
};

/* For a request with Cache-Control <rq> at <now>: fresh (min-fresh, max-age of the request
 * counted), acceptably stale, or to be revalidated (no-cache in request or response too).
 * Stale: never with must_revalidate; STALE within the request's max-stale; SWR within
 * stale_while_revalidate unless the request gave max-age or min-fresh without max-stale
 * (such a client does not want stale, RFC 9111 5.2.1.1). */
enum cache_use cache_decide_use(const struct cache_times *t, const struct cache_control *rq,
				int64_t now);

/* The origin failed (5xx, refused, timed out): may the stale response be served (RFC 5861
 * stale-if-error of the response, of the request, or the route's default: the largest of
 * the response's-or-default and the request's)? Never with must_revalidate or no_cache
 * (RFC 9111 4.2.4: an explicit directive forbids serving it unvalidated). */
int cache_stale_if_error_ok(const struct cache_times *t, const struct cache_control *rq,
			    int64_t now);

/* Parse an HTTP-date (IMF-fixdate, and the obsolete RFC 850 and asctime forms, RFC 9110
 * 5.6.7) into seconds since the epoch: 0, or -1 when it is not one. Strict: exact layout,
 * case-sensitive names, fields in range (day within its month), years 1970-9999; the day
 * name is not checked against the date. RFC 850's two-digit year is put within 50 years of
 * the clock (the one thing read from it). */
int cache_parse_http_date(struct http_str s, int64_t *out);
/* Write <t> as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", 29 bytes) and a NUL. */
void cache_format_http_date(int64_t t, char out[30]);

#endif
