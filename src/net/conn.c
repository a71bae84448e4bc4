/*
 * conn.c - reading and writing a connection, plain or TLS.
 *
 * The plain path is one recv()/sendmsg() per call (send() for a write of one part). The TLS path
 * maps OpenSSL's outcomes onto the same contract: SSL_ERROR_WANT_READ/WRITE become -EAGAIN with
 * want_read/want_write set (on a blocking socket they mean its timeout ran out: -ETIMEDOUT for the
 * *_all helpers), a close_notify becomes the end (0), and anything else -EPROTO or the socket's
 * errno. A gathered TLS write copies the parts into one record-sized buffer when they are small, so
 * a head and a short body still leave in one record.
 *
 * The reads for an owner (net_conn_read_start) follow the edges the loop reports: a read edge
 * marks the connection readable until a read says -EAGAIN or a short plain read shows the
 * socket drained (a TLS read hands out a record at a time, so only -EAGAIN says it; after
 * the peer's hang-up no edge will come, so it reads on to the end). A TLS read that must
 * first write (SSL_ERROR_WANT_WRITE) waits for the write edge instead.
 *
 * On a loop running on io_uring a plain connection read for an owner is attached to the ring
 * at net_conn_read_start (net_conn_ring_try): its reads take what the ring received (and,
 * where the ring stopped receiving, read the socket until it is drained and start the ring
 * again), its writes are queued sends, its shutdown waits for the send in flight, its peek and
 * pending look at the bytes held first, and closing detaches it. An owner that splices pauses
 * its receives (net_conn_ring_pause); a read that drains the socket then (ring_read) starts
 * them again. Elsewhere the reads and
 * writes are system calls on the descriptor.
 */
#include "net/conn.h"
#include "core/loop.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* OpenSSL's error queue must be empty before a call whose outcome SSL_get_error() reads.
 * Peeking first is much cheaper than ERR_clear_error() on an empty queue (which wipes
 * every slot), and the queue is almost always empty: a read or write per request. */
static void tls_errors_clear(void)
{
	if (ERR_peek_error())
		ERR_clear_error();
}

ssize_t net_conn_tls_outcome(struct net_conn *c, int ret)
{
	switch (SSL_get_error(c->ssl, ret)) {
	case SSL_ERROR_WANT_READ:
		c->want_read = 1;
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		c->want_write = 1;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			c->want_read = 1;
			return -EAGAIN;
		}
		if (ERR_peek_error())
			return -EPROTO;
		return errno ? -errno : -ECONNRESET;
	default:
		return -EPROTO;
	}
}

/* recv() on the descriptor, again after EINTR; -EAGAIN (want_read set) when nothing waits. */
static ssize_t plain_recv(struct net_conn *c, void *buf, size_t len, int flags)
{
	for (;;) {
		ssize_t n = recv(c->fd, buf, len, flags);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			c->want_read = 1;
			return -EAGAIN;
		}
		return -errno;
	}
}

void net_conn_ring_try(struct net_conn *c)
{
	struct loop *loop = loop_current();
	if (!loop || c->fd < 0 || loop_ring_attach(loop, c->fd, &c->ring) < 0) {
		c->ring = (struct loop_ring_io){0};
		c->ring_no = 1;
	}
}

void net_conn_ring_pause(struct net_conn *c)
{
	if (loop_ring_pause(&c->ring, c->fd) == 0)
		c->readable = 1;
}

/* A read of what the ring received; where it stopped receiving (its buffers ran out, or too
 * much was held), the socket's own bytes after those, until it is drained (a short read or
 * -EAGAIN), and then the ring again: so a short read says the socket is drained, as for a
 * plain one. */
static ssize_t ring_end(const struct net_conn *c)
{
	return c->ring.end == 1 ? 0 : c->ring.end; /* 1: the peer's clean end; else -errno */
}

