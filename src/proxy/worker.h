/*
 * worker.h - a worker thread and what it lends the connections it runs: its event loop, its
 * buffer pools, the small blocks nghttp2 takes (core/smallmem.h), a few empty pipes
 * (splice_body.h), its idle upstream connections (one list per backend) and the last TLS session
 * with each backend (offered on the next connect, so it resumes), its random state, a parse
 * scratch, and the inbox where queued requests are granted slots.
 *
 * Everything here belongs to one thread; nothing is locked except the inbox. The worker
 * knows nothing of what runs on it: whoever starts it (proxy.c) gives it a table of owner
 * callbacks (struct worker_ops) for accepting a connection, taking grants and closing what
 * is idle, so the connection code sits above the worker and every arrow points down.
 */
#ifndef ACCELNET_PROXY_WORKER_H
#define ACCELNET_PROXY_WORKER_H

#include "conf/model.h"
#include "core/buf.h"
#include "core/list.h"
#include "core/loop.h"
#include "core/slab.h"
#include "core/smallmem.h"
#include "http/parse.h"
#include "net/conn.h"
#include "net/splice.h"
#include "guard/auth.h"
#include "guard/budget.h"
#include "guard/limits.h"
#include "net/tls_listen.h"
#include "proxy/admission.h"
#include "runtime/llm.h"
#include "runtime/pool.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

struct worker;
struct listener;
struct debugreq_worker;
struct creds_retired;
struct ssl_session_st;

struct worker_ops {
	/* a client connected to listener <l>: take <fd> (owned from now on) */
	void (*accept)(struct worker *w, const struct listener *l, int fd,
		       const struct sockaddr_storage *peer);
	/* slots were granted to this worker's queued requests (w->inbox) */
	void (*take_grants)(struct worker *w);
	/* cache fills moved for this worker's waiting requests (w->cache_inbox) */
	void (*take_fills)(struct worker *w);
	/* the admin endpoint may have asked for a look at its exchanges (w->dbg) */
	void (*peek)(struct worker *w);
	/* draining: close every idle client and idle upstream connection; <all>: the worker
	 * ends, close every one and free what was kept for reuse */
	void (*close_idle)(struct worker *w, int all);
};

struct listener {
	struct loop_io io;
	struct worker *w;
	unsigned index; /* in conf->listens (and sh->tls) */
};

#define IP_CONN_SLOTS                                                                              \
	65536 /* addresses sharing a slot share its count: refused early, never late */

/*
 * Listening sockets handed to a new set of workers: <n> of them for one address. Worker i
 * takes over fd[j] for every j with j % workers == i (each is dup()ed: the giver keeps its
 * own until it closes it), and a worker left without one shares fd[i % n]; so no socket
 * that already has clients waiting in its backlog is left without a worker.
 */
struct listen_fds {
	const int *fd;
	size_t n;
};

/* Shared by the workers, read-only for them: set up by proxy.c before they start. */
struct worker_shared {
	const struct conf *conf;
	struct runtime *rt;
	const struct worker_ops *ops;
	/* per listener (conf->listens order), NULL: plain; and per route, NULL: no auth. Read
	 * with one acquire load per use: SIGHUP swaps in new ones (proxy.c), and frees a key
	 * table once every worker has finished a loop turn since (turns below) */
	_Atomic(struct net_tls_listener *) *tls;
	_Atomic(struct auth_tables *) *auth; /* routes.auth: keys, JWT keys, users */
	struct creds_retired *retired;	     /* what reload_s replaced (creds.c) */
	struct route_limits *limits;	     /* per route (guard/limits.h) */
	struct route_budget *budgets;	     /* per route (guard/budget.h) */
	_Atomic uint32_t *ip_conns;   /* connections per address hash (max_connections_per_ip) */
	struct ratelimit accept_rate; /* limits.accept_rate_per_ip, when has_accept_rate */
	int has_accept_rate;
	const struct worker *workers; /* all of them, for the buffer budget (proxy/shed.h) */
	unsigned nworkers;
	struct loop *main_loop; /* woken when a worker's loop ends */
	struct accesslog *alog; /* access_log:, or NULL */
	/* per listener (conf->listens order): sockets to accept on instead of opening new
	 * ones, or NULL: those of the running generation at the same address (a reload), or
	 * the one the service manager passed */
	const struct listen_fds *handed;
	unsigned gen;	     /* 0 for the first configuration, then one more per reload */
	atomic_uint running; /* workers whose loop still runs */
};

/* Exchanges whose cache fill moved, notified by the filling thread (proxy/caching.h). */
struct cache_inbox {
	pthread_mutex_t lock;
	struct list_head ready; /* of struct exchange, by cwait.link */
};

