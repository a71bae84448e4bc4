/*
 * target.h - one normal spelling of a request target's path, so that the proxy routes,
 * guards, caches, logs and forwards the same string the backend will act on.
 *
 * A backend such as uvicorn (vLLM, SGLang) percent-decodes the path before routing, nginx
 * merges slashes, others resolve dot segments: "/v1/%63ompletions", "//v1/completions" and
 * "/x/../v1/completions" all mean "/v1/completions" to one of them. A proxy that matched
 * its routes on the raw bytes would let each spelling past a route's auth and limits. So
 * the path (the part of the target before '?') is brought to one form:
 *   - percent-encoded unreserved characters (RFC 3986 2.3: ALPHA DIGIT - . _ ~) decoded,
 *     every other escape kept with upper-case hex digits ("%c3" is "%C3");
 *   - runs of '/' merged into one, then "." and ".." segments resolved (RFC 3986 5.2.4; an
 *     encoded dot counts as a dot, "/a/.." is "/", "/a/." is "/a/");
 * and refused whatever the mode:
 *   - '/' and '\' encoded (%2F, %5C; a raw '\' too): a backend may or may not take them for
 *     separators, and no one spelling would be right for both;
 *   - encoded control bytes (%00-%1F, %7F), a '%' without two hex digits after it, and '#'
 *     anywhere in the target (a fragment is never part of a request, RFC 9112 3.2);
 *   - a ".." that would climb above the root.
 * The query is never rewritten (a backend reads it as it was sent), only checked for '#'.
 * Normalising only ever shortens a path, so it is done in place.
 */
#ifndef ACCELNET_HTTP_TARGET_H
#define ACCELNET_HTTP_TARGET_H

#include "http/parse.h"

#include <stddef.h>

enum http_target_mode {
	HTTP_TARGET_NORMALIZE, /* rewrite a target that is not normal */
	HTTP_TARGET_REFUSE,    /* refuse a target that is not normal */
};

/* The path is only the start of one (a purge's prefix): a last segment "." or ".." is not
 * resolved (it may be the start of ".well-known"), nor counted against the root. */
#define HTTP_TARGET_OPEN_END 1u

/*
 * Bring the target s[0..*len) (beginning with '/') to its normal form in place, *len set to
 * the new length (never longer). Returns 0 when it was normal already (nothing written), 1
 * when it was rewritten, or -EINVAL with a static text for the client in *why: a refusal
 * listed above, or in HTTP_TARGET_REFUSE mode any target that is not normal. A refused
 * target is left as it was.
 */
int http_target_normalize(char *s, size_t *len, enum http_target_mode mode, unsigned flags,
			  const char **why);

/*
 * Normalise the target of the request head <h>, parsed from buf[0..h->head_len), in the
 * buffer: the target keeps its end, the method and (absolute form) scheme and authority
 * move up behind it, and every string of <h> is kept pointing at its bytes. Returns how
 * many bytes now lead the head unused (0 when the target was normal): the caller drops them
 * from the front of its buffer, and h->head_len is already less by as many. -EINVAL with
 * *why as http_target_normalize(). "OPTIONS *" is left as it is.
 */
int http_target_normalize_head(char *buf, struct http_head *h, enum http_target_mode mode,
			       const char **why);

#endif
