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
 *   the relay asks caching_response_head() whether the backend's head is answered from
 *     the cache instead (a 304 to a revalidation refreshes the stored response, a failure
 *     may be answered stale: stale-if-error) and what the fill keeps (storable? its head,
 *     freshness, Vary).
 *   its hooks (caching_hook, xhooks.h): the request body read before admission is keyed
 *     (an inference POST); response body bytes go into the fill as they are scanned (a
 *     chunked body's payload only), and the fill is offered to the codec as the client's
 *     source (xhooks_keep_body): the backend is then read at its own pace into the object,
 *     whatever the filler's client does, and that client reads the object as a waiter does;
 *     the whole response completes it; the end of the exchange lets go of what it holds of
 *     the cache -- a fill under way whose client went away goes on without it, to the end,
 *     on the same upstream connection and slot (refresh.h, refresh_adopt), else it fails --
 *     and counts what the cache did for it.
 *
 * Its context per exchange is struct caching_x, shared by caching.c and hit.c (the answer
 * from an object) alone: the other rooms ask through the functions below.
 *
 * Waiting on a fill is cross-worker: the filling thread notifies the waiter (the store's
 * struct cache_wait, in the context), which goes into its worker's cache inbox; the worker's
 * loop wakes and runs it (caching_take_ready).
 */
#ifndef ACCELNET_PROXY_CACHING_H
#define ACCELNET_PROXY_CACHING_H

#include "cache/fill.h"
#include "cache/store.h"
#include "proxy/exchange.h"
#include "proxy/xhooks.h"

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

/*
 * The backend's final head <h> (before it is relayed): 1 when the exchange is to be answered
 * from the cache instead (caching_answers(); a 304 to a revalidation, or stale-if-error):
 * the upstream response is then dropped by the caller.
 */
int caching_response_head(struct exchange *x, const struct http_head *h);
/* The proxy is about to answer <status> itself: 1 when stale-if-error lets the stored
 * response answer instead (caching_answers() set). */
int caching_stale_on_error(struct exchange *x, int status);

/* Cache-Status (and Age) lines for a response of this exchange relayed from the backend
 * into out[0..cap): their length, 0 when none, -1 when they do not fit. */
int caching_status_lines(const struct exchange *x, char *out, size_t cap);
/* ... and for an answer from the object (Age, Cache-Status). */
int caching_hit_lines(const struct exchange *x, char *out, size_t cap);

/* Wait for the object to fill past <have> body bytes (UINT64_MAX: its head): 1 when it has,
 * 0 when the exchange will be woken. */
int caching_wait(struct exchange *x, uint64_t have);
/* A coalesced wait is given up (<why>, for Cache-Status): the exchange goes on to the
 * backend without the object. */
void caching_give_up(struct exchange *x, const char *why);
/* Does the filled object's Vary match the waiting request's values? */
int caching_vary_ok(const struct exchange *x);
/* The worker's loop woke: run the exchanges whose fills moved. */
void caching_take_ready(struct worker *w);

/* The object the exchange is answered from (a hit, or a fill it waits on), or NULL. */
const struct cache_obj *caching_answers(const struct exchange *x);
/* ... a hit whose whole answer is stored (but a stale-while-revalidate one, whose refresh
 * goes to the backend): nothing goes upstream. */
int caching_hit_complete(const struct exchange *x);
/* Is the answer from the object not started yet (a coalesced wait for a fill's head)?
 * *until (unless NULL): when that wait ends (loop ms). */
int caching_hit_waiting(const struct exchange *x, uint64_t *until);
/* What Cache-Status says of the exchange (enum cache_said). */
unsigned caching_said(const struct exchange *x);
/*
 * A fill or a revalidation asks the backend for the whole response: the client's
 * conditionals and Range stay behind (the cache answers them), and a revalidation -- with a
 * fill or without (a HEAD, a no-store request) -- sends the stored response's validators
 * instead: a 304 must be about the stored copy, which then answers. Into f[0..4) the fields
 * to set (<etag> and <lm>, of <cap> bytes, hold the validators); returns how many (0 or 4).
 */
unsigned caching_forward_fields(const struct exchange *x, struct rewrite_field *f, char *etag,
				char *lm, size_t cap);

extern const struct xhook caching_hook;

/* What the cache keeps of an exchange: caching.c's and hit.c's alone. */
struct caching_x {
	struct cache_obj *cobj;	  /* answered from it: a hit, or a fill it waits on */
	struct cache_obj *cfill;  /* the object its response fills */
	struct cache_obj *cstale; /* the stored response it revalidates (304, stale-if-error) */
	struct cache_wait cwait;  /* waiting for cobj to fill further */
	int cinboxed; /* ... notified: on w->cache_inbox (under its lock; a word of its own: the
			 filling thread writes it) */
	unsigned cache_inval : 1;    /* an unsafe method: its target goes once answered */
	unsigned cstored : 1;	     /* its response is being stored */
	unsigned hit_started : 1;    /* the answer's head is queued */
	unsigned hit_chunked : 1;    /* ... its body chunked (the fill's length not known) */
	unsigned canon_temp : 2;     /* the body's temperature: 0 none, 1 zero, 2 other */
	unsigned swr : 1;	     /* a stale-while-revalidate hit that starts the refresh */
	unsigned hit_cond : 1;	     /* the client's conditional matches cstale: 304 once valid */
	unsigned cauthorization : 1; /* the client sent Authorization (RFC 9111 3.5) */
	uint8_t cstatus;	     /* what Cache-Status says (enum cache_said) */
	uint8_t hit_kind;	     /* how the object answers (enum hit_kind) */
	const char *cwhy;	     /* why its response was not stored, or NULL */
	uint64_t hit_pos, hit_end;   /* body bytes of the object sent, and where the answer ends */
	uint64_t hit_chunk_left;     /* of the chunk being sent (hit_chunked) */
	uint64_t hit_wait_until;     /* a wait for a fill's head ends (loop ms) */
	uint64_t canon[2];	     /* an inference body's canonical hash */
	struct cache_fill_ctx cfx;   /* its fill (cfill): rules, request time, chunked payload */
	/* its fill as the client's source (xhooks.h, struct xkeep): the object (referenced until
	 * the end, though the fill may end before the client has it all), the raw bytes taken
	 * since the codec last asked, and where the raw bytes resume should the fill stop */
	struct cache_obj *cfeed;
	size_t ctaken;
	struct http_chunked cresume;
	unsigned cstopped : 1;
};

extern size_t caching_ctx_off; /* where it lies in an exchange's block (xhooks_setup()) */

/* Its context of <x>, joined (xhooks.h): a route with a cache, from its lookup on. Any call
 * joins, so a caller that only reads (and may come before the lookup, or on a route without a
 * cache) takes caching_peek() instead: a needless join costs the exchange the cache's
 * req_body, resp_done and end hooks. */
static inline struct caching_x *caching_ctx(struct exchange *x)
{
	return xhooks_join(x, &caching_hook);
}

/* ... to read, joined or not (zeroes: no object, nothing said). */
static inline const struct caching_x *caching_peek(const struct exchange *x)
{
	return xhooks_peek(x, &caching_hook);
}

#endif
