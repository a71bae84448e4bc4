/*
 * refresh.h - stale-while-revalidate's background refresh: a request to the backend that no
 * client waits for, whose answer refills the cache (proxy/caching.h starts it); and the same
 * for the rest of a fill whose client went away (refresh_adopt).
 *
 * The first request that finds a stored response stale but within stale-while-revalidate is
 * answered from it at once and starts one refresh: the request it would have sent upstream
 * (its head, as the forward stage wrote it, with the stored response's validators), sent
 * to a backend of the route's pool that has a free slot (none free: no refresh; a later
 * request tries again), on an upstream connection of the worker's. The answer fills a new
 * object (cache/fill.h): a 304 refreshes the stored one's head and freshness, a storable 200
 * replaces it, one not storable marks the key pass (as for any fill), a 5xx or a failure
 * leaves it as it was. One deadline covers it: timeouts.first_byte_ms
 * from each sign of progress. A worker that ends drops its refreshes.
 */
#ifndef ACCELNET_PROXY_REFRESH_H
#define ACCELNET_PROXY_REFRESH_H

#include "cache/fill.h"
#include "core/buf.h"
#include "http/body.h"
#include "runtime/pool.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"

/*
 * Send the request head <req> (taken: freed when done) to a backend of <pool>, to fill
 * <fill> (a reference taken) and refresh <stale> (a reference taken; its refreshing flag is
 * cleared when the refresh fails), under the fill context <cfx>. 0, or -errno when it could
 * not start (no backend free, no memory): nothing is taken then.
 */
int refresh_start(struct worker *w, struct pool_rt *pool, struct buf *req, struct cache_obj *fill,
		  struct cache_obj *stale, const struct cache_fill_ctx *cfx);

/*
 * A fill whose client left (or was cut for not reading) goes on without it, as a refresh
 * does: the rest of the response is read at the backend's pace into <fill> (a reference
 * taken) on <up> (taken: its reads stopped, its input's bytes not yet scanned still there),
 * holding the slot of <be> in <pool> until the end, under the fill context <cfx>, the body
 * as <body> says it is so far (its ready bytes already in the fill). One deadline covers it:
 * timeouts.between_bytes_ms from each sign of progress. The fill completes at the body's end
 * and fails on any error. 0, or -ENOMEM: <up> is closed and the slot given back then, and
 * <fill> is the caller's to fail.
 */
int refresh_adopt(struct worker *w, struct pool_rt *pool, struct backend *be, struct upconn *up,
		  int reusable, const struct http_body *body, struct cache_obj *fill,
		  const struct cache_fill_ctx *cfx);

/* The worker ends: every refresh it runs is dropped. */
void refresh_drop_all(struct worker *w);

#endif
