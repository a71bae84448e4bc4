/*
 * pull.c - the server side of `xfer get`: a PULL connection says GET with the names it wants,
 * and this daemon becomes the sender over the client's own connections.
 *
 * Every one of the client's connections says GET with the same names and session id. The
 * first becomes the sending side: the names are found beneath the served directory (never
 * leaving it) and the trees walked while their manifest goes out in parts (send.c), by an
 * engine over adopted connections (engine.h, struct xfer_adopt) instead of dialing; the others
 * queue in the struct pull until a stream takes them. A connection handed to a pull stays counted
 * by the daemon until the pull closes it. When the GET is over its session id is remembered (a
 * tomb), so a connection arriving late does not start it again.
 */
#include "xfer/pull.h"

#include "core/log.h"
#include "core/loop.h"
#include "xfer/engine.h"
#include "xfer/send.h"
#include "xfer/server.h"
#include "xfer/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PULL_MAX_STREAMS 64

/* A GET being answered: the client's connections wait here until a stream adopts them. */
struct pull {
	struct list_node node; /* on srv->pulls */
	uint8_t id[XFER_SESSION_LEN];
	struct xfer_server *srv;
	struct net_conn ios[PULL_MAX_STREAMS];
	unsigned links[PULL_MAX_STREAMS];
	uint64_t live_ids[PULL_MAX_STREAMS]; /* each still counted until pull_put() closes it */
	unsigned head, tail;		     /* fds[head..tail) wait */
	unsigned expected;		     /* connections the client said it opens */
	int closed;
	pthread_cond_t cv; /* under srv->mu */
};

/* The GET being answered for transfer <id>, or NULL (under s->mu). */
static struct pull *pull_find_locked(struct xfer_server *s, const uint8_t id[XFER_SESSION_LEN])
{
	for (struct list_node *n = list_first(&s->pulls); n; n = list_next(&s->pulls, n)) {
		struct pull *p = container_of(n, struct pull, node);
		if (!memcmp(p->id, id, XFER_SESSION_LEN))
			return p;
	}
	return NULL;
}

/* The engine's way to a client connection: the next one queued, waiting a little for more. */
static int pull_take(void *arg, unsigned *link, struct net_conn *io)
{
	struct pull *p = arg;
	struct xfer_server *s = p->srv;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 2;
	int fd = -1;
	pthread_mutex_lock(&s->mu);
	while (p->head == p->tail && !p->closed && p->head < p->expected)
		if (pthread_cond_timedwait(&p->cv, &s->mu, &ts))
			break;
	if (p->head != p->tail) {
		*io = p->ios[p->head];
		*link = p->links[p->head];
		p->head++;
		fd = io->fd;
	}
	pthread_mutex_unlock(&s->mu);
	return fd;
}

/* The engine is done with a connection pull_take() gave it: close it, and only then give its
 * count back. */
static void pull_put(void *arg, struct net_conn *io)
{
	struct pull *p = arg;
	struct xfer_server *s = p->srv;
	int found = 0;
	pthread_mutex_lock(&s->mu);
	for (unsigned i = 0; i < p->head && !found; i++)
		if (p->ios[i].fd == io->fd) {
			p->ios[i].fd = -1;
			xfer_server_unlist_locked(s, p->live_ids[i]);
			found = 1;
		}
	pthread_mutex_unlock(&s->mu);
	net_conn_close(io);
	if (found)
		xfer_server_release(s);
}

/*
 * Answer GET <names> as the sending side: the files found beneath DIR (each name looked at
 * first, then the trees walked while their manifest goes out in parts), sent by an engine over
 * the client's connections (adopted from <p>). The reason it could not start goes to <err>.
 * Returns 1 when the engine took the first connection (it is no longer ours).
 */
