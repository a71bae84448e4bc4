/*
 * conn.h - the transport: one connection over a plain or a TLS socket.
 *
 * Everything above net/ reads and writes a client, an upstream or an xfer peer through a
 * struct net_conn, never with recv()/send() on the descriptor: so TLS on a listener, TLS to a
 * backend or TLS between xfer nodes is a property of the connection, not a flag in the HTTP
 * codec or the proxy. A plain connection is the descriptor alone (ssl NULL); net/tls.h
 * attaches a TLS session to one.
 *
 * Non-blocking reads (the proxy), as libuv reads: the owner starts reading with two callbacks
 * (net_conn_read_start: alloc lends room, read takes what came, 0 at the peer's clean end or
 * -errno) and hands the transport the readiness its loop reported (net_conn_ready). The
 * transport keeps what it knows of the socket (an edge not drained, the peer's hang-up, a TLS
 * read waiting for a write edge), reads while the owner has room, all of what TLS has
 * decrypted too, and tells the owner. So where bytes come from and when they are read is the
 * transport's: on a loop running on io_uring (core/loop.h: loop_ring_*) a plain connection
 * read for an owner receives and sends through the ring (the bytes received wait in the
 * loop's buffers, held by the connection, until the owner has room; a write is copied and
 * queued, and -EAGAIN until that one is sent, then a write event), with no change to the
 * owners. TLS connections keep the readiness path; an owner that splices below the transport
 * (no alloc) takes the connection off the ring's receives while it does (net_conn_ring_pause:
 * it reads the socket on readiness, the bytes the ring held first, net/splice.h), and the next
 * read for an owner that drains the socket puts it back.
 *
 * Non-blocking writes: net_conn_writev() returns what one call moved (on the ring: what was
 * queued, which still leaves if the connection is closed next, for a short grace: a
 * peer that reads nothing cannot hold it), -EAGAIN when the socket (or
 * TLS, or the ring's send in flight) must wait. net_conn_read() is the one read, for the
 * transport's own use and for those that still read for themselves (the control plane's probes,
 * xfer, the proxy's idle check, hedged copy and background refresh). TLS can need the other
 * direction than the one asked for (a write waiting for a handshake message to arrive, a read that
 * must send one): then the call returns -EAGAIN and sets want_read or want_write, and the owner
 * waits for that readiness before calling again. A TLS write that returned -EAGAIN must be repeated
 * with at least the bytes it was given (OpenSSL holds a partly sent record); the proxy's buffers
 * only grow at the end, so repeating the write of what is pending does that.
 *
 * Blocking use (xfer, one thread per stream): net_conn_read_all() / net_conn_write_all() loop
 * until the whole buffer moved; a socket timeout (SO_RCVTIMEO/SO_SNDTIMEO) shows as
 * -ETIMEDOUT and the peer's end before the buffer filled as -ECONNRESET.
 *
 * Every function returns a count or 0, or -errno.
 */
#ifndef ACCELNET_NET_CONN_H
#define ACCELNET_NET_CONN_H

#include "core/loop.h"

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct ssl_st;

/*
 * What the owner of a connection that reads gives the transport (one const table per kind of
 * owner; <arg> is the owner).
 *
 * alloc: room to read into, *buf and *len set: 0; -ENOSPC when the owner has none now
 * (reading pauses, the edge kept, until the owner starts it again); another -errno is handed
 * to read as a failure.
 *
 * read: <n> bytes came into the room alloc lent (n > 0), the peer's clean end (0), or a
 * failure (-errno); after 0 or -errno reading stops. It records and returns; it must not
 * close the connection (ready may).
 *
 * ready (or NULL): bytes or an end came on a readiness event (net_conn_ready), after the
 * last read: the owner moves them on. The transport touches nothing of the connection after
 * it, so it may end everything.
 *
 * An owner that moves the bytes itself below the transport (splice(2) from a plain
 * connection's descriptor) gives no alloc and no read: ready is then called on each read edge
 * while reading, and the owner clears <readable> once the socket is drained (-EAGAIN).
 */
