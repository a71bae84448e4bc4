/*
 * up_h1.h - the HTTP/1 upstream half of an exchange: writing the rewritten request head and
 * the request body to the backend, reading its response head (interims, a 101, the cache's
 * answer in its place, the final head), and reading and scanning its response body.
 *
 * It works on the exchange and its current attempt (attempt.h) alone, whatever codec carries
 * the client: what reaches the client goes through the codec's operations (exchange.h:
 * interim, upgrade, response_head, serve), and the body bytes to send are lent by the caller,
 * so the HTTP/1 client codec (relay.c) and a later HTTP/2 one share it. Failures before a
 * response has started go to dispatch (dispatch_failed: a retry, spillover or an answer).
 *
 * To an HTTP/2 backend the same half writes into and reads from a stream that takes and gives
 * HTTP/1.1 bytes (up_h2.h: its up->h2s), so nothing here changes for it.
 *
 * Bytes are not copied: the request body is written from the caller's buffer, gathered with
 * what is left of the head in one write; the response stays in up->in until the client side
 * has written it -- but when a feature keeps it for the client (xhooks.h, x->feed.on: the
 * cache's fill), what the feature took leaves up->in as it is scanned, and the backend is
 * read at its own pace.
 */
#ifndef ACCELNET_PROXY_UP_H1_H
#define ACCELNET_PROXY_UP_H1_H

#include "proxy/exchange.h"

#include <stddef.h>

/*
 * Write what is left of the request head (x->uphead from the attempt's head_off) and the body
 * bytes body[0..len) upstream, in one write. *took: how many body bytes went (the caller
 * consumes them); *progress set when anything went. RUN_STAY, or what a failure led to.
 */
enum run up_h1_send(struct exchange *x, const char *body, size_t len, size_t *took, int *progress);

/*
 * The response's bytes: reading starts through the transport (net/conn.h) with this half's
 * callbacks, what waits is read into up->in now, and from then on the transport reads on the
 * backend's readiness and calls the codec's respond, which relays and calls this again to
 * look at what came. *progress set when bytes came. *cut: the backend closed in the middle
 * of the response (what arrived was scanned: the caller passes it on, then cuts the client
 * off). RUN_STAY, or what a failure before the response began led to. Reading stops when
 * the response is whole (up_h1_scan) or the connection is let go.
 */
enum run up_h1_read(struct exchange *x, int *progress, int *cut);

/*
 * Parse what up->in holds of the response head: RUN_STAY while it is incomplete; an interim
 * goes to the codec's interim, a 101 to its upgrade, the cache's own answer to its serve, a
 * final head (after the response-head hooks) to its response_head; what the codec returns
 * is returned (the exchange may have ended, or moved on, meanwhile).
 */
enum run up_h1_head(struct exchange *x);

/* Extend x->resp.ready over the body bytes now in up->in, through the body hooks (with
 * x->feed.on, what the keeping feature took then leaves up->in and x->resp.ready); once the
 * response is whole (at its head for a body that has none), once: the resp_done hooks, the
 * slot given back, reading stopped. -1: the body is malformed, or a body hook asked to cut
 * the response off (x->cut_why). */
int up_h1_scan(struct exchange *x);

#endif
