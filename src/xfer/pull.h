/*
 * pull.h - the server side of `xfer get` (see pull.c).
 */
#ifndef ACCELNET_XFER_PULL_H
#define ACCELNET_XFER_PULL_H

#include "xfer/wire.h"

struct xfer_server_conn;

/* Serve the PULL connection <c> (handshake done, <hello> what it said): read its GET, then
 * either queue it for the GET already being answered or answer this one. Returns 1 when the
 * connection was handed over (whoever took it closes it and gives its count back), 0 when
 * it is still the caller's. */
int xfer_pull_serve(struct xfer_server_conn *c, const struct xfer_hello *hello);

#endif
