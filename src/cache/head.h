/*
 * head.h - the head of a stored response, as the cache keeps and replays it.
 *
 * Kept: the status line (always "HTTP/1.1 ...") and the end-to-end fields of the origin's
 * response, each as "Name: value\r\n", in order. Left out: hop-by-hop fields (those named by
 * Connection too), framing (Content-Length, Transfer-Encoding: written anew for each answer,
 * from the stored body), Age (worked out for each answer), and the proxy's own fields
 * (X-Request-Id, X-Accelnet-Timing). No final empty line: each answer adds its own fields
 * and then ends the head.
 */
#ifndef ACCELNET_CACHE_HEAD_H
#define ACCELNET_CACHE_HEAD_H

#include "http/parse.h"

#include <stddef.h>

/* The stored form of <resp> into out[0..cap). Its length, or -1 when it does not fit. */
long cache_head_build(const struct http_head *resp, char *out, size_t cap);

/*
 * A 304 (or a HEAD's 200) <upd> answering a revalidation of the stored head old[0..olen):
 * the stored head with every field <upd> also has replaced by <upd>'s (RFC 9111 3.2), into
 * out[0..cap). Its length, or -1 when it does not fit.
 */
long cache_head_merge(const char *old, size_t olen, const struct http_head *upd, char *out,
		      size_t cap);

#endif
