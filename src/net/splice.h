/*
 * splice.h - bytes from one plain TCP connection to another through a pipe, with splice(2):
 * the kernel hands the source socket's pages to the pipe and on to the other socket, and no
 * byte is copied into or out of user space.
 *
 * A capability of two plain connections only (net_splice_able()): TLS decrypts and encrypts
 * in user space, so its bytes must pass through a buffer. The pipe is the buffer in between:
 * what was read from the source waits in it while the destination is slow, and the owner
 * reads no more than the room left (size - held), so a full pipe leaves the source unread
 * and the kernel's flow control pushes back on the sender. Both moves are non-blocking.
 *
 * A pipe counts in pages and slots, not bytes: a read into a pipe that is not empty may stop
 * short of the room asked for, or find no slot (-EAGAIN) while the socket still has bytes.
 * So -EAGAIN from net_splice_in() says the socket is drained only when the pipe was empty;
 * and a short move says nothing about the socket. The owner, whose readiness is
 * edge-triggered, takes only -EAGAIN (with an empty pipe, for a read) as "wait for an edge".
 *
 * A connection on a loop's io_uring (net/conn.h) splices too: its owner reads with no alloc,
 * which stops its receives (net_conn_ring_pause), and net_splice_in() hands on the bytes the
 * ring already held first (written into the pipe: a copy, of what one receive held at most),
 * reads nothing while a receive is still in the ring (-EAGAIN; its completion is the next
 * read edge), then splices from the socket; net_splice_out() waits (-EAGAIN) while a send the
 * ring queued is in flight (its completion is the write edge), so bytes leave in order.
 *
 * Pipes cost two descriptors and a kernel ring each, so a worker keeps a few empty ones for
 * the next body (struct net_pipe_spares) and closes one that still holds bytes. Functions
 * return a count or 0, or -errno.
 */
#ifndef ACCELNET_NET_SPLICE_H
#define ACCELNET_NET_SPLICE_H

#include "net/conn.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NET_PIPE_SPARES 8 /* empty pipes a worker keeps for reuse */

struct net_pipe {
	int rd, wr;    /* its two ends; -1: none */
	uint32_t size; /* what it holds at most (F_GETPIPE_SZ) */
	uint32_t held; /* bytes in it now */
};

struct net_pipe_spares {
	struct net_pipe spare[NET_PIPE_SPARES];
	unsigned n;    /* spares in spare[0..n) */
	unsigned lent; /* pipes taken and not given back */
};

/* May bytes go from <from> to <to> by splice? Both plain TCP (no TLS session). */
static inline int net_splice_able(const struct net_conn *from, const struct net_conn *to)
{
	return !from->ssl && !to->ssl && from->fd >= 0 && to->fd >= 0;
}

/* A non-blocking pipe of about <size> bytes (F_SETPIPE_SZ where the system allows it; the
 * default size otherwise): 0, or -errno (-EMFILE: out of descriptors). */
int net_pipe_open(struct net_pipe *p, size_t size);
/* Close both ends; safe on a closed pipe. */
void net_pipe_close(struct net_pipe *p);

/* A spare pipe from <s>, or a new one of about <size> bytes, unless <max> are lent already
 * (-EBUSY). */
int net_pipe_take(struct net_pipe_spares *s, struct net_pipe *p, size_t size, unsigned max);
/* Give back a pipe taken: kept when empty and there is room, else closed. *p is closed. */
void net_pipe_give(struct net_pipe_spares *s, struct net_pipe *p);
/* Close every spare (the worker ends). */
void net_pipe_spares_drain(struct net_pipe_spares *s);

/* Read at most <max> bytes (> 0) of <from> into the pipe: a count, 0 at the peer's end,
 * -EAGAIN (nothing there, or no slot free in the pipe), or -errno. */
ssize_t net_splice_in(struct net_pipe *p, struct net_conn *from, size_t max);
/* Write what the pipe holds to <to>: a count, -EAGAIN when the socket took nothing, or
 * -errno (-EPIPE, -ECONNRESET: the peer is gone; never a SIGPIPE while it is ignored). */
ssize_t net_splice_out(struct net_pipe *p, struct net_conn *to);

#endif
