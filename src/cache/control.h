/*
 * control.h - the Cache-Control field of a request or a response (RFC 9111 section 5.2),
 * every line of it read together, as plain flags and numbers for the decisions of fresh.h.
 *
 * Directive names are case-insensitive; an unknown directive is ignored (RFC 9111 5.2.3).
 * An argument may be a token or a quoted-string (max-age="60" is 60: 5.2 asks recipients to
 * take both). A delta-seconds directive with a malformed value (not digits, empty, missing,
 * an escape inside quotes, junk after it) is treated as the RFC asks of a shared cache: a
 * malformed max-age or s-maxage in a response makes it stale at once (0, 4.2.1), and so does
 * a malformed stale-while-revalidate or stale-if-error (0: no stale serving); a malformed
 * request directive is ignored. A value over 2^31 is taken as 2^31 (RFC 9111 1.2.2).
 * Duplicated directives: the first counts for numbers; flags add up. The qualified forms
 * no-cache="F" and private="F" are taken as their unqualified forms (a shared cache may do
 * that; it is the safe reading); every directive that restricts caching counts whatever its
 * argument, while public, must-understand and immutable count only bare. s-maxage is read
 * from responses only, max-stale and min-fresh from requests only.
 * A request without Cache-Control but with "Pragma: no-cache" gets no_cache (5.4).
 * A response's valid, non-empty CDN-Cache-Control (RFC 9213, the field targeted at caches
 * like this one) is read instead of its Cache-Control, and marks <targeted>.
 */
#ifndef ACCELNET_CACHE_CONTROL_H
#define ACCELNET_CACHE_CONTROL_H

#include "http/parse.h"

#include <stdint.h>

#define CACHE_UNSET (-1)	     /* a delta-seconds directive that was not given */
#define CACHE_DELTA_MAX 2147483648LL /* 2^31: the largest delta-seconds kept */

struct cache_control {
	/* seconds, or CACHE_UNSET; max_stale given without a value: CACHE_DELTA_MAX */
	int64_t max_age, s_maxage, max_stale, min_fresh;
	int64_t stale_while_revalidate, stale_if_error; /* RFC 5861 */
	unsigned no_store : 1, no_cache : 1, private_ : 1, public_ : 1;
	unsigned must_revalidate : 1, proxy_revalidate : 1, must_understand : 1;
	unsigned only_if_cached : 1, no_transform : 1, immutable : 1;
	unsigned present : 1;  /* some Cache-Control field was given */
	unsigned targeted : 1; /* read from CDN-Cache-Control (RFC 9213): Expires is ignored */
};

/* Read every Cache-Control field of <h> (and Pragma, for a request: <is_request>; and
 * CDN-Cache-Control, for a response). */
void cache_control_parse(const struct http_head *h, int is_request, struct cache_control *cc);

#endif
