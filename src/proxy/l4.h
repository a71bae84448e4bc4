/*
 * l4.h - listen[].mode: tcp: a listener whose connections are relayed as raw TCP to the
 * backends of a pool (listen[].pool, or one listen[].sni chooses), whatever protocol they
 * carry (a database, Redis, a collective's bootstrap, gRPC without inspection, TLS). No
 * byte is looked at, but for a ClientHello's server name under listen.sni.
 *
 * Each accepted connection passes the accept-time limits of HTTP clients (proxy/shed.h,
 * limits.max_connections through the worker's cap) and takes a backend as a request does: the
 * pool's balancer picks among its eligible backends (health, passive marks, max_concurrency:
 * an L4 connection holds its backend's slot for as long as it lasts), keyed by the client's
 * address for consistent-hash. The backend connection is an attempt (attempt.h) on a new
 * upstream connection; a connect that fails (refused, reset, no answer within
 * timeouts.connect_ms) marks the backend as a failed request's would, and the next backend
 * is tried, up to one try per backend of the pool: nothing has been read from the client
 * until a connect succeeds, so no byte is lost or sent twice. With no backend left the
 * client's connection is closed (there is no queue: an L4 client cannot be told to wait).
 *
 * With listen.sni the pool is chosen per connection, before any connect: the client's first
 * bytes are looked at without being taken (MSG_PEEK) until its TLS ClientHello is whole,
 * and its server name (net/sni.h) picks the first listen.sni item naming it, else
 * listen.pool; bytes that are no ClientHello, a name nothing takes, or no whole hello
 * within timeouts.header_ms close the connection. The hello then goes to the backend with
 * the rest, untouched: TLS passes through and the backend terminates it.
 *
 * With pools.proxy_protocol (v1 or v2) the backend hears the PROXY protocol header first
 * (net/proxyproto.h): the client's address and port, and the listener's it reached.
 *
 * Once connected, each way moves bytes by splice(2) through a pipe taken from the worker's
 * spares when bytes come and given back once it is empty and its source drained, so a quiet
 * connection holds no pipe (net/splice.h); where no pipe can be had (descriptors short)
 * it reads and writes through a buffer of the worker's pool instead. A
 * side is read no faster than the other takes (the pipe's size bounds what is in flight).
 * One side's end is passed on as a shutdown of the other's sending side (half-close) once
 * what it sent has gone; the connection ends when both ways have ended, on a failed read
 * or write, after listen[].idle_ms with no byte either way, or listen[].drain_ms after its
 * worker began draining (SIGHUP, SIGTERM: new connections go to the new configuration's
 * workers meanwhile). Counted per backend: accelnet_backend_l4_connections_total and
 * accelnet_backend_l4_bytes_total{direction}.
 *
 * A connection is one struct of its own, kept on the worker's lists (w->l4_conns, and
 * w->l4_spares for reuse); its backend connection is an upconn, opened (and allocated) by
 * upstream.c as an HTTP attempt's new connection is. Nothing else is allocated for it: no
 * buffer, no pipe of its own.
 */
#ifndef ACCELNET_PROXY_L4_H
#define ACCELNET_PROXY_L4_H

#include "proxy/worker.h"

/* A client connected to <l>, a listener with mode: tcp: take <fd> (owned from now on). */
void l4_accept(struct worker *w, const struct listener *l, int fd,
	       const struct sockaddr_storage *peer);

/* The worker drains (<all> 0): each open connection has listen[].drain_ms left to finish.
 * <all>: the worker ends: close every connection and free the spares. */
void l4_close_idle(struct worker *w, int all);

#endif
