/*
 * splice_body.h - a response body that no feature reads, relayed by splice(2): from the
 * backend's socket into a pipe and from the pipe to the client's, never through the
 * proxy's buffers (net/splice.h moves the bytes; this room decides when, and keeps the
 * exchange's books while it does).
 *
 * A body goes this way when nothing must see it: both connections plain TCP (no TLS either
 * side), no feature asked for its bytes (xhooks_body_wanted(): no cache fill, no token
 * tally or usage scan, no held token reservation), no proxy-made event stream around it
 * (heartbeats, a body re-framed as a chunk), no hedged copy racing it, framed by
 * Content-Length, at least SPLICE_MIN_BYTES long, and tune.splice on. Chunked and
 * close-delimited bodies are copied as before: their framing must be read to find the end.
 *
 * The head and the body bytes read with it go to the client as before (copied); from then
 * on the pipe carries the rest, exactly Content-Length of it; a backend that sent anything
 * past it (a second response nobody asked for) loses its connection, which would otherwise
 * go back to the idle list with those bytes waiting to answer the next request. Backpressure is the
 * pipe's: bytes wait in it while the client is slow, and the backend is not read while it is full.
 * A backend that ends before the last byte leaves the client what arrived, then a cut connection,
 * as a copied body does. The exchange's books stay as a copied body keeps them: x->resp (left,
 * done, sent: the access log's bytes), x->last_ms (timeouts.between_bytes_ms) and the
 * pacing marks (timeouts.send_ms); the bytes are counted in accelnet_spliced_bytes_total.
 *
 * The pipe comes from the worker's spares (at most SPLICE_PIPES_MAX lent per worker; past
 * that, or without a descriptor, the body is copied) and goes back at the exchange's end
 * (the end hook of splice_hook, registered last), closed if bytes are still in it.
 */
#ifndef ACCELNET_PROXY_SPLICE_BODY_H
#define ACCELNET_PROXY_SPLICE_BODY_H

#include "proxy/client.h"
#include "proxy/exchange.h"
#include "proxy/xhooks.h"

/* Shorter bodies are copied: measured on loopback (docs/benchmarks.md), splicing cost 7-9 %
 * more CPU per request than copying at 64 and 256 KiB, and saved 12 % at 512 KiB, 35 % at
 * 1 MiB. */
#define SPLICE_MIN_BYTES (512u << 10)
#define SPLICE_PIPE_BYTES (256u << 10) /* asked of F_SETPIPE_SZ */
#define SPLICE_PIPES_MAX 64	       /* pipes one worker lends at once */

extern const struct xhook splice_hook;

/* The final head <h> of <x>'s response is in (and framed) and goes to the client over <cl>:
 * relay the body by splice if it qualifies. 1 if it will, 0 if it is copied. */
int splice_body_begin(struct client *cl, const struct http_head *h);

/* Is <x>'s response body relayed by splice? */
int splice_body_on(const struct exchange *x);

/* Bytes of <x>'s response waiting in its pipe (the exchange is not finished while any do). */
size_t splice_body_held(const struct exchange *x);

/*
 * One pass of the spliced body of cl->x, once the head and the bytes read with it are out:
 * the backend's socket into the pipe (within its room and the body's length), the pipe to
 * the client. RUN_STAY (with *progress when a byte moved), or the outcome of an abort (a
 * backend that ended early, a client gone).
 */
enum run splice_body_move(struct client *cl, int *progress);

#endif
