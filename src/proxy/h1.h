/*
 * h1.h - the HTTP/1 client codec: one client connection's state machine.
 *
 *   (C_HANDSHAKE on a TLS listener) -->
 *   C_HEAD ---head parsed---> C_EXCHANGE ---response relayed---> C_HEAD (keep-alive)
 *     |                          |   \---no backend / failure---> C_REPLY
 *     \---bad request---> C_REPLY ---> C_HEAD or C_LINGER ---> closed
 *
 * Every event of the client socket, of its exchange's upstream connection and of its timer
 * ends in h1_run(), which moves bytes until nothing more can move. A parsed request
 * head becomes an exchange (exchange.h) that runs the proxy's stages (stages.h); this file
 * is what those stages ask of HTTP/1: answering, reading the body, relaying (relay.h).
 */
#ifndef ACCELNET_PROXY_H1_H
#define ACCELNET_PROXY_H1_H

#include "proxy/client.h"
#include "proxy/worker.h"
#include "proxy/xhooks.h"

#include <sys/socket.h>

/* The HTTP/1 codec's state for the exchange under way (client.h's struct h1_x) lives in
 * the exchange's block, as a feature's context does (xhooks.h: a hook with no points, that
 * joins an HTTP/1 exchange as it starts), so an idle connection carries none of it: cl->h1
 * points at it while cl->x is set, else NULL. */
extern const struct xhook h1_x_hook;

/* A client connected to <w> through listener <l> on <fd> (owned from now on); a TLS
 * listener's client starts with the handshake. */
void h1_accept(struct worker *w, const struct listener *l, int fd,
	       const struct sockaddr_storage *peer);
/* Run the state machine of <cl> until it waits or ends. */
void h1_run(struct client *cl);
/* Draining: close the clients of <w> between requests, and the idle upstream connections.
 * <all>: the worker ends; close every client and free what is kept for reuse. */
void h1_close_idle(struct worker *w, int all);

#endif
