/*
 * l4.c - listen[].mode: tcp connections: the pick and connect with its retries, the two ways
 * moved by splice(2) (or a buffer), half-close, and the one timer (see l4.h).
 *
 * Readiness is edge-triggered on both sockets. The client's events are recorded in its
 * transport (net_conn_ready: readable, hup) and the upstream connection's in its upconn
 * (upstream.h), neither of which reads for us; each event runs both ways until neither can
 * move. A way reads its source only while its pipe has room, and takes -EAGAIN from a read
 * as "drained" only when the pipe was empty (net/splice.h: a pipe with bytes in it may have
 * no slot free while the socket still holds more); a write's -EAGAIN waits for the next
 * write edge of the destination.
 *
 * A way holds its pipe only while bytes are in it or its source may have more: once empty
 * and drained it gives the pipe back to the worker's spares, and takes one again (a spare,
 * with no system call) when the next edge comes. A worker runs one connection at a time, so
 * a few spares serve all of its quiet connections.
 *
 * The timer is set for the ClientHello's deadline (listen.sni), the connect's, then the
 * idle one (the drain's end if sooner), and moved only when it fires (the last byte's time
 * is kept, and a timer that finds it moved is set again), so moving bytes costs no timer
 * operation.
 */
#include "proxy/l4.h"
#include "core/log.h"
#include "core/rand.h"
#include "net/addr.h"
#include "net/proxyproto.h"
#include "net/sni.h"
#include "net/sock.h"
#include "net/splice.h"
#include "proxy/attempt.h"
#include "proxy/classify.h"
#include "proxy/shed.h"
#include "runtime/pick.h"
#include "runtime/proxy_metric.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define L4_PIPE_BYTES (64u << 10) /* asked of F_SETPIPE_SZ: what one way holds in flight */
#define L4_PIPES_MAX 4096	  /* pipes one worker lends at once (two descriptors each) */
#define L4_SPARES_MAX 256	  /* ended connections kept for reuse, per worker */

/* One direction: from the client to the backend (L4_TO_BACKEND) or back (L4_TO_CLIENT). */
struct l4_dir {
	struct net_pipe pipe; /* rd -1: none held now */
	struct buf *buf;      /* instead of a pipe, when none could be had */
	unsigned eof : 1;     /* its source sent its end */
	unsigned shut : 1;    /* ... and it was passed on (shutdown of the destination) */
};

struct l4conn {
	struct list_node link; /* on w->l4_conns, or w->l4_spares */
	struct worker *w;
	const struct conf_listen *cl;
	struct loop_io io; /* the client's socket */
	struct net_conn conn;
	struct loop_timer timer;
	struct attempt att; /* the backend: its slot and upstream connection */
	struct l4_dir way[L4_WAYS];
	_Atomic uint32_t *ip_slot; /* limits.max_connections_per_ip's count, or NULL */
	uint64_t key;		   /* the client's address, hashed (consistent-hash) */
	size_t pool;		   /* in conf->pools: listen.pool's, or what listen.sni chose */
	uint64_t last_ms;	   /* when a byte last moved (or the connect finished) */
	unsigned tries;		   /* backends tried */
	int writable;		   /* the client's socket takes bytes */
	unsigned connected : 1;
	unsigned peeking : 1; /* listen.sni: waiting for the ClientHello to choose a pool */
};

static void l4_on_client_io(struct loop_io *io, unsigned events);
static void l4_on_backend(void *owner);
static void l4_on_timer(struct loop_timer *t);

/* Set the one timer: the hello's deadline (listen.sni), the connect's, else the idle one;
 * the drain's end if sooner. */
static void l4_arm(struct l4conn *c)
{
	struct worker *w = c->w;
	uint64_t at = c->connected ? c->last_ms + c->cl->idle_ms
		      : c->peeking ? c->last_ms + w->conf->timeouts.header_ms
				   : c->att.connect_ms + w->conf->timeouts.connect_ms;
	if (w->draining && w->drain_ms + c->cl->drain_ms < at)
		at = w->drain_ms + c->cl->drain_ms;
	loop_timer_set(w->loop, &c->timer, at);
}

