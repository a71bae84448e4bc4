/*
 * tunnel.h - WebSocket tunnels (routes.websocket): after a handshake the backend accepts,
 * the client's connection and the upstream one become a two-way byte pipe.
 *
 * The handshake is a request like any other: it is routed, authenticated, rate-limited,
 * admitted to a backend slot and balanced through the stages (stages.h). The stage
 * "upgrade" marks it (x->tunnel) when its route has websocket: true and it is an HTTP/1.1
 * GET without a body carrying Connection: upgrade and Upgrade: websocket; it is then never
 * looked up in the response cache, and its forwarded head carries the proxy's own
 * Connection: Upgrade and Upgrade: websocket besides the client's Sec-WebSocket-* fields
 * (http/rewrite.h). On any other route the Upgrade field is dropped as every hop-by-hop field
 * is, and the backend sees a plain GET. The backend's answer other than 101 is relayed as a
 * response; a 101 to a request not so marked, one that does not say Upgrade: websocket
 * with Connection: upgrade, or one that comes before the whole forwarded head went (the
 * client's first bytes would end it), is a malformed response (502): a backend cannot turn
 * a request into a tunnel the client did not ask for. Whether its Sec-WebSocket-Accept is
 * right is the client's to judge: it passes untouched.
 *
 * On a 101 the codec (relay.c) calls tunnel_start(): the head goes to the client and the
 * connection (h1.c's state C_TUNNEL) runs tunnel_run() on every event of either side.
 * Bytes move as they come, each way through one buffer from the worker's pool: a side is
 * not read while the buffer to its peer is full (backpressure), and an empty buffer goes
 * back, so an idle tunnel holds no buffer. One side's end (FIN, TLS close_notify) is passed
 * on as a shutdown of the other's sending side once what it sent has gone; the tunnel ends
 * when both ways have ended, on an error, after timeouts.tunnel_idle_ms with no byte either
 * way, or timeouts.tunnel_drain_ms after its worker began draining (a reload, SIGTERM). The
 * exchange lives as long as the tunnel: it holds its backend slot (max_concurrency: a
 * WebSocket to an inference server is a session that occupies it) and is logged when the
 * tunnel ends, status 101 and the bytes each way.
 *
 * Over HTTP/2 (RFC 8441) a tunnel is one stream, not a connection: h2.c writes an extended
 * CONNECT with :protocol websocket as the HTTP/1.1 handshake (http/h2head.h), the same stage
 * marks it, and a backend's 101 becomes the stream's 200, its DATA the tunnel's bytes both
 * ways; h2.c keeps that pump, with the counts, limits and deadlines below (tunnel_count_in,
 * tunnel_count_bytes, tunnel_count_out, tunnel_due). An extended CONNECT on a route that does
 * not tunnel is refused (405) rather than sent on as a plain GET: its client would read a 200
 * as the tunnel open.
 *
 * limits.max_tunnels counts the tunnels open in one configuration generation, all workers
 * (rt->tunnels, written only as a tunnel opens or ends); a handshake past it is answered
 * 503. Metrics: accelnet_tunnels_open, accelnet_tunnel_bytes_total{direction},
 * accelnet_tunnels_closed_total{reason}.
 */
#ifndef ACCELNET_PROXY_TUNNEL_H
#define ACCELNET_PROXY_TUNNEL_H

#include "proxy/exchange.h"
#include "runtime/proxy_metric.h"

struct client;

/* The stage "upgrade": mark a WebSocket handshake on a route that tunnels (x->tunnel), or
 * answer 503 when limits.max_tunnels are open. x->head is valid. */
enum run tunnel_stage(struct exchange *x);

/* May the backend's response head <h>, status 101, open a tunnel for <x>? */
int tunnel_accepts(const struct exchange *x, const struct http_head *h);

/*
 * The backend answered <h>, 101, in the first <len> bytes of x->att->up->in, and tunnel_accepts()
 * said yes: queue the head for the client and turn <cl> into a tunnel (C_TUNNEL). RUN_AGAIN,
 * or the exchange ended (503 past limits.max_tunnels, out of memory).
 */
enum run tunnel_start(struct client *cl, const struct http_head *h, size_t len);

/* Move bytes both ways while they move; ends the tunnel (and the connection) when done. */
enum run tunnel_run(struct client *cl);

/* When its timer must fire: the idle timeout, or the drain's end while draining. */
uint64_t tunnel_deadline(const struct client *cl);

/* Its timer fired: close it (idle, or the drain's time is up), unless it moved since. */
enum run tunnel_on_timer(struct client *cl);

/* A tunnel of an HTTP/2 stream opens: 0, or -EBUSY past limits.max_tunnels (not counted). */
int tunnel_count_in(struct worker *w);
/* ... <n> of its bytes went <way> */
void tunnel_count_bytes(struct worker *w, enum tunnel_way way, uint64_t n);
/* ... it ended for <why> */
void tunnel_count_out(struct worker *w, enum tunnel_end why);
/* When a tunnel whose last byte moved at <last_ms> ends by the clock, and *why then: idle
 * (timeouts.tunnel_idle_ms), or drain (timeouts.tunnel_drain_ms after its worker began
 * draining). */
uint64_t tunnel_due(const struct worker *w, uint64_t last_ms, enum tunnel_end *why);

/* The connection is about to close (the worker ends): count the tunnel out and free it.
 * Nothing for a connection that is not a tunnel. */
void tunnel_free(struct client *cl);

#endif
