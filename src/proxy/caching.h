/*
 * caching.h - the response cache on the request path (routes[].cache): the exchange's side of
 * cache/ (the RFC 9111 decisions, the store).
 *
 *   stage "cache" (a head stage, after classify): a GET or HEAD is looked up under its key
 *     (route, scheme, host, target) and its Vary values; a fresh hit (or a stale one the
 *     request or stale-while-revalidate allows) will be answered from the store; a fill
 *     under way is waited on (coalescing: routes.cache.wait_ms for its head); a miss makes
 *     this exchange the filler of a new object, which others then wait on; a stored
 *     response that must be revalidated is kept (cstale) and the request to the backend
 *     made conditional. An unsafe method marks its target for invalidation. Requests the
 *     cache may not answer (Authorization, a body, only-if-cached) are decided here too.
 *   stage "cache serve" (after the body is read): an inference route's POST is looked up
 *     under its canonical JSON body; then an exchange with an object is answered from it by
 *     the codec (exchange_codec_ops.serve), or goes on to the backend (the fill failed or
 *     could not be used).
 *   the relay's hooks: the response head decides what the fill keeps (storable? its head,
 *     freshness, Vary), a 304 to a revalidation refreshes the stored response, a failure
 *     may be answered stale (stale-if-error); body bytes go into the fill as they go to the
 *     client (a chunked body's payload only); the end completes it.
 *
 * Waiting on a fill is cross-worker: the filling thread notifies the waiter (the store's
 * struct cache_wait, in the exchange), which goes into its worker's cache inbox; the
 * worker's loop wakes and runs it (caching_take_ready).
 */
#ifndef ACCELNET_PROXY_CACHING_H
#define ACCELNET_PROXY_CACHING_H

#include "proxy/exchange.h"

/* At most what a hit (proxy/hit.c) adds to a stored head: a 206's status line and
 * Content-Range, Content-Length, Age, Cache-Status, X-Request-Id, Connection. A head longer
 * than a client buffer less this is never stored: no hit could write it out. */
#define HIT_HEAD_EXTRA 512

/* What Cache-Status says of an answer (RFC 9211). */
enum cache_said {
	CS_NONE,      /* the route does not cache */
	CS_HIT,	      /* hit; ttl */
	CS_HIT_STALE, /* hit, stale (max-stale, stale-while-revalidate) */
	CS_STALE_ERR, /* hit, stale, the backend failed (stale-if-error) */
	CS_COLLAPSED, /* fwd=miss; collapsed: served from another request's fill */
	CS_MISS,      /* fwd=miss (stored, or why not) */
	CS_REVAL,     /* fwd=stale: revalidated (fwd-status=304, or a new response) */
	CS_BYPASS,    /* fwd=bypass: the request may not be answered from the cache */
	CS_METHOD,    /* fwd=method: an unsafe method (its target invalidated) */
	CS_REQUEST,   /* fwd=request: the request's Cache-Control asked for the origin */
	CS_PASS, /* fwd=uri-miss: its last response could not be stored (routes.cache.pass_s) */
};

/* How a hit is answered. */
enum hit_kind { HIT_FULL, HIT_HEAD, HIT_304, HIT_RANGE, HIT_416 };

enum run caching_stage_lookup(struct exchange *x);
enum run caching_stage_serve(struct exchange *x);

/* An inference route's POST body (<len> bytes at <body>) is in: its canonical key. */
void caching_note_body(struct exchange *x, const char *body, size_t len);

/*
 * The relay's hooks. caching_response_head: the backend's final head <h> (before it is
 * relayed); returns 1 when the exchange is to be answered from x->cobj instead (a 304 to
 * a revalidation, or stale-if-error): the upstream response is then dropped by the caller.
 * caching_response_body: body bytes p[0..n) as they are scanned; caching_response_done: the
 * response is whole.
 */
int caching_response_head(struct exchange *x, const struct http_head *h);
void caching_response_body(struct exchange *x, const char *p, size_t n);
void caching_response_done(struct exchange *x);
/* The proxy is about to answer <status> itself: 1 when stale-if-error lets the stored
 * response answer instead (x->cobj set). */
int caching_stale_on_error(struct exchange *x, int status);

/* Cache-Status (and Age) lines for a response of this exchange relayed from the backend
 * into out[0..cap): their length, 0 when none, -1 when they do not fit. */
int caching_status_lines(const struct exchange *x, char *out, size_t cap);
/* ... and for an answer from x->cobj (Age, Cache-Status). */
int caching_hit_lines(const struct exchange *x, char *out, size_t cap);

/* Wait for x->cobj to fill past <have> body bytes (UINT64_MAX: its head): 1 when it has,
 * 0 when the exchange will be woken. */
int caching_wait(struct exchange *x, uint64_t have);
/* A coalesced wait is given up (<why>, for Cache-Status): the exchange goes on to the
 * backend without the object. */
void caching_give_up(struct exchange *x, const char *why);
/* Does the filled object's Vary match the waiting request's values? */
int caching_vary_ok(const struct exchange *x);
/* The worker's loop woke: run the exchanges whose fills moved. */
void caching_take_ready(struct worker *w);

#endif
