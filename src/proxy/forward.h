/*
 * forward.h - what a route, pool or backend changes in what goes upstream and back
 * (docs/forwarding.md; the config in conf/schema_forward.h): the path and Host
 * (routes.rewrite), the request and response fields (request_headers, response_headers,
 * with %{...} variables), and the pool's or backend's own credential (api_key_file).
 *
 * The stage "forward" (stages.c) asks forward_request() for the rewritten target and the
 * request fields before it writes the head; the client side (relay.c) asks forward_response()
 * before it writes a relayed response head, a cache hit (hit.c) before it writes the stored
 * one, and the proxy's own answer (h1.c) for its extra lines (forward_answer_headers()). Both
 * expand variables into the caller's scratch (no allocation). The credential is no part of that
 * head (x->uphead): the backend is picked after it is written, a retry or hedge may go to another
 * one, and the cache reads the head as the client's request. So each attempt sends the head with
 * its backend's credential line put before the blank line that ends it (forward_head_iov()).
 *
 * Its hook keeps the target as the client sent it and as forwarded, for the access log.
 */
#ifndef ACCELNET_PROXY_FORWARD_H
#define ACCELNET_PROXY_FORWARD_H

#include "conf/schema_forward.h"
#include "http/rewrite.h"
#include "obs/accesslog.h"
#include "proxy/exchange.h"
#include "proxy/xhooks.h"

#include <sys/uio.h>

extern const struct xhook forward_hook;

#define FORWARD_FIELDS_MAX (2 * FWD_HEADERS_MAX + 8)
#define FORWARD_TARGET_MAX 8192

/* The caller's room for one head's edits: fields, their expanded values, the target. */
struct forward_scratch {
	struct rewrite_field set[FORWARD_FIELDS_MAX], add[FORWARD_FIELDS_MAX];
	struct rewrite_edit edit;
	char values[8192];
	size_t used;
	char target[FORWARD_TARGET_MAX];
};

/*
 * Fill <info>'s path, host and edit for <x> (its route's rewrite and request_headers, its
 * pool's request_headers, the client's credentials dropped when the pool or a backend of it
 * holds a key). 0; or an HTTP status to answer (414: the rewritten target is too long; 502:
 * the rewrite made no path), logged.
 */
int forward_request(struct exchange *x, struct rewrite_request_info *info,
		    struct forward_scratch *s);

/* The response_headers edit of <x>'s route and pool, or NULL when neither has any. */
const struct rewrite_edit *forward_response(const struct exchange *x, struct forward_scratch *s);

/*
 * The header lines the proxy's own answer to <x> (401, 429, 502 ...) carries: <more> (whole
 * CRLF-ended lines, or NULL), then the set and add fields of its route's and pool's
 * response_headers, written into buf[0..cap). Returns <more> when there are none (or <x> is
 * NULL), or when they do not fit.
 */
const char *forward_answer_headers(const struct exchange *x, const char *more, char *buf,
				   size_t cap);

/*
 * Rewrite the path p[0..len) (no query) by <rw>: strip_prefix, then prefix, then the regex
 * (its first match replaced, $N its groups). Returns the new length in out[0..cap), or -1
 * when it does not fit, -2 when the result is no path (it must start with '/' and hold no
 * space, '?', '#' or control byte) or the regex ran past its bounds (backtracking).
 */
int forward_rewrite_path(const struct fwd_rewrite *rw, const char *p, size_t len, char *out,
			 size_t cap);

/* The credential line attempt on <be> sends ("Authorization: Bearer KEY\r\n"), its length in
 * *len; NULL: none. */
const char *forward_cred(const struct backend *be, size_t *len);

/* Bytes of the request head as attempt <a> sends it (x->uphead and its credential line). */
size_t forward_head_len(const struct exchange *x, const struct attempt *a);

/* What is left of that head from a->head_off, as up to 3 pieces in iov[]; their number. */
int forward_head_iov(const struct exchange *x, const struct attempt *a, struct iovec *iov);

/* The same for any head[0..end) and credential line cred[0..cl) (NULL: none), from <off>. */
int forward_iov(const char *head, size_t end, size_t off, const char *cred, size_t cl,
		struct iovec *iov);

/* The target as forwarded, when routes.rewrite changed it (cut to the access log's
 * ALOG_PATH_MAX, *cut set then); NULL: it went as the client sent it. */
const char *forward_target(const struct exchange *x, int *cut);

#endif