struct worker {
	unsigned id;
	char tag[16];
	pthread_t thread;
	struct worker_shared *sh;
	const struct conf *conf; /* sh->conf, at hand */
	struct runtime *rt;
	struct metrics_shard *shard; /* its own shard of rt->metrics: counted with plain stores */
	struct loop *loop;
	struct listener *listeners;
	size_t nlisteners;
	struct buf_pool bufs;
	struct buf_pool body_bufs;    /* limits.body_buffer_bytes each, for bodies read whole */
	struct net_pipe_spares pipes; /* for response bodies relayed by splice (splice_body.h) */
	struct list_head *idle;	      /* idle upstream connections, one list per backend id */
	struct list_head *h2_conns;   /* HTTP/2 connections to backends (up_h2.h), per backend id */
	struct ssl_session_st **tls_sessions; /* per backend id: the last TLS session (pools.tls) */
	struct list_head clients; /* client connections (the owner's, by their own link) */
	struct smallmem h2mem;	  /* what nghttp2 allocates (http/h2mem.h: h2.c, up_h2.c) */
	struct slab
	    upconns; /* the upstream connections' records (upstream.c; set up at the first) */
	struct list_head free_exchanges; /* exchanges not in use, for reuse */
	/* how many of them, and of bufs, to keep for a load under way (exchange.c) */
	struct worker_spares {
		struct loop_timer timer; /* armed while requests begin (every SPARES_TICK_MS) */
		uint32_t starts;	 /* exchanges begun since the last tick */
		uint32_t starts_before;	 /* ... in the tick before */
		uint32_t exchanges;	 /* free exchanges kept beyond FREE_MAX: up to this */
		uint32_t peak;		 /* the most exchanges in use at once since the last trim */
		uint8_t trim_due;	 /* trim the heap when the last exchange in use ends */
		uint64_t trimmed_ms;	 /* when it was last trimmed (0: never) */
	} spares;
	struct list_head live_exchanges; /* exchanges in use, oldest first */
	/* listen[].mode: tcp connections, and ended ones kept for reuse (proxy/l4.h) */
	struct list_head l4_conns, l4_spares;
	unsigned nclients, max_clients;
	int accept_paused, draining;
	uint64_t drain_ms;		/* when it began draining */
	struct loop_timer accept_timer; /* accepting again after running out of descriptors */
	atomic_int drain_requested;
	atomic_int accept_stopped; /* set once it has closed its listeners (draining) */
	uint64_t rng;
	struct llm_spares llm_spares; /* prompt block arrays to lend (balance: llm) */
	atomic_uint_fast64_t turns;   /* loop turns done: written by this worker only */
	struct http_head head;	      /* parse scratch, for request and response heads alike */
	struct admission_inbox inbox; /* requests granted a slot by other workers */
	struct cache_inbox cache_inbox;
	struct list_head refreshes;  /* background cache refreshes it runs (proxy/refresh.h) */
	struct alog_ring *alog_ring; /* its access log ring (proxy/access.h), NULL: off */
	uint64_t alog_sample_cut;    /* a request is logged when rand < this (UINT64_MAX: all) */
	struct debugreq_worker *dbg; /* what /debug/requests sees of it (proxy/debugreq.h) */
	/* models:' tokenizers' scratch (proxy/tokroute.h); NULL: none yet */
	struct tokprompt *tokp;
};

/*
 * Set up <w>: loop, buffers, and its own listening sockets; it holds at most <max_clients>
 * client connections at once. 0 or -errno with <err> filled.
 */
int worker_init(struct worker *w, struct worker_shared *sh, unsigned id, unsigned max_clients,
		char *err, size_t errlen);
int worker_start(struct worker *w);
/* Ask <w> (from another thread) to stop accepting and finish what it has. */
void worker_request_drain(struct worker *w);
/* Whether <w> has stopped accepting since worker_request_drain(): it takes no new client
 * from then on (read from another thread). */
int worker_accept_stopped(const struct worker *w);
/* After the thread has ended (or never started): free everything. */
void worker_destroy(struct worker *w);

/* A client connection of <w> ended (its owner has unlinked it from w->clients). */
void worker_client_gone(struct worker *w);

/*
 * One read from <c> into *b (taken from the plain pool if need be). Returns bytes read
 * (> 0), 0 at end of stream, -ENOSPC when the buffer is full, -EAGAIN when nothing was
 * there, or another -errno. A short read means the socket is drained, so *readable is
 * cleared and the next edge says when more arrives -- unless the peer has shut its side
 * (<hup>): then no edge will come, and the end of stream must still be read.
 */
ssize_t worker_read(struct worker *w, struct net_conn *c, struct buf **b, int *readable, int hup);

/* Give <b> back to the pool it came from: the plain one, or the one for request bodies. */
void worker_buf_put(struct worker *w, struct buf *b);
/* ... and *b becomes NULL, when it is empty. */
void worker_buf_release(struct worker *w, struct buf **b);

#endif
