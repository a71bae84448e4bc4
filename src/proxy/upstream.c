/*
 * upstream.c - connections to backends: opening them, and keeping idle ones per worker and
 * per backend for reuse (LIFO, so the warmest is reused and the coldest expire).
 *
 * An idle connection is still watched: if the backend closes it, or sends anything while no
 * request is outstanding, it is closed at once instead of being handed to the next request.
 */
#include "proxy/proxy-t.h"
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
	if (up->s)
		session_run(up->s);
	else if (events & (LOOP_READ | LOOP_HUP))
		upconn_close(up);
}

static void upconn_on_idle_timeout(struct loop_timer *t)
{
	upconn_close(container_of(t, struct upconn, timer));
}

static void idle_unlink(struct upconn *up)
{
	struct idle_list *l = &up->w->idle[up->be->id];
	if (up->prev)
		up->prev->next = up->next;
	else
		l->head = up->next;
	if (up->next)
		up->next->prev = up->prev;
	up->prev = up->next = NULL;
	up->idle = 0;
	l->count--;
}

struct upconn *upconn_get(struct worker *w, struct backend *be, int *err)
{
	struct idle_list *l = &w->idle[be->id];
	struct upconn *up = l->head;
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

void upconn_release(struct upconn *up)
{
	struct worker *w = up->w;
	struct idle_list *l = &w->idle[up->be->id];
	up->s = NULL;
	up->served++;
	if (l->count >= IDLE_MAX_PER_BACKEND || w->draining) {
		upconn_close(up);
		return;
	}
	buf_put(&w->bufs, up->in);
	up->in = NULL;
	up->idle = 1;
	up->next = l->head;
	if (l->head)
		l->head->prev = up;
	l->head = up;
	l->count++;
	loop_timer_set(w->loop, &up->timer, loop_now(w->loop) + w->px->conf->timeouts.idle_ms);
}

void upconn_close(struct upconn *up)
{
	struct worker *w = up->w;
	if (up->idle)
		idle_unlink(up);
	loop_timer_stop(w->loop, &up->timer);
	loop_io_del(w->loop, &up->io);
	close(up->io.fd);
	buf_put(&w->bufs, up->in);
	free(up);
}

void upconn_close_idle(struct worker *w)
{
	for (size_t i = 0; i < w->px->rt->nbackends; i++)
		while (w->idle[i].head)
			upconn_close(w->idle[i].head);
}
