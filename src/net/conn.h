/*
 * conn.h - the transport: one connection over a plain or a TLS socket.
 *
 * Everything above net/ reads and writes a client, an upstream or an xfer peer through a
 * struct net_conn, never with recv()/send() on the descriptor: so TLS on a listener, TLS to a
 * backend or TLS between xfer nodes is a property of the connection, not a flag in the HTTP
 * codec or the proxy. A plain connection is the descriptor alone (ssl NULL); net/tls.h
 * attaches a TLS session to one.
 *
 * Non-blocking use (the proxy): net_conn_read() and net_conn_writev() return what one call
 * moved, -EAGAIN when the socket (or TLS) must wait, 0 from a read at the peer's clean end.
 * TLS can need the other direction than the one asked for (a write waiting for a handshake
 * message to arrive, a read that must send one): then the call returns -EAGAIN and sets
 * want_read or want_write, and the owner waits for that readiness before calling again.
 * A TLS write that returned -EAGAIN must be repeated with at least the bytes it was given
 * (OpenSSL holds a partly sent record); the proxy's buffers only grow at the end, so
 * repeating the write of what is pending does that.
 *
 * Blocking use (xfer, one thread per stream): net_conn_read_all() / net_conn_write_all() loop
 * until the whole buffer moved; a socket timeout (SO_RCVTIMEO/SO_SNDTIMEO) shows as
 * -ETIMEDOUT and the peer's end before the buffer filled as -ECONNRESET.
 *
 * Every function returns a count or 0, or -errno.
 */
#ifndef ACCELNET_NET_CONN_H
#define ACCELNET_NET_CONN_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct ssl_st;

struct net_conn {
	int fd;			 /* -1 once closed */
	struct ssl_st *ssl;	 /* NULL: plain TCP */
	unsigned want_read : 1;	 /* the last call waits for the socket to be readable */
	unsigned want_write : 1; /* ... or writable (TLS may want either, whatever was asked) */
};

/* A plain connection over <fd> (owned from now on). */
static inline void net_conn_init(struct net_conn *c, int fd)
{
	c->fd = fd;
	c->ssl = NULL;
	c->want_read = c->want_write = 0;
}

/* Read at most <len> bytes: a count, 0 at the peer's end, -EAGAIN, or -errno. */
ssize_t net_conn_read(struct net_conn *c, void *buf, size_t len);

/* Write from <iov> (<n> parts, gathered in one call where the transport allows): a count,
 * -EAGAIN when nothing could be written, or -errno. Never raises SIGPIPE. */
ssize_t net_conn_writev(struct net_conn *c, const struct iovec *iov, int n);

/* One buffer: net_conn_writev() with one part. */
ssize_t net_conn_write(struct net_conn *c, const void *buf, size_t len);

/* Look at up to <len> bytes waiting on the socket without consuming them (below TLS): a
 * count, 0 at the peer's end, -EAGAIN (want_read set), or -errno. */
ssize_t net_conn_peek(struct net_conn *c, void *buf, size_t len);

/* Without consuming anything, has the peer closed (1), or is the connection open or its
 * state unknown (0)? A pending byte counts as open. */
int net_conn_peer_closed(struct net_conn *c);

/* Has the peer sent bytes not read yet (in the socket, or decrypted in TLS's buffer)? */
int net_conn_pending(const struct net_conn *c);

/* End our sending side (TLS: close_notify, then the TCP write side). */
void net_conn_shutdown(struct net_conn *c);

/* Free the TLS session if any and close the descriptor; fd becomes -1. Safe twice. */
void net_conn_close(struct net_conn *c);

/* For net/ only (net/tls.c): the outcome of an SSL call on <c> that returned <ret> <= 0, as
 * -errno with want_read/want_write set for -EAGAIN, or 0 for the peer's close_notify. */
ssize_t net_conn_tls_outcome(struct net_conn *c, int ret);

/* Blocking helpers for a blocking socket: the whole buffer, or -errno (-ETIMEDOUT: no
 * progress within the socket's timeout; -ECONNRESET: the peer ended first). */
int net_conn_read_all(struct net_conn *c, void *buf, size_t len);
int net_conn_write_all(struct net_conn *c, const void *buf, size_t len);

#endif