/* Give back what the connection holds and count it out. <c> is gone after. */
static void l4_end(struct l4conn *c)
{
	struct worker *w = c->w;
	loop_timer_stop(w->loop, &c->timer);
	loop_io_del(w->loop, &c->io);
	net_conn_close(&c->conn);
	for (int i = 0; i < L4_WAYS; i++) {
		if (c->way[i].pipe.rd >= 0)
			net_pipe_give(&w->pipes, &c->way[i].pipe); /* closed if bytes are left */
		worker_buf_put(w, c->way[i].buf);
		c->way[i].buf = NULL;
	}
	attempt_end(&c->att, w, 0);
	if (c->ip_slot)
		atomic_fetch_sub_explicit(c->ip_slot, 1, memory_order_relaxed);
	list_del(&w->l4_conns, &c->link);
	if (w->l4_spares.count < L4_SPARES_MAX && !w->draining)
		list_push_front(&w->l4_spares, &c->link);
	else
		free(c);
	worker_client_gone(w);
}

/*
 * Pick a backend of the listener's pool other than <exclude> (NULL: any) and connect to it,
 * trying the next one when a connect fails at once. 0: connecting; -1: no backend left.
 */
static int l4_dial(struct l4conn *c, const struct backend *exclude)
{
	struct worker *w = c->w;
	struct pool_rt *pool = &w->rt->pools[c->pool];
	while (c->tries < pool->nbackends) {
		uint64_t now = loop_now(w->loop);
		struct pick_hint h = {.exclude = exclude, .key = c->key, .has_key = 1};
		struct backend *be = pool_pick(pool, now, rand_next(&w->rng), &h);
		if (!be)
			break;
		c->tries++;
		attempt_begin(&c->att, pool, be);
		int rc = attempt_connect(&c->att, w, c, l4_on_backend);
		if (rc == 0) {
			c->connected = 0;
			l4_arm(c);
			return 0;
		}
		attempt_end(&c->att, w, 0);
		if (sock_error_is_local(rc)) {
			log_warn_every(10000, "tcp listener %s: cannot connect to %s: %s here",
				       c->cl->address, be->name, strerror(-rc));
			return -1; /* another backend would fare no better */
		}
		backend_mark_failed(be, now);
		exclude = be;
	}
	pool_count(pool, PM_POOL_UNAVAILABLE, 1);
	return -1;
}

/* The connect to the attempt's backend failed (<err>): mark it, and try another. */
static void l4_connect_failed(struct l4conn *c, int err)
{
	struct backend *be = c->att.be;
	log_warn_every(10000, "tcp listener %s: backend %s: %s", c->cl->address, be->name,
		       strerror(-err));
	backend_mark_failed(be, loop_now(c->w->loop));
	attempt_end(&c->att, c->w, 0);
	if (l4_dial(c, be) < 0)
		l4_end(c);
}

/* Room to read into for <way>, taking a pipe (or, without one, a buffer) on first use. */
static ssize_t l4_room(struct worker *w, struct l4_dir *way)
{
	if (way->pipe.rd >= 0)
		return (ssize_t)(way->pipe.size - way->pipe.held);
	if (!way->buf && net_pipe_take(&w->pipes, &way->pipe, L4_PIPE_BYTES, L4_PIPES_MAX) == 0)
		return way->pipe.size;
	if (!way->buf && !(way->buf = buf_get(&w->bufs)))
		return -ENOMEM;
	buf_compact(way->buf);
	return (ssize_t)buf_room(way->buf);
}

static size_t l4_held(const struct l4_dir *way)
{
	return way->pipe.rd >= 0 ? way->pipe.held : way->buf ? buf_len(way->buf) : 0;
}

