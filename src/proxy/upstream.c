/*
 * upstream.c - opening, reusing and closing connections to backends (see upstream.h).
 *
 * An idle connection is still watched: if the backend closes it (a FIN, a reset, TLS's
 * close_notify), or sends anything while no request is outstanding, it is closed at once
 * instead of being handed to the next request. A TLS session ticket that arrives while idle
 * is taken in (it is no request's answer) and the connection stays. Before an idle
 * connection is handed out it is looked at once more without waiting, for an end that
 * arrived in this loop turn and was not yet dispatched.
 *
 * A backend slot whose address discovery changed (control/discover.c) bumps its generation: a
 * connection made before is closed when it comes back or is next looked for, never reused.
 *
 * A TLS connection closed cleanly sends close_notify first: OpenSSL does not resume a TLS
 * 1.2 session whose connection ended without one.
 *
 * The idle timer is left armed while a connection carries a request: a kept-alive one goes
 * out and comes back every request, and stopping and arming its timer each time moved it in
 * the loop's timer heap twice a request. So the timer fires at the deadline it was armed for
 * (or earlier than idle_due_ms, never later): in use, nothing happens (the release arms it
 * again); idle but put off since, it is armed for idle_due_ms.
 */
#include "proxy/upstream.h"
#include "core/log.h"
#include "net/sock.h"
#include "net/tls.h"
#include "runtime/proxy_metric.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IDLE_MAX_PER_BACKEND 512

/* Is idle <up> still good to carry a request: open, and nothing unasked-for waiting? */
static int idle_alive(struct upconn *up)
{
	char b;
	if (up->conn.ssl) /* records: a ticket is consumed (-EAGAIN), a close_notify reads 0 */
		return net_conn_read(&up->conn, &b, 1) == -EAGAIN;
	return net_conn_peek(&up->conn, &b, 1) == -EAGAIN;
}

/* One step of the TLS handshake of <up>. 1: finished (done or failed); 0: it waits. */
static int handshake_step(struct upconn *up)
{
	int rc = net_tls_handshake(&up->conn);
	if (rc == -EAGAIN)
		return 0;
	up->handshaking = 0;
	up->connecting = 0;
	if (rc == 0) {
		backend_count(
		    up->be,
		    net_tls_resumed(&up->conn) ? PM_BACKEND_TLS_RESUMED : PM_BACKEND_TLS_FULL, 1);
		up->readable = up->writable = 1; /* whatever edges the handshake took */
		up->conn.readable = 1;
		return 1;
	}
	char why[256];
	if (rc == -ECONNRESET)
		snprintf(why, sizeof(why), "the backend closed the connection");
	else
		net_tls_error_text(&up->conn, why, sizeof(why));
	up->failed = rc;
	up->tls_failed = 1;
	free(up->tls_error);
	up->tls_error = strdup(why);
	backend_count(up->be, PM_BACKEND_TLS_FAILURES, 1);
	return 1;
}

static void upconn_on_io(struct loop_io *io, unsigned events)
{
	struct upconn *up = container_of(io, struct upconn, io);
	if (events & (LOOP_READ | LOOP_HUP))
		up->readable = 1;
	if (events & LOOP_WRITE)
		up->writable = 1;
	if (events & LOOP_HUP)
		up->hup = 1;
	if (up->connecting && !up->handshaking && (events & (LOOP_WRITE | LOOP_HUP))) {
		up->failed = sock_error(io->fd);
		if (up->failed || !up->conn.ssl)
			up->connecting = 0;
		else
			up->handshaking = 1;
	}
	if (up->handshaking && !handshake_step(up))
		return; /* the owner hears of it once it is ready or has failed */
	if (net_conn_ready(&up->conn, events))
		return; /* the transport read for the owner and called it back */
	if (up->owner)
		up->on_event(up->owner);
	else if ((events & (LOOP_READ | LOOP_HUP)) && (up->hup || !idle_alive(up)))
		upconn_close(up);
}

static void upconn_on_idle_timeout(struct loop_timer *t)
{
	struct upconn *up = container_of(t, struct upconn, timer);
	if (!up->idle)
		return; /* carrying a request: upconn_release() arms it again */
	if (loop_now(up->w->loop) < up->idle_due_ms) {
		loop_timer_set(up->w->loop, &up->timer, up->idle_due_ms);
		return;
	}
	upconn_close(up);
}

static void idle_unlink(struct upconn *up)
{
	list_del(&up->w->idle[up->be->id], &up->idle_link);
	up->idle = 0;
}

