/*
 * worker.c - worker threads: listeners, accepting, the connection cap, and draining.
 *
 * Each worker has its own listening sockets on the same addresses (SO_REUSEPORT), so the
 * kernel spreads connections and no lock is taken to accept. Accepting pauses in two cases,
 * and new clients wait in the kernel backlog meanwhile: at the connection cap, until a
 * session ends; and when the process is out of descriptors (or socket buffers, or memory),
 * until a session ends or ACCEPT_RETRY_MS passes, whichever comes first. Listeners are
 * edge-triggered, so resuming always accepts until the backlog is empty: waiting for the
 * next connection to arrive would leave the ones already queued unanswered.
 */
#include "proxy/worker.h"
#include "core/log.h"
#include "net/sock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define ACCEPT_RETRY_MS 200

/* Accept until the backlog is empty, the cap is reached, or descriptors run out. */
static void worker_accept(struct worker *w, struct listener *l)
{
	while (!w->draining && !w->accept_paused) {
		if (w->nsessions >= w->max_sessions) {
			log_warn_every(10000, "connection limit reached (%u on this worker); "
					      "new clients wait in the backlog", w->max_sessions);
			w->accept_paused = 1;
			return;
		}
		struct sockaddr_storage peer;
		socklen_t plen;
		int fd = sock_accept(l->io.fd, &peer, &plen);
		if (fd == -EAGAIN)
			return;
		if (fd == -ECONNABORTED || fd == -EINTR || fd == -EPROTO)
			continue; /* that client is gone; the next one may be waiting */
		if (fd < 0) {
			log_warn_every(10000, "accept: %s (%u clients on this worker); new clients "
					      "wait in the backlog until a descriptor frees",
				       strerror(-fd), w->nsessions);
			w->accept_paused = 1;
			loop_timer_set(w->loop, &w->accept_timer,
				       loop_now(w->loop) + ACCEPT_RETRY_MS);
			return;
		}
		session_accept(w, fd, &peer);
	}
}

/* Accept again on every listener, emptying their backlogs. */
static void worker_resume_accept(struct worker *w)
{
	w->accept_paused = 0;
	loop_timer_stop(w->loop, &w->accept_timer);
	for (size_t i = 0; i < w->nlisteners && !w->accept_paused; i++)
		worker_accept(w, &w->listeners[i]);
}

static void worker_on_accept_timer(struct loop_timer *t)
{
	struct worker *w = container_of(t, struct worker, accept_timer);
	if (!w->draining)
		worker_resume_accept(w);
}

static void listener_on_io(struct loop_io *io, unsigned events)
{
	struct listener *l = container_of(io, struct listener, io);
	(void)events;
	worker_accept(l->w, l);
}

static void worker_close_listeners(struct worker *w)
{
	for (size_t i = 0; i < w->nlisteners; i++) {
		if (w->listeners[i].io.fd < 0)
			continue;
		if (w->loop)
			loop_io_del(w->loop, &w->listeners[i].io);
		close(w->listeners[i].io.fd);
		w->listeners[i].io.fd = -1;
	}
}

void worker_session_gone(struct worker *w)
{
	if (w->draining) {
		if (!w->nsessions)
			loop_stop(w->loop);
		return;
	}
	/* the session's descriptors are free now, whichever way accepting was paused */
	if (w->accept_paused && w->nsessions < w->max_sessions)
		worker_resume_accept(w);
}

static void worker_start_drain(struct worker *w)
{
	w->draining = 1;
	loop_timer_stop(w->loop, &w->accept_timer);
	worker_close_listeners(w);
	upconn_close_idle(w);
	/* idle clients go now; the others finish their exchange first */
	struct session *s = w->sessions, *next;
	for (; s; s = next) {
		next = s->next;
		if (s->state == S_HEAD && (!s->in || !buf_len(s->in)))
			session_close(s);
	}
	if (!w->nsessions)
		loop_stop(w->loop);
}

static void worker_on_wake(void *arg)
{
	struct worker *w = arg;
	session_take_grants(w);
	if (atomic_load(&w->drain_requested) && !w->draining)
		worker_start_drain(w);
}

int worker_init(struct worker *w, struct proxy *px, unsigned id, unsigned max_sessions,
		char *err, size_t errlen)
{
	const struct conf *c = px->conf;
	int rc;
	memset(w, 0, sizeof(*w));
	w->id = id;
	w->px = px;
	snprintf(w->tag, sizeof(w->tag), "w%u", id);
	uint32_t bufsize = c->limits.max_header_bytes + 1024;
	if (bufsize < 16384)
		bufsize = 16384;
	buf_pool_init(&w->bufs, bufsize, 256);
	uint64_t bodysize = c->limits.body_buffer_bytes + bufsize;
	buf_pool_init(&w->body_bufs, (uint32_t)bodysize, 16);
	w->max_sessions = max_sessions;
	worker_inbox_init(&w->inbox);
	if (getrandom(&w->rng, sizeof(w->rng), 0) != sizeof(w->rng))
		w->rng = (uint64_t)id * 0x9e3779b97f4a7c15u + 1;
	w->idle = calloc(px->rt->nbackends ? px->rt->nbackends : 1, sizeof(*w->idle));
	w->listeners = calloc(c->nlistens, sizeof(*w->listeners));
	if (!w->idle || !w->listeners) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->nlistens; i++)
		w->listeners[i].io.fd = -1;
	w->nlisteners = c->nlistens;
	if ((rc = loop_create(&w->loop)) < 0) {
		snprintf(err, errlen, "cannot create event loop: %s", strerror(-rc));
		return rc;
	}
	loop_set_wake_hook(w->loop, worker_on_wake, w);
	w->accept_timer.fn = worker_on_accept_timer;
	for (size_t i = 0; i < c->nlistens; i++) {
		struct listener *l = &w->listeners[i];
		int fd = sock_listen(&c->listens[i].addr, 1);
		if (fd < 0) {
			snprintf(err, errlen, "cannot listen on %s: %s", c->listens[i].address,
				 strerror(-fd));
			return fd;
		}
		l->io.fd = fd;
		l->io.fn = listener_on_io;
		l->w = w;
		if ((rc = loop_io_add(w->loop, &l->io)) < 0) {
			snprintf(err, errlen, "cannot watch %s: %s", c->listens[i].address,
				 strerror(-rc));
			return rc;
		}
	}
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	log_set_thread_tag(w->tag);
	loop_run(w->loop);
	atomic_fetch_sub(&w->px->running, 1);
	loop_wake(w->px->main_loop);
	return NULL;
}

int worker_start(struct worker *w)
{
	atomic_fetch_add(&w->px->running, 1);
	int rc = pthread_create(&w->thread, NULL, worker_main, w);
	if (rc) {
		atomic_fetch_sub(&w->px->running, 1);
		return -rc;
	}
	return 0;
}

void worker_request_drain(struct worker *w)
{
	atomic_store(&w->drain_requested, 1);
	loop_wake(w->loop);
}

void worker_destroy(struct worker *w)
{
	w->draining = 1;
	while (w->sessions)
		session_close(w->sessions);
	if (w->idle && w->px->rt)
		upconn_close_idle(w);
	worker_close_listeners(w);
	loop_destroy(w->loop);
	worker_inbox_destroy(&w->inbox);
	buf_pool_drain(&w->bufs);
	buf_pool_drain(&w->body_bufs);
	free(w->idle);
	free(w->listeners);
}