static ssize_t l4_in(struct l4_dir *way, struct net_conn *from, size_t room)
{
	if (way->pipe.rd >= 0)
		return net_splice_in(&way->pipe, from, room);
	ssize_t n = net_conn_read(from, way->buf->data + way->buf->end, room);
	if (n > 0)
		way->buf->end += (uint32_t)n;
	return n == -EINTR ? -EAGAIN : n;
}

static ssize_t l4_out(struct l4_dir *way, struct net_conn *to)
{
	if (way->pipe.rd >= 0)
		return net_splice_out(&way->pipe, to);
	ssize_t n = net_conn_write(to, buf_head(way->buf), buf_len(way->buf));
	if (n > 0)
		buf_consume(way->buf, (size_t)n);
	return n == -EINTR ? -EAGAIN : n;
}

/*
 * Move what <from> has for <to> through <way> until neither can go on, then pass an end on
 * once the way is empty. The bytes that went out (>= 0), or -errno: a read or write failed.
 */
static int64_t l4_pump(struct worker *w, struct l4_dir *way, struct net_conn *from,
		       struct net_conn *to, int *writable)
{
	int64_t moved = 0;
	for (;;) {
		ssize_t in = 0, out = 0, room = 0;
		if (!way->eof && from->readable && (room = l4_room(w, way)) > 0) {
			in = l4_in(way, from, (size_t)room);
			if (in == 0) {
				way->eof = 1;
			} else if (in == -EAGAIN) {
				if (!l4_held(way))
					from->readable = 0; /* drained: wait for the next edge */
				in = 0;
			} else if (in < 0) {
				return in;
			}
		}
		if (room < 0)
			return room;
		if (l4_held(way) && *writable) {
			out = l4_out(way, to);
			if (out == -EAGAIN) {
				*writable = 0;
				out = 0;
			} else if (out < 0) {
				return out;
			}
		}
		moved += out;
		if (in <= 0 && out <= 0)
			break;
	}
	if (way->eof && !way->shut && !l4_held(way)) {
		net_conn_shutdown(to); /* half-close: the other side hears the end */
		way->shut = 1;
	}
	if (!l4_held(way) && (!from->readable || way->eof)) {
		/* empty, its source drained: the pipe goes back to the spares, so a quiet
		 * connection holds none, and the next way to have bytes takes it */
		net_pipe_give(&w->pipes, &way->pipe);
		worker_buf_release(w, &way->buf);
	}
	return moved;
}

/* Move both ways as far as they go; end the connection when both have ended or one failed. */
static void l4_run(struct l4conn *c)
{
	struct worker *w = c->w;
	struct upconn *up = c->att.up;
	struct backend *be = c->att.be;
	int64_t to_be = l4_pump(w, &c->way[L4_TO_BACKEND], &c->conn, &up->conn, &up->writable);
	int64_t to_cl =
	    to_be < 0 ? 0 : l4_pump(w, &c->way[L4_TO_CLIENT], &up->conn, &c->conn, &c->writable);
	struct metrics_shard *shard = metrics_shard_self(be->metrics);
	if (to_be > 0)
		metrics_add(shard, PM_BACKEND_L4_BYTES, be->id * L4_WAYS + L4_TO_BACKEND,
			    (uint64_t)to_be);
	if (to_cl > 0)
		metrics_add(shard, PM_BACKEND_L4_BYTES, be->id * L4_WAYS + L4_TO_CLIENT,
			    (uint64_t)to_cl);
	if (to_be > 0 || to_cl > 0)
		c->last_ms = loop_now(w->loop);
	if (to_be < 0 || to_cl < 0 || (c->way[L4_TO_BACKEND].shut && c->way[L4_TO_CLIENT].shut))
		l4_end(c);
}

/* listen.sni: the pool for server name <name> (<len> bytes; NULL: the hello named none):
 * the first item that names it, exactly or as one label under a "*." one, else listen.pool;
 * -1: none. */
