/*
 * vary.h - secondary cache keys (RFC 9111 section 4.1): the request header fields a
 * response's Vary names, and the values a later request must have to be given it.
 *
 * Names are lower-cased, deduplicated and sorted, so "Accept-Encoding, accept-encoding"
 * and "Accept-Language, Accept-Encoding" in either order name one set. A request's values
 * for those names are normalised as 4.1 allows: every line of a field joined with ", ",
 * optional whitespace around commas and at the ends dropped; a field that is absent is
 * distinct from one that is present and empty. The results are byte strings the store
 * compares whole (never by hash alone: two requests that differ must never share an entry).
 */
#ifndef ACCELNET_CACHE_VARY_H
#define ACCELNET_CACHE_VARY_H

#include "http/parse.h"

#include <stddef.h>

/*
 * The field names the Vary fields of <resp> name, normalised, into out[0..cap) as
 * "name1\nname2\n" (*len bytes; "" when it has no Vary). Returns 0, 1 for "Vary: *" or a
 * Vary member that is not a field-name (a response never to be stored), or -ENOSPC when
 * they do not fit.
 */
int cache_vary_names(const struct http_head *resp, char *out, size_t cap, size_t *len);

/*
 * The values <req> has for the names <names>[0..nlen) (as cache_vary_names() wrote them),
 * normalised, into out[0..cap) (*len bytes): for each name in order, "\1" for absent or
 * "\2" VALUE, then "\n". 0, or -ENOSPC.
 */
int cache_vary_values(const struct http_head *req, const char *names, size_t nlen, char *out,
		      size_t cap, size_t *len);

#endif
