/*
 * upstream.c - opening, reusing and closing connections to backends (see upstream.h).
 *
 * An idle connection is still watched: if the backend closes it, or sends anything while no
 * request is outstanding, it is closed at once instead of being handed to the next request.
 */
#include "proxy/upstream.h"
#include "core/log.h"
#include "net/sock.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define IDLE_MAX_PER_BACKEND 512

static void upconn_on_io(struct loop_io *io, unsigned events)
{
	struct upconn *up = container_of(io, struct upconn, io);
	if (events & (LOOP_READ | LOOP_HUP))
		up->readable = 1;
	if (events & LOOP_WRITE)
		up->writable = 1;
	if (events & LOOP_HUP)
		up->hup = 1;
	if (up->connecting && (events & (LOOP_WRITE | LOOP_HUP))) {
		up->connecting = 0;
		up->failed = sock_error(io->fd);
	}
	if (up->owner)
		up->on_event(up->owner);
	else if (events & (LOOP_READ | LOOP_HUP))
		upconn_close(up);
}

static void upconn_on_idle_timeout(struct loop_timer *t)
{
	upconn_close(container_of(t, struct upconn, timer));
}

static void idle_unlink(struct upconn *up)
{
	list_del(&up->w->idle[up->be->id], &up->idle_link);
	up->idle = 0;
}

struct upconn *upconn_get(struct worker *w, struct backend *be, int *err)
{
	struct list_node *n = list_first(&w->idle[be->id]);
	struct upconn *up = n ? container_of(n, struct upconn, idle_link) : NULL;
	if (up) {
		idle_unlink(up);
		loop_timer_stop(w->loop, &up->timer);
		return up;
	}
	int fd = sock_connect(&be->conf->ep.addr);
	if (fd < 0) {
		*err = fd;
		return NULL;
	}
	up = calloc(1, sizeof(*up));
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
	up->connecting = 1;
	int rc = loop_io_add(w->loop, &up->io);
	if (rc < 0) {
		close(fd);
		free(up);
		*err = rc;
		return NULL;
	}
	return up;
}

void upconn_own(struct upconn *up, void *owner, void (*on_event)(void *owner))
{
	up->owner = owner;
	up->on_event = on_event;
}

void upconn_release(struct upconn *up)
{
	struct worker *w = up->w;
	struct list_head *l = &w->idle[up->be->id];
	up->owner = NULL;
	up->served++;
	if (l->count >= IDLE_MAX_PER_BACKEND || w->draining) {
		upconn_close(up);
		return;
	}
	buf_put(&w->bufs, up->in);
	up->in = NULL;
	up->idle = 1;
	list_push_front(l, &up->idle_link);
	loop_timer_set(w->loop, &up->timer, loop_now(w->loop) + w->conf->timeouts.idle_ms);
}

void upconn_close(struct upconn *up)
{
	struct worker *w = up->w;
	if (up->idle)
		idle_unlink(up);
	loop_timer_stop(w->loop, &up->timer);
	loop_io_del(w->loop, &up->io);
	net_conn_close(&up->conn);
	buf_put(&w->bufs, up->in);
	free(up);
}

void upconn_close_idle(struct worker *w)
{
	for (size_t i = 0; i < w->rt->nbackends; i++) {
		struct list_node *n;
		while ((n = list_first(&w->idle[i])))
			upconn_close(container_of(n, struct upconn, idle_link));
	}
}
