/*
 * receiver.h - the receiving protocol of xfer (MANIFEST, CHUNK, FINISH), see receiver.c.
 */
#ifndef ACCELNET_XFER_RECEIVER_H
#define ACCELNET_XFER_RECEIVER_H

#include "xfer/wire.h"

struct xfer_server;
struct xfer_server_conn;
struct rx_transfer;

/* Serve frames from connection <c> (its handshake done, <hello> what it said) until the
 * peer goes or something fails; refusals are answered with ERR. c->rx holds the transfer
 * it joined, if any: the caller lets go of it with xfer_receiver_put(). */
void xfer_receiver_loop(struct xfer_server_conn *c, const struct xfer_hello *hello);
/* Let go of a connection's reference to <rx>; the last one frees it. */
void xfer_receiver_put(struct xfer_server *s, struct rx_transfer *rx);
/* Transfers being received now. */
unsigned xfer_receiver_count(struct xfer_server *s);

#endif