static int pull_answer(struct xfer_server_conn *c, struct pull *p, char **names, unsigned nnames,
		       unsigned expected, char *err, size_t errlen)
{
	struct xfer_server *s = c->srv;
	int handed = 0;
	struct xfer_adopt ad = {.take = pull_take,
				.put = pull_put,
				.arg = p,
				.nlinks = s->nlisten,
				.max_streams = expected};
	for (unsigned i = 0; i < s->nlisten; i++)
		ad.names[i] = s->listen_names[i];
	struct xfer_send_opts o = {0};
	struct xfer_report rep;
	if (xfer_send_beneath(&o, &ad, s->dirfd, (const char *const *)names, nnames, &rep)) {
		char clean[sizeof(
		    rep.error)]; /* it may quote the client's ERR: no control characters */
		size_t k = 0;
		for (; rep.error[k]; k++)
			clean[k] = (unsigned char)rep.error[k] < 0x20 || rep.error[k] == 0x7f
				       ? '?'
				       : rep.error[k];
		clean[k] = 0;
		log_warn("xfer get: %s", clean);
		/* the first connection is still ours when the engine never started */
		pthread_mutex_lock(&s->mu);
		handed = p->head > 0;
		pthread_mutex_unlock(&s->mu);
		if (!handed && rep.error[0])
			xfer_server_refuse(s, &c->io, rep.error);
		if (!handed)
			snprintf(err, errlen, "%s", rep.error);
	} else {
		handed = 1;
	}
	return handed;
}

/* The GET is over: remember it, close the connections that queued and were never taken. */
static void pull_end(struct xfer_server *s, struct pull *p, int handed, const char *err)
{
	pthread_mutex_lock(&s->mu);
	p->closed = 1;
	xfer_server_tomb_add_locked(s, p->id, err[0] ? err : "this transfer has ended");
	if (!handed && p->head == 0)
		p->head = 1;		    /* ours: conn_main closes it */
	unsigned nleft = p->tail - p->head; /* queued, never taken: closed here */
	for (unsigned i = p->head; i < p->tail; i++)
		xfer_server_unlist_locked(s, p->live_ids[i]);
	list_del(&s->pulls, &p->node);
	pthread_mutex_unlock(&s->mu);
	for (unsigned i = p->tail - nleft; i < p->tail; i++) {
		net_conn_close(&p->ios[i]);
		xfer_server_release(s);
	}
	pthread_cond_destroy(&p->cv);
	free(p);
}

/*
 * A PULL connection: every one of the client's connections says GET with the same names. The
 * first becomes the sending side (an engine over adopted connections, files opened beneath
 * DIR); the others queue for it. Returns 1 when the descriptor was handed over.
 */
int xfer_pull_serve(struct xfer_server_conn *c, const struct xfer_hello *hello)
{
	struct xfer_server *s = c->srv;
	struct xfer_hdr h;
	uint8_t *meta = NULL;
	char **names = NULL;
	unsigned nnames = 0;
	const char *why;
	uint32_t expected = 0;
	if (xfer_frame_recv_alloc(&c->io, &h, &meta) || h.type != XFER_GET ||
	    xfer_get_decode(meta, h.meta_len, &expected, &names, &nnames, &why)) {
		xfer_server_refuse(s, &c->io, "expected GET with the names to send");
		free(meta);
		return 0;
	}
	free(meta);
	if (expected == 0 || expected > PULL_MAX_STREAMS)
		expected = PULL_MAX_STREAMS;
	pthread_mutex_lock(&s->mu);
	char ended[200];
	if (xfer_server_tomb_find_locked(s, hello->session, ended, sizeof(ended))) {
		/* a connection that arrives after its GET was answered must not start it again */
		pthread_mutex_unlock(&s->mu);
		free(names);
		xfer_server_refuse(s, &c->io, ended);
		return 0;
	}
	struct pull *p = pull_find_locked(s, hello->session);
	if (p) {
		int queued = !p->closed && p->tail < PULL_MAX_STREAMS;
		if (queued) {
			p->links[p->tail] = c->link;
			p->live_ids[p->tail] = c->live_id;
			p->ios[p->tail++] = c->io;
			pthread_cond_broadcast(&p->cv);
		}
		pthread_mutex_unlock(&s->mu);
		free(names);
		return queued;
	}
	p = calloc(1, sizeof(*p));
	if (p) {
		memcpy(p->id, hello->session, XFER_SESSION_LEN);
		p->srv = s;
		p->expected = expected;
		pthread_cond_init(&p->cv, NULL);
		p->links[0] = c->link;
		p->live_ids[0] = c->live_id;
		p->ios[p->tail++] = c->io;
		list_push_front(&s->pulls, &p->node);
	}
	pthread_mutex_unlock(&s->mu);
	if (!p) {
		free(names);
		return 0;
	}

	char err[300] = "";
	int handed = pull_answer(c, p, names, nnames, expected, err, sizeof(err));
	free(names);
	pull_end(s, p, handed, err);
	return handed;
}
