/*
 * worker.c - worker threads: listeners, accepting, the connection cap, and draining.
 *
 * Each worker has its own listening sockets on the same addresses (SO_REUSEPORT), so the
 * kernel spreads connections and no lock is taken to accept. A socket handed over by the
 * service manager (socket activation, proxy.c) is the exception: there is one, each worker
 * accepts on its own dup() of it, and whichever worker wakes first takes the connection;
 * connections that arrive while no process runs wait in its backlog, which the manager
 * keeps open across restarts. Accepting pauses in two cases,
 * and new clients wait in the kernel backlog meanwhile: at the connection cap, until a
 * client connection ends; and when the process is out of descriptors (or socket buffers, or
 * memory), until a connection ends or ACCEPT_RETRY_MS passes, whichever comes first. Listeners are
 * edge-triggered, so resuming always accepts until the backlog is empty: waiting for the
 * next connection to arrive would leave the ones already queued unanswered.
 */
#include "proxy/worker.h"
#include "core/log.h"
#include "net/sock.h"
#include "net/tls.h"
#include "runtime/tokprompt.h"

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
	/* a drain asked for mid-loop: the clients still queued are the next generation's */
	while (!w->draining && !w->accept_paused && !atomic_load(&w->drain_requested)) {
		if (w->nclients >= w->max_clients) {
			log_warn_every(10000,
				       "connection limit reached (%u on this worker); "
				       "new clients wait in the backlog",
				       w->max_clients);
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
			log_warn_every(10000,
				       "accept: %s (%u clients on this worker); new clients "
				       "wait in the backlog until a descriptor frees",
				       strerror(-fd), w->nclients);
			w->accept_paused = 1;
			loop_timer_set(w->loop, &w->accept_timer,
				       loop_now(w->loop) + ACCEPT_RETRY_MS);
			return;
		}
		w->sh->ops->accept(w, l, fd, &peer);
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

void worker_client_gone(struct worker *w)
{
	w->nclients--;
	if (w->draining) {
		if (!w->nclients)
			loop_stop(w->loop);
		return;
	}
	/* the client's descriptors are free now, whichever way accepting was paused */
	if (w->accept_paused && w->nclients < w->max_clients)
		worker_resume_accept(w);
}

static void worker_start_drain(struct worker *w)
{
	w->draining = 1;
	w->drain_ms = loop_now(w->loop);
	loop_timer_stop(w->loop, &w->accept_timer);
	worker_close_listeners(w);
	atomic_store(&w->accept_stopped, 1);
	/* idle clients go now; the others finish their exchange first */
	w->sh->ops->close_idle(w, 0);
	if (!w->nclients)
		loop_stop(w->loop);
}

static void worker_on_wake(void *arg)
{
	struct worker *w = arg;
	w->sh->ops->take_grants(w);
	w->sh->ops->take_fills(w);
	w->sh->ops->peek(w);
	if (atomic_load(&w->drain_requested) && !w->draining)
		worker_start_drain(w);
}

/* A turn has ended: nothing of this worker still points into a table retired before it. */
static void worker_after_turn(void *arg)
{
	struct worker *w = arg;
	atomic_store_explicit(&w->turns, atomic_load_explicit(&w->turns, memory_order_relaxed) + 1,
			      memory_order_release);
}

/* How many listening sockets worker <id> accepts on: one per listener, more where it takes
 * over several of a reload's (struct listen_fds). */
static size_t worker_count_listeners(const struct worker_shared *sh, unsigned id)
{
	size_t count = 0;
	for (size_t i = 0; i < sh->conf->nlistens; i++) {
		size_t n = sh->handed ? sh->handed[i].n : 0, took = 0;
		for (size_t j = id; j < n; j += sh->nworkers)
			took++;
		count += took ? took : 1;
	}
	return count;
}

/* Accept on listener <index> through <l>: a dup() of <given>, or (-1) a socket of its own. */
static int worker_add_listener(struct worker *w, struct listener *l, size_t index, int given,
			       char *err, size_t errlen)
{
	const struct conf_listen *cl = &w->conf->listens[index];
	int fd = given >= 0 ? sock_dup(given) : sock_listen(&cl->addr, 1);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", cl->address, strerror(-fd));
		return fd;
	}
	l->io.fd = fd;
	l->io.fn = listener_on_io;
	l->index = (unsigned)index;
	l->w = w;
	int rc = loop_io_add(w->loop, &l->io);
	if (rc < 0)
		snprintf(err, errlen, "cannot watch %s: %s", cl->address, strerror(-rc));
	return rc;
}

