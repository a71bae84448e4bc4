/*
 * fill.h - turning a backend's response into a stored object: what the exchange that fetched
 * it (proxy/caching.c) and a background refresh (proxy/refresh.c) both do.
 *
 * A fill (cache_fill_begin) gets the response head: if RFC 9111 lets it be stored (fresh.h,
 * under the route's rules), its stored head (head.h), freshness, Vary names and the
 * request's values for them go in; if not, the key is marked pass for <pass_s> seconds
 * (store.h CACHE_PASS) so that its requests stop waiting on fills that will not be kept --
 * unless the request itself was the reason (it was credentialed, or said no-store): the fill
 * then just fails, and the key's other requests go on as before.
 * A credentialed request's answer is stored for its scope (who asked: the caller says, as a
 * few bytes) unless the origin marked it public: the scope is then a variant's value like a
 * Vary field's, under the name CACHE_SCOPE_FIELD, which no response's Vary can name (it is
 * no field-name), so a request of another scope -- or none -- never matches it.
 * Then body bytes as they come -- a chunked body's payload only, so a stored object is
 * always its plain bytes -- and the end. A 304 to a revalidation fills the object with the
 * stored response's head updated by the 304's fields (RFC 9111 4.3.4) and its body copied.
 */
#ifndef ACCELNET_CACHE_FILL_H
#define ACCELNET_CACHE_FILL_H

#include "cache/fresh.h"
#include "cache/store.h"
#include "http/chunked.h"
#include "http/parse.h"

#include <stdint.h>

/* The pseudo field a scoped answer varies on, and the most bytes of a scope. */
#define CACHE_SCOPE_FIELD "@scope"
#define CACHE_SCOPE_MAX 32

/* What a fill needs beyond the response: the route's rules, how long a key not storable is
 * passed, and when the request went out (wall seconds). */
struct cache_fill_ctx {
	struct cache_store *store;
	struct cache_rules rules;
	unsigned pass_s;
	int64_t request_time;
	uint32_t head_max;	/* the longest head kept (its fields as stored; 0: no limit but the
				   fill's own): a hit must be able to write it out whole */
	unsigned inference : 1; /* the request is an inference POST keyed by its body: stored
				   as a GET's answer would be */
	uint8_t scope_len;	/* a credentialed request's scope[0..scope_len); 0: none */
	char scope[CACHE_SCOPE_MAX];
	struct http_chunked ch; /* a chunked body's scanner, for the payload */
	enum http_framing framing;
	/* what the last cache_fill_bytes() took: all <n> bytes, or after a failure those before
	 * the payload run that failed (none of whose bytes went in), and the scanner as it was at
	 * that run's start (a relay that goes on with the bytes the fill did not take reads them
	 * from there) */
	size_t took;
	struct http_chunked at;
};

/*
 * The response head <h> to the request <req> (its head as sent upstream) for the fill <o>:
 * 1 when it is being stored; 0 when it is not (marked pass, or failed) and *why says why.
 * Either way the caller keeps its reference to <o>; after 0 it adds nothing more to it.
 */
int cache_fill_start(struct cache_fill_ctx *c, struct cache_obj *o, const struct http_head *h,
		     const struct http_head *req, const char **why);

/*
 * The 304 <h> answered the revalidation of <stale>: <o> is filled with <stale>'s head
 * merged with <h>'s fields, its freshness from that, and <stale>'s body, and ended. 0, or
 * -1 when it could not be (<o> failed), or when the merged head may not be kept for all that
 * <stale> answers (the 304 adds Set-Cookie, private, no-store..., or it answers a credentialed
 * request, not public, and <stale> is not of that request's scope): <stale> stays as it was.
 */
int cache_fill_304(struct cache_fill_ctx *c, struct cache_obj *o, struct cache_obj *stale,
		   const struct http_head *h);

/* Body bytes p[0..n) of the response (framing and all). 0, or -errno (the fill is then to be
 * ended, failed: -EFBIG too large, -EINVAL a malformed chunked body, -ENOMEM); c->took and
 * c->at say where it stopped. */
int cache_fill_bytes(struct cache_fill_ctx *c, struct cache_obj *o, const char *p, size_t n);

#endif