static ssize_t ring_read(struct net_conn *c, void *buf, size_t len)
{
	size_t n = loop_ring_take(&c->ring, buf, len);
	if (n == len || (n && c->ring.armed))
		return (ssize_t)n;
	if (c->ring.end && !n)
		return ring_end(c);
	if (c->ring.armed || c->ring.end) {
		if (n)
			return (ssize_t)n;
		c->want_read = 1;
		return -EAGAIN;
	}
	ssize_t rc = plain_recv(c, (char *)buf + n, len - n, 0);
	if (rc == -EAGAIN || (rc > 0 && (size_t)rc < len - n))
		loop_ring_rearm(&c->ring, c->fd); /* drained: the ring tells of what comes next */
	if (rc > 0)
		return (ssize_t)n + rc;
	if (n && rc < 0 && rc != -EAGAIN)
		c->ring.end =
		    (int32_t)rc;    /* the kernel tells a failure once: kept for the next read */
	return n ? (ssize_t)n : rc; /* the end or a failure after the bytes: at the next read */
}

ssize_t net_conn_read(struct net_conn *c, void *buf, size_t len)
{
	c->want_read = c->want_write = 0;
	if (c->ring.loop)
		return ring_read(c, buf, len);
	if (c->ssl) {
		size_t n;
		tls_errors_clear();
		int ret = SSL_read_ex(c->ssl, buf, len, &n);
		return ret > 0 ? (ssize_t)n : net_conn_tls_outcome(c, ret);
	}
	return plain_recv(c, buf, len, 0);
}

/* Read for the owner while the connection may hold bytes and the owner has room: 1 when
 * anything (bytes, the end, a failure) was handed to its read. */
int net_conn_read_pass(struct net_conn *c)
{
	const struct net_conn_read_ops *ops = c->rd;
	int got = 0;
	if (!ops->alloc)
		return 0; /* the owner moves the bytes itself */
	while (c->reading && c->readable) {
		char *p = NULL;
		size_t len = 0;
		int rc = ops->alloc(c->rd_arg, &p, &len);
		if (rc == -ENOSPC)
			break; /* the edge is kept for when the owner has room */
		ssize_t n = rc < 0 ? rc : net_conn_read(c, p, len);
		if (n == -EAGAIN || n == -EINTR) {
			c->readable = 0;
			c->read_on_write = c->want_write;
			break;
		}
		if (n <= 0)
			c->reading = 0;
		got = 1;
		ops->read(c->rd_arg, n);
		if (n > 0 && (size_t)n == len)
			break; /* the room is full: the owner starts again when it has more */
		if (n > 0 && !c->hup && !c->ssl)
			c->readable = 0; /* a short plain read drained the socket */
	}
	return got;
}

int net_conn_ready_read(struct net_conn *c)
{
	if (!c->rd->alloc) { /* the owner moves the bytes itself */
		c->rd->ready(c->rd_arg);
		return 1;
	}
	if (!net_conn_read_pass(c) || !c->rd->ready)
		return 0;
	c->rd->ready(c->rd_arg);
	return 1;
}

/* Copy up to <cap> bytes of <iov> from byte <skip> on into <out>; how many. */
static size_t gather(const struct iovec *iov, int n, size_t skip, char *out, size_t cap)
{
	size_t len = 0;
	for (int i = 0; i < n && len < cap; i++) {
		size_t part = iov[i].iov_len;
		if (skip >= part) {
			skip -= part;
			continue;
		}
		size_t take = part - skip < cap - len ? part - skip : cap - len;
		memcpy(out + len, (const char *)iov[i].iov_base + skip, take);
		len += take;
		skip = 0;
	}
	return len;
}

/*
 * Records of up to 16 KiB, each gathered from the parts, until everything is written or
 * the socket is full: so a short count means the socket is full, as for a plain socket
 * (an edge-triggered caller waits for writability only then). A record OpenSSL could not
 * send whole stays pending inside it; the caller's next write starts with the same bytes
 * and at least as many (its buffers only grow at the end), as OpenSSL requires.
 */