static ssize_t l4_sni_pool(const struct conf_listen *cl, const char *name, size_t len)
{
	const char *dot = name ? memchr(name, '.', len) : NULL;
	for (size_t i = 0; name && i < cl->nsni; i++) {
		const char *want = cl->sni[i].name;
		size_t n = strlen(want);
		if (want[0] == '*') {
			if (dot && dot > name && (size_t)(name + len - dot - 1) == n - 2 &&
			    !strncasecmp(dot + 1, want + 2, n - 2))
				return (ssize_t)cl->sni[i].pool;
		} else if (n == len && !strncasecmp(name, want, len)) {
			return (ssize_t)cl->sni[i].pool;
		}
	}
	return cl->pool_name ? (ssize_t)cl->pool : -1;
}

/*
 * listen.sni: look at what the client sent so far without taking it; once its ClientHello is
 * whole, its server name chooses the pool and the connect begins. Bytes that are no
 * ClientHello, a name no item matches (without listen.pool), or a hello past one record end
 * the connection; so does the client's end, or timeouts.header_ms (the timer).
 */
static void l4_peek(struct l4conn *c)
{
	uint8_t buf[NET_SNI_RECORD_MAX];
	const char *name = NULL;
	size_t len = 0;
	int avail = 0;
	/* the record's header first, then the record once the socket holds all of it: a hello
	 * sent a byte at a time costs a small look per byte, never a copy of all so far */
	ssize_t n = net_conn_peek(&c->conn, buf, 5);
	if (n == -EAGAIN)
		return;
	int rc = n > 0 ? net_sni_parse(buf, (size_t)n, &name, &len) : -EINVAL;
	if (rc == -EAGAIN && n == 5) {
		size_t need = 5 + ((size_t)buf[3] << 8 | buf[4]);
		if (ioctl(c->conn.fd, FIONREAD, &avail) < 0 || (size_t)avail < need)
			return; /* the rest of the record comes with the next edge */
		n = net_conn_peek(&c->conn, buf, need);
		rc = n > 0 ? net_sni_parse(buf, (size_t)n, &name, &len) : -EINVAL;
	}
	if (rc == -EAGAIN && n > 0 && n < 5)
		return;
	ssize_t pool = rc >= 0 ? l4_sni_pool(c->cl, rc == 1 ? name : NULL, rc == 1 ? len : 0) : -1;
	if (pool < 0) {
		log_warn_every(10000, "tcp listener %s: %s: closed", c->cl->address,
			       rc < 0 ? "no TLS ClientHello"
				      : "no listen.sni item names its server");
		l4_end(c);
		return;
	}
	c->peeking = 0;
	c->pool = (size_t)pool;
	if (l4_dial(c, NULL) < 0)
		l4_end(c);
}

static void l4_on_client_io(struct loop_io *io, unsigned events)
{
	struct l4conn *c = container_of(io, struct l4conn, io);
	if (events & LOOP_WRITE)
		c->writable = 1;
	(void)net_conn_ready(&c->conn, events); /* recorded; nothing reads for us */
	if (c->connected)
		l4_run(c);
	else if (c->peeking)
		l4_peek(c);
}

/*
 * pools.proxy_protocol: tell the backend, first, where the client came from and which of our
 * addresses it reached. A fresh connection's send buffer takes the few bytes at once; one
 * that does not (or an address the kernel will not give) ends the connection. 0 or -errno.
 */
static int l4_send_proxy_header(struct l4conn *c)
{
	struct sockaddr_storage src, dst;
	socklen_t slen = sizeof(src), dlen = sizeof(dst);
	char hdr[NET_PROXYPROTO_MAX];
	if (getpeername(c->conn.fd, (struct sockaddr *)&src, &slen) < 0 ||
	    getsockname(c->conn.fd, (struct sockaddr *)&dst, &dlen) < 0)
		return -errno;
	int n =
	    net_proxyproto_write((int)c->att.pool->conf->proxy_protocol, (struct sockaddr *)&src,
				 (struct sockaddr *)&dst, hdr, sizeof(hdr));
	if (n < 0)
		return n;
	ssize_t w = net_conn_write(&c->att.up->conn, hdr, (size_t)n);
	return w == n ? 0 : w < 0 ? (int)w : -EAGAIN;
}