int worker_init(struct worker *w, struct worker_shared *sh, unsigned id, unsigned max_clients,
		char *err, size_t errlen)
{
	const struct conf *c = sh->conf;
	int rc;
	memset(w, 0, sizeof(*w));
	w->id = id;
	w->sh = sh;
	w->conf = sh->conf;
	w->rt = sh->rt;
	w->shard = metrics_shard(w->rt->metrics, id);
	if (!w->shard) /* more workers than shards: never, but count right anyway */
		w->shard = metrics_shard_shared(w->rt->metrics);
	list_init(&w->clients);
	list_init(&w->l4_conns);
	list_init(&w->l4_spares);
	list_init(&w->free_exchanges);
	list_init(&w->live_exchanges);
	if (sh->gen)
		snprintf(w->tag, sizeof(w->tag), "w%u.%u", id, sh->gen);
	else
		snprintf(w->tag, sizeof(w->tag), "w%u", id);
	uint32_t bufsize = c->limits.max_header_bytes + 1024;
	if (bufsize < 16384)
		bufsize = 16384;
	buf_pool_init(&w->bufs, bufsize, 256);
	uint64_t bodysize = c->limits.body_buffer_bytes + bufsize;
	buf_pool_init(&w->body_bufs, (uint32_t)bodysize, 16);
	w->max_clients = max_clients;
	if (getrandom(&w->rng, sizeof(w->rng), 0) != sizeof(w->rng))
		w->rng = (uint64_t)id * 0x9e3779b97f4a7c15u + 1;
	size_t nidle = sh->rt->nbackends ? sh->rt->nbackends : 1;
	w->idle = calloc(nidle, sizeof(*w->idle));
	w->h2_conns = calloc(nidle, sizeof(*w->h2_conns));
	w->tls_sessions = calloc(nidle, sizeof(*w->tls_sessions));
	w->nlisteners = worker_count_listeners(sh, id);
	w->listeners = calloc(w->nlisteners ? w->nlisteners : 1, sizeof(*w->listeners));
	if (!w->idle || !w->h2_conns || !w->tls_sessions || !w->listeners) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < nidle; i++) {
		list_init(&w->idle[i]);
		list_init(&w->h2_conns[i]);
	}
	for (size_t i = 0; i < w->nlisteners; i++)
		w->listeners[i].io.fd = -1;
	if ((rc = loop_create(&w->loop)) < 0) {
		snprintf(err, errlen, "cannot create event loop: %s", strerror(-rc));
		return rc;
	}
	admission_inbox_init(&w->inbox, w->loop);
	pthread_mutex_init(&w->cache_inbox.lock, NULL);
	list_init(&w->cache_inbox.ready);
	list_init(&w->refreshes);
	loop_set_wake_hook(w->loop, worker_on_wake, w);
	loop_set_after_hook(w->loop, worker_after_turn, w);
	w->accept_timer.fn = worker_on_accept_timer;
	size_t k = 0;
	for (size_t i = 0; i < c->nlistens; i++) {
		const struct listen_fds *h = sh->handed ? &sh->handed[i] : NULL;
		size_t n = h ? h->n : 0, took = 0;
		for (size_t j = id; j < n; j += sh->nworkers, took++)
			if ((rc = worker_add_listener(w, &w->listeners[k++], i, h->fd[j], err,
						      errlen)) < 0)
				return rc;
		if (took)
			continue;
		if ((rc = worker_add_listener(w, &w->listeners[k++], i, n ? h->fd[id % n] : -1, err,
					      errlen)) < 0)
			return rc;
	}
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	log_set_thread_tag(w->tag);
	/* this thread's counters: its own shard of the registry, no atomic shared per request */
	metrics_thread_bind(w->rt->metrics, metrics_shard(w->rt->metrics, w->id));
	loop_run(w->loop);
	atomic_fetch_sub(&w->sh->running, 1);
	loop_wake(w->sh->main_loop);
	return NULL;
}

int worker_start(struct worker *w)
{
	atomic_fetch_add(&w->sh->running, 1);
	int rc = pthread_create(&w->thread, NULL, worker_main, w);
	if (rc) {
		atomic_fetch_sub(&w->sh->running, 1);
		return -rc;
	}
	return 0;
}

void worker_request_drain(struct worker *w)
{
	atomic_store(&w->drain_requested, 1);
	loop_wake(w->loop);
}

int worker_accept_stopped(const struct worker *w)
{
	return atomic_load(&w->accept_stopped);
}

void worker_destroy(struct worker *w)
{
	w->draining = 1;
	if (w->idle && w->loop)
		w->sh->ops->close_idle(w, 1);
	worker_close_listeners(w);
	loop_destroy(w->loop);
	if (w->loop) {
		admission_inbox_destroy(&w->inbox);
		pthread_mutex_destroy(&w->cache_inbox.lock);
	}
	buf_pool_drain(&w->bufs);
	buf_pool_drain(&w->body_bufs);
	smallmem_drain(&w->h2mem); /* the sessions have ended (close_idle above) */
	if (w->upconns.per)
		slab_drain(&w->upconns);
	net_pipe_spares_drain(&w->pipes);
	if (w->tokp)
		tokprompt_free(w->tokp);
	free(w->tokp);
	free(w->idle);
	free(w->h2_conns);
	for (size_t i = 0; w->tls_sessions && i < w->rt->nbackends; i++)
		net_tls_session_free(w->tls_sessions[i]);
	free(w->tls_sessions);
	free(w->listeners);
}

ssize_t worker_read(struct worker *w, struct net_conn *c, struct buf **b, int *readable, int hup)
{
	if (!*b && !(*b = buf_get(&w->bufs)))
		return -ENOMEM;
	if (!buf_room(*b))
		buf_compact(*b);
	size_t room = buf_room(*b);
	if (!room)
		return -ENOSPC;
	ssize_t n = net_conn_read(c, (*b)->data + (*b)->end, room);
	if (n == -EAGAIN || n == -EINTR) {
		*readable = 0;
		return -EAGAIN;
	}
	if (n < 0)
		return n;
	/* a short plain read drained the socket; TLS hands out a record at a time, and more may
	 * wait in the socket or in OpenSSL: only -EAGAIN says it is drained */
	if ((size_t)n < room && !hup && !c->ssl)
		*readable = 0;
	(*b)->end += (uint32_t)n;
	return n;
}

void worker_buf_put(struct worker *w, struct buf *b)
{
	if (b)
		buf_put(b->cap == w->bufs.size ? &w->bufs : &w->body_bufs, b);
}

void worker_buf_release(struct worker *w, struct buf **b)
{
	if (*b && !buf_len(*b)) {
		worker_buf_put(w, *b);
		*b = NULL;
	}
}