static ssize_t tls_writev(struct net_conn *c, const struct iovec *iov, int n)
{
	char rec[16384];
	size_t done = 0;
	for (;;) {
		size_t len = gather(iov, n, done, rec, sizeof(rec)), w = 0;
		if (!len)
			return (ssize_t)done;
		tls_errors_clear();
		int ret = SSL_write_ex(c->ssl, rec, len, &w);
		if (ret <= 0) {
			ssize_t rc = net_conn_tls_outcome(c, ret);
			if (done)
				return (ssize_t)done; /* what went; the rest waits for the socket */
			return rc == 0 ? -EPIPE : rc; /* the peer has closed: nothing more goes */
		}
		done += w;
	}
}

ssize_t net_conn_writev(struct net_conn *c, const struct iovec *iov, int n)
{
	c->want_read = c->want_write = 0;
	if (c->ssl)
		return tls_writev(c, iov, n);
	if (c->ring.loop) {
		ssize_t rc = loop_ring_send(&c->ring, c->fd, iov, n);
		if (rc == -EAGAIN)
			c->want_write = 1;
		if (rc != -EMSGSIZE)
			return rc;
		/* bulk, nothing in flight: sent here, in order, without the copy */
	}
	struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
	for (;;) {
		/* one part: send(), which spares the kernel copying in a msghdr and an iovec */
		ssize_t sent = n == 1 ? send(c->fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL)
				      : sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (sent >= 0)
			return sent;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			c->want_write = 1;
			return -EAGAIN;
		}
		return -errno;
	}
}

ssize_t net_conn_write(struct net_conn *c, const void *buf, size_t len)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return net_conn_writev(c, &iov, 1);
}

ssize_t net_conn_peek(struct net_conn *c, void *buf, size_t len)
{
	if (c->ring.loop) {
		size_t n = loop_ring_peek(&c->ring, buf, len);
		if (n)
			return (ssize_t)n;
		if (c->ring.end)
			return ring_end(c);
	}
	return plain_recv(c, buf, len, MSG_PEEK);
}

int net_conn_peer_closed(struct net_conn *c)
{
	char b;
	if (c->ring.loop && c->ring.held)
		return 0;
	if (c->ring.loop && c->ring.end)
		return 1;
	ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int net_conn_pending(const struct net_conn *c)
{
	int n = 0;
	if (c->ssl && SSL_pending(c->ssl) > 0)
		return 1;
	if (c->ring.held)
		return 1;
	return ioctl(c->fd, FIONREAD, &n) == 0 && n > 0;
}

void net_conn_shutdown(struct net_conn *c)
{
	if (c->fd < 0)
		return;
	if (c->ssl) {
		ERR_clear_error();
		SSL_shutdown(c->ssl); /* our close_notify; the peer's is not waited for */
	}
	if (c->ring.loop)
		loop_ring_shutdown(&c->ring, c->fd); /* after the send in flight */
	else
		shutdown(c->fd, SHUT_WR);
}

void net_conn_close(struct net_conn *c)
{
	if (c->ssl) {
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	loop_ring_detach(&c->ring, c->fd);
	if (c->fd >= 0)
		close(c->fd);
	*c = (struct net_conn){.fd = -1};
}

/* A blocking socket's -EAGAIN (or EWOULDBLOCK) is its timeout running out. */
static int blocking_outcome(ssize_t rc)
{
	if (rc == -EAGAIN || rc == -EWOULDBLOCK)
		return -ETIMEDOUT;
	return rc == 0 ? -ECONNRESET : (int)rc;
}

int net_conn_read_all(struct net_conn *c, void *buf, size_t len)
{
	char *p = buf;
	while (len) {
		ssize_t n;
		if (c->ssl) {
			n = net_conn_read(c, p, len);
		} else if ((n = recv(c->fd, p, len, MSG_WAITALL)) < 0) {
			if (errno == EINTR)
				continue;
			n = -errno;
		}
		if (n <= 0)
			return blocking_outcome(n);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int net_conn_write_all(struct net_conn *c, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = net_conn_write(c, p, len);
		if (n < 0)
			return blocking_outcome(n);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