struct net_conn_read_ops {
	int (*alloc)(void *arg, char **buf, size_t *len);
	void (*read)(void *arg, ssize_t n);
	void (*ready)(void *arg);
};

struct net_conn {
	struct ssl_st *ssl;	 /* NULL: plain TCP */
	int fd;			 /* -1 once closed */
	unsigned want_read : 1;	 /* the last call waits for the socket to be readable */
	unsigned want_write : 1; /* ... or writable (TLS may want either, whatever was asked) */
	unsigned readable : 1;	 /* a read edge came, not drained yet: bytes may wait */
	unsigned hup : 1;	 /* the peer shut its side: read on to its end */
	unsigned reading : 1; /* between net_conn_read_start and net_conn_read_stop (or the end) */
	unsigned read_on_write : 1;	    /* TLS: the last read waits for a write edge */
	unsigned ring_no : 1;		    /* not on the ring: asked once (net_conn_ring_try) */
	const struct net_conn_read_ops *rd; /* while reading */
	void *rd_arg;
	struct loop_ring_io ring; /* receiving and sending through the loop's io_uring */
};

/* A plain connection over <fd> (owned from now on). */
static inline void net_conn_init(struct net_conn *c, int fd)
{
	*c = (struct net_conn){.fd = fd};
}

/* The reading halves of net_conn_read_start() and net_conn_ready(), when an edge waits. */
int net_conn_read_pass(struct net_conn *c);
/* A plain connection read for an owner on a loop running on io_uring: its receives and sends
 * go through the ring from now on (silently not where the loop does not offer it). */
void net_conn_ring_try(struct net_conn *c);
/* ... and one on the ring whose owner now moves the bytes itself: receiving stops (readable
 * set: the owner looks). */
void net_conn_ring_pause(struct net_conn *c);
int net_conn_ready_read(struct net_conn *c);

/*
 * Read into the owner's room and tell it (<ops>, <arg>: see struct net_conn_read_ops) from
 * now on, on each readiness event, until net_conn_read_stop() or the end. Bytes already
 * waiting (an edge not drained) are read now, before it returns, through alloc and read but
 * not ready (the caller is there to see them): 1 when anything was handed to read, else 0.
 */
static inline int net_conn_read_start(struct net_conn *c, const struct net_conn_read_ops *ops,
				      void *arg)
{
	c->rd = ops;
	c->rd_arg = arg;
	c->reading = 1;
	if (!c->ring.loop && !c->ring_no && !c->ssl && ops->alloc)
		net_conn_ring_try(c);
	else if (c->ring.loop && !ops->alloc)
		net_conn_ring_pause(c);
	return c->readable ? net_conn_read_pass(c) : 0;
}

/* No reads until started again; the readiness seen meanwhile is kept. */
static inline void net_conn_read_stop(struct net_conn *c)
{
	c->reading = 0;
}

/*
 * The loop reported <events> (core/loop.h: LOOP_READ, LOOP_WRITE, LOOP_HUP) on c's
 * descriptor: recorded; while reading, what waits is read and handed to the owner, then its
 * ready. 1 when ready was called (the owner has moved on: c may be gone); 0 when the owner
 * handles the events itself (nothing read, or no ready).
 */
static inline int net_conn_ready(struct net_conn *c, unsigned events)
{
	if (events & (LOOP_READ | LOOP_HUP))
		c->readable = 1;
	if (events & LOOP_HUP)
		c->hup = 1;
	if ((events & LOOP_WRITE) && c->read_on_write) {
		c->readable = 1;
		c->read_on_write = 0;
	}
	return c->reading && c->readable ? net_conn_ready_read(c) : 0;
}

/* Read at most <len> bytes once: a count, 0 at the peer's end, -EAGAIN, or -errno. */
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
