/*
 * splice.c - pipes, their spares, and the two splice(2) moves through them (see splice.h).
 */
#include "net/splice.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int net_pipe_open(struct net_pipe *p, size_t size)
{
	int fds[2];
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0) {
		p->rd = p->wr = -1;
		return -errno;
	}
	p->rd = fds[0];
	p->wr = fds[1];
	p->held = 0;
	/* past fs.pipe-max-size (or the user's pipe pages) the pipe keeps its default size */
	if (size <= INT32_MAX)
		(void)fcntl(p->wr, F_SETPIPE_SZ, (int)size);
	int got = fcntl(p->wr, F_GETPIPE_SZ);
	p->size = got > 0 ? (uint32_t)got : 65536;
	return 0;
}

void net_pipe_close(struct net_pipe *p)
{
	if (p->rd >= 0)
		close(p->rd);
	if (p->wr >= 0)
		close(p->wr);
	p->rd = p->wr = -1;
	p->held = 0;
}

int net_pipe_take(struct net_pipe_spares *s, struct net_pipe *p, size_t size, unsigned max)
{
	if (s->lent >= max)
		return -EBUSY;
	if (s->n)
		*p = s->spare[--s->n];
	else {
		int err = net_pipe_open(p, size);
		if (err < 0)
			return err;
	}
	s->lent++;
	return 0;
}

void net_pipe_give(struct net_pipe_spares *s, struct net_pipe *p)
{
	if (p->rd < 0)
		return;
	s->lent--;
	if (!p->held && s->n < NET_PIPE_SPARES) {
		s->spare[s->n++] = *p;
		p->rd = p->wr = -1;
		return;
	}
	net_pipe_close(p); /* bytes nobody will read: they go with it */
}

void net_pipe_spares_drain(struct net_pipe_spares *s)
{
	while (s->n)
		net_pipe_close(&s->spare[--s->n]);
}

/* Bytes <from>'s ring holds, at most <max>, written into the pipe: a count, or -errno. */
static ssize_t ring_held_in(struct net_pipe *p, struct net_conn *from, size_t max)
{
	char tmp[16384];
	size_t n = loop_ring_peek(&from->ring, tmp, max < sizeof(tmp) ? max : sizeof(tmp));
	ssize_t w = write(p->wr, tmp, n);
	if (w < 0)
		return errno == EINTR ? -EAGAIN : -errno;
	loop_ring_take(&from->ring, tmp, (size_t)w);
	p->held += (uint32_t)w;
	return w;
}

ssize_t net_splice_in(struct net_pipe *p, struct net_conn *from, size_t max)
{
	if (from->ring.loop) {
		if (from->ring.held)
			return ring_held_in(p, from, max);
		if (from->ring.armed)
			return -EAGAIN; /* a receive still in the ring: its completion comes first
					 */
		if (from->ring.end)
			return from->ring.end == 1 ? 0 : from->ring.end;
	}
	ssize_t n = splice(from->fd, NULL, p->wr, NULL, max, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
	if (n < 0)
		return errno == EINTR ? -EAGAIN : -errno;
	p->held += (uint32_t)n;
	return n;
}

ssize_t net_splice_out(struct net_pipe *p, struct net_conn *to)
{
	if (!p->held)
		return 0;
	if (to->ring.loop && to->ring.tx_err)
		return to->ring.tx_err;
	if (to->ring.loop && to->ring.tx)
		return -EAGAIN; /* the ring's send first: its completion is the write edge */
	ssize_t n = splice(p->rd, NULL, to->fd, NULL, p->held, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
	if (n < 0)
		return errno == EINTR ? -EAGAIN : -errno;
	p->held -= (uint32_t)n;
	return n;
}