static void l4_on_backend(void *owner)
{
	struct l4conn *c = owner;
	struct upconn *up = c->att.up;
	if (!c->connected) {
		if (up->connecting)
			return;
		if (up->failed) {
			l4_connect_failed(c, up->failed);
			return;
		}
		c->connected = 1;
		c->last_ms = loop_now(c->w->loop);
		backend_count(c->att.be, PM_BACKEND_L4_CONNECTIONS, 1);
		if (c->att.pool->conf->proxy_protocol && l4_send_proxy_header(c) < 0) {
			l4_end(c);
			return;
		}
		l4_arm(c);
	}
	l4_run(c);
}

static void l4_on_timer(struct loop_timer *t)
{
	struct l4conn *c = container_of(t, struct l4conn, timer);
	struct worker *w = c->w;
	uint64_t now = loop_now(w->loop);
	if (c->peeking) {
		l4_end(c); /* no whole ClientHello within timeouts.header_ms */
		return;
	}
	if (!c->connected) {
		l4_connect_failed(c, -ETIMEDOUT);
		return;
	}
	if ((w->draining && now >= w->drain_ms + c->cl->drain_ms) ||
	    now >= c->last_ms + c->cl->idle_ms) {
		l4_end(c);
		return;
	}
	l4_arm(c); /* bytes moved since it was set */
}

void l4_accept(struct worker *w, const struct listener *l, int fd,
	       const struct sockaddr_storage *peer)
{
	const struct conf_listen *cl = &w->conf->listens[l->index];
	char ip[64];
	_Atomic uint32_t *ip_slot = NULL;
	uint64_t key = classify_client_key((const struct sockaddr *)peer);
	net_addr_host((const struct sockaddr *)peer, ip, sizeof(ip));
	if (shed_check(w, l, key, ip, &ip_slot)) {
		close(fd);
		return;
	}
	struct list_node *n = list_pop_front(&w->l4_spares);
	struct l4conn *c = n ? container_of(n, struct l4conn, link) : malloc(sizeof(*c));
	if (!c)
		goto fail;
	memset(c, 0, sizeof(*c));
	c->w = w;
	c->cl = cl;
	c->io.fd = fd;
	c->io.fn = l4_on_client_io;
	net_conn_init(&c->conn, fd);
	c->timer.fn = l4_on_timer;
	c->ip_slot = ip_slot;
	c->key = key;
	c->writable = 1;
	for (int i = 0; i < L4_WAYS; i++)
		c->way[i].pipe.rd = c->way[i].pipe.wr = -1;
	if (loop_io_add(w->loop, &c->io) < 0) {
		free(c);
		goto fail;
	}
	list_push_front(&w->l4_conns, &c->link);
	w->nclients++;
	if (cl->nsni) { /* the hello chooses the pool: its first edge (l4_peek) */
		c->peeking = 1;
		c->last_ms = loop_now(w->loop);
		l4_arm(c);
		return;
	}
	c->pool = cl->pool;
	if (l4_dial(c, NULL) < 0)
		l4_end(c);
	return;
fail:
	if (ip_slot)
		atomic_fetch_sub_explicit(ip_slot, 1, memory_order_relaxed);
	close(fd);
}

void l4_close_idle(struct worker *w, int all)
{
	struct list_node *n, *next;
	for (n = list_first(&w->l4_conns); n; n = next) {
		next = list_next(&w->l4_conns, n);
		struct l4conn *c = container_of(n, struct l4conn, link);
		if (all)
			l4_end(c);
		else if (c->connected)
			l4_arm(c); /* listen[].drain_ms from now at most */
	}
	while (all && (n = list_pop_front(&w->l4_spares)))
		free(container_of(n, struct l4conn, link));
}