struct upconn *upconn_open(struct worker *w, struct backend *be, int *err)
{
	unsigned gen = atomic_load_explicit(&be->gen, memory_order_relaxed);
	int fd = sock_connect(&be->addr);
	if (fd < 0) {
		*err = fd;
		return NULL;
	}
	/* not malloc's: a burst's connections, closed as it ends, would leave holes between the
	 * records of the clients that stay, on pages it cannot give back (core/slab.h) */
	if (!w->upconns.per)
		slab_init(&w->upconns, sizeof(struct upconn));
	struct upconn *up = slab_alloc(&w->upconns);
	if (!up) {
		close(fd);
		*err = -ENOMEM;
		return NULL;
	}
	up->io.fd = fd;
	net_conn_init(&up->conn, fd);
	up->io.fn = upconn_on_io;
	up->timer.fn = upconn_on_idle_timeout;
	up->w = w;
	up->be = be;
	up->gen = gen;
	up->connecting = 1;
	int rc = 0;
	if (be->tls) {
		struct net_tls_peer peer = {.sni = be->conf->tls_sni,
					    .verify_name = be->conf->tls_verify_name,
					    .session = &w->tls_sessions[be->id]};
		if (be->conf->protocol == CONF_PROTO_H2) { /* HTTP/2, agreed by ALPN */
			peer.alpn = (const unsigned char *)"\x02h2";
			peer.alpn_len = 3;
		}
		rc = net_tls_attach_client(&up->conn, be->tls, &peer);
	}
	if (rc == 0)
		rc = loop_io_add(w->loop, &up->io);
	if (rc < 0) {
		net_conn_close(&up->conn);
		slab_free(&w->upconns, up);
		*err = rc;
		return NULL;
	}
	return up;
}

struct upconn *upconn_get(struct worker *w, struct backend *be, int *err)
{
	struct list_node *n;
	while ((n = list_first(&w->idle[be->id]))) {
		struct upconn *up = container_of(n, struct upconn, idle_link);
		idle_unlink(up); /* (its timer stays armed: see the top of this file) */
		/* a plain one the backend closed was seen by the loop (a read event); TLS is
		 * looked at once more: a ticket or close_notify may sit in OpenSSL's buffer */
		if (!up->hup && up->gen == atomic_load_explicit(&be->gen, memory_order_relaxed) &&
		    (!up->conn.ssl || idle_alive(up)))
			return up;
		upconn_close(up); /* closed, or to an address discovery has since replaced */
	}
	return upconn_open(w, be, err);
}

void upconn_own(struct upconn *up, void *owner, void (*on_event)(void *owner))
{
	up->owner = owner;
	up->on_event = on_event;
	up->read_got = 0;
	up->read_end = 0;
	net_conn_read_stop(&up->conn);
}

void upconn_release(struct upconn *up)
{
	struct worker *w = up->w;
	struct list_head *l = &w->idle[up->be->id];
	up->owner = NULL;
	up->served++;
	net_conn_read_stop(&up->conn);
	if (l->count >= IDLE_MAX_PER_BACKEND || w->draining ||
	    up->gen != atomic_load_explicit(&up->be->gen, memory_order_relaxed)) {
		upconn_close(up);
		return;
	}
	buf_put(&w->bufs, up->in);
	up->in = NULL;
	up->idle = 1;
	list_push_front(l, &up->idle_link);
	up->idle_due_ms = loop_now(w->loop) + w->conf->timeouts.idle_ms;
	if (!loop_timer_armed(&up->timer) || up->idle_due_ms < up->timer.deadline_ms)
		loop_timer_set(w->loop, &up->timer, up->idle_due_ms);
}

void upconn_close(struct upconn *up)
{
	struct worker *w = up->w;
	if (up->idle)
		idle_unlink(up);
	loop_timer_stop(w->loop, &up->timer);
	loop_io_del(w->loop, &up->io);
	if (up->conn.ssl && !up->connecting && !up->failed)
		net_conn_shutdown(&up->conn); /* close_notify: the session stays resumable */
	net_conn_close(&up->conn);
	buf_put(&w->bufs, up->in);
	free(up->tls_error);
	slab_free(&w->upconns, up);
}

void upconn_close_idle(struct worker *w)
{
	for (size_t i = 0; i < w->rt->nbackends; i++) {
		struct list_node *n;
		while ((n = list_first(&w->idle[i])))
			upconn_close(container_of(n, struct upconn, idle_link));
	}
}
