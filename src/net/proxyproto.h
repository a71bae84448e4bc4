/*
 * proxyproto.h - the PROXY protocol header (HAProxy's, versions 1 and 2) that tells a backend
 * behind an L4 relay where its client connected from and to: written once, first on the
 * backend connection, before any byte of the client's (pools.proxy_protocol, proxy/l4.h).
 *
 * Version 1 is one text line ("PROXY TCP4 SRC DST SPORT DPORT\r\n"); version 2 a binary
 * block: a 12-byte signature, version and command (PROXY), family and protocol (TCP over
 * IPv4 or IPv6), the length of what follows, then the addresses and ports in network order.
 * Only TCP over IPv4 and IPv6 is written; anything else (a UNIX socket) says UNKNOWN (v1) or
 * LOCAL (v2), which a backend takes as "use the connection's own addresses". An IPv4 address
 * mapped into IPv6 is written as IPv4, as the client used it.
 */
#ifndef ACCELNET_NET_PROXYPROTO_H
#define ACCELNET_NET_PROXYPROTO_H

#include <stddef.h>
#include <sys/socket.h>

#define NET_PROXYPROTO_MAX 108 /* the longest header of either version (v1's own bound) */

/*
 * Write the version <version> (1 or 2) header for a connection from <src> to <dst> into
 * out[len] (at least NET_PROXYPROTO_MAX). Its length, or -EINVAL (another version, or out too
 * short). <src> and <dst> are of one family for the header to name them; otherwise v1 says
 * UNKNOWN and v2 LOCAL.
 */
int net_proxyproto_write(int version, const struct sockaddr *src, const struct sockaddr *dst,
			 char *out, size_t len);

#endif
