/*
 * proxy.c - start-up, the main thread's loop, and shutdown.
 *
 * Order matters: the runtime is built and every listener (workers' and admin) is opened
 * before any thread starts, so that an error leaves nothing running. An address another
 * process already listens on stops the start (exit 2) or the reload (gen_check_ports), unless
 * the listener shares it on purpose. The main loop then owns signals, health checks and the
 * admin endpoint while the workers serve.
 *
 * Under a service manager (systemd) the proxy tells it when it is ready (every listener
 * bound, every worker running) and when it starts draining (net/sdnotify.h), and takes the
 * listening sockets the manager may pass (net/activation.h): a listener whose address
 * matches a passed socket accepts on it, every worker on its own dup() of it, instead of
 * opening its own; a passed socket that no listener names stops the start.
 *
 * Descriptors are the first thing a flood exhausts, so start-up raises the soft limit to
 * the hard one and fits the connection cap under it, with a reserve for everything that is
 * not a client connection; running out anyway is handled where it happens (worker.c pauses
 * accepting; health checks and connects do not blame the backend).
 */
#include "control/proxy.h"
#include "core/log.h"
#include "core/signals.h"
#include "net/activation.h"
#include "net/sock.h"
#include "net/sdnotify.h"
#include "cache/store.h"
#include "conf/conf.h"
#include "obs/accesslog.h"
#include "proxy/sticky.h"
#include "proxy/access.h"
#include "control/admin.h"
#include "control/creds.h"
#include "proxy/debugreq.h"
#include "proxy/caching.h"
#include "control/carry.h"
#include "proxy/dispatch.h"
#include "proxy/forward.h"
#include "proxy/llm_explain.h"
#include "control/discover.h"
#include "control/health.h"
#include "control/cluster.h"
#include "control/kvsub.h"
#include "control/scrape.h"
#include "control/tokwatch.h"
#include "proxy/h1.h"
#include "proxy/l4.h"
#include "proxy/pd.h"
#include "proxy/shed.h"
#include "proxy/splice_body.h"
#include "control/statefile.h"
#include "control/upgrade.h"
#include "proxy/quota.h"
#include "proxy/spend.h"
#include "proxy/tally.h"
#include "proxy/worker.h"
#include "proxy/xhooks.h"
#include "runtime/runtime.h"

#include <errno.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

/* Descriptors kept back from client connections: event loops, listeners, health checks,
 * the admin endpoint, logs, hedged copies. Idle keep-alive upstream connections outlive
 * their clients and are not counted: running out is still possible, and is handled as a
 * local shortage (accept pauses, 503), never blamed on a backend. */
#define FD_RESERVE 64

/* A listener with mode: tcp relays raw TCP (l4.h); the others speak HTTP (h1.h). */
static void proxy_accept(struct worker *w, const struct listener *l, int fd,
			 const struct sockaddr_storage *peer)
{
	if (w->conf->listens[l->index].l4)
		l4_accept(w, l, fd, peer);
	else
		h1_accept(w, l, fd, peer);
}

static void proxy_close_idle(struct worker *w, int all)
{
	l4_close_idle(w, all);
	h1_close_idle(w, all);
}

/* What runs on the workers: HTTP/1 client connections (h1.h), and the exchanges they
 * carry, granted slots through dispatch.h; and L4 connections (l4.h). */
static const struct worker_ops proxy_worker_ops = {
    .accept = proxy_accept,
    .take_grants = dispatch_take_grants,
    .take_fills = caching_take_ready,
    .peek = debugreq_peek,
    .close_idle = proxy_close_idle,
};

/*
 * One configuration's proxy: a generation. The first is built from the config the process
 * started with; each reload builds the next beside it, and the one it replaces drains.
 */
struct gen {
	struct worker_shared sh; /* conf, runtime, main loop, running count */
	struct worker *workers;
	unsigned nworkers, inited, started;
	struct conf *own_conf;	   /* a reload's config, freed with it; NULL: the caller's */
	struct listen_fds *handed; /* per listener: the sockets its workers take over */
	int *handed_fd;		   /* ... their storage */
	struct health *health;
	struct discover *discover;
	struct scrape *scrape;
	struct kvsub *kvsub;
	struct tokwatch *tokwatch; /* models: their tokenizers' health */
	struct cluster *cluster;   /* cluster: its limits' sync with Redis */
	struct admin *admin;
	struct debugreq_board *debug;
	struct gen *older;	 /* the draining generations, newest first */
	int ended;		 /* its workers have all stopped */
	struct turn_mark *marks; /* then: the others' workers' turns, to wait out */
	size_t nmarks;
};

/* A worker of another generation, and its turns when a generation's workers stopped: once
 * it has finished a turn since, it holds no pointer into that generation (carry.h). */
struct turn_mark {
	const struct gen *g;
	unsigned worker;
	uint64_t turns;
};

struct main_state {
	struct loop *loop;
	struct gen *cur;       /* serving new connections */
	struct gen *older;     /* draining, newest first */
	const char *conf_path; /* what a reload reads; NULL: no reloading (the demo) */
	unsigned ngens;	       /* generations built so far */
	int port_taken;	       /* the start failed: another process listens on an address */
	struct runtime_reloads reloads;
	_Atomic uint32_t *ip_conns; /* per address, across generations (max_connections_per_ip) */
	/* per listener of the first config: the sockets passed in (by the service manager,
	 * or by the process this one upgrades), and the admin endpoint's (-1: none) */
	struct listen_fds *inherited;
	int *inherited_fd;
	int inherited_admin;
	struct activation act;
	struct upgrade *upgrade; /* a new executable starting on our sockets (SIGUSR2) */
	struct loop_timer deadline, retire;
	int stopping;
	int forced;
};

int proxy_check(const struct conf *conf, char *err, size_t errlen)
{
	return creds_check(conf, err, errlen);
}

static uint64_t proxy_buffer_bytes(const void *sh)
{
	return shed_buffer_bytes(sh);
}

/* The routes' limits and budgets and the accept rate: fixed tables, made before anything
 * serves. */
static int proxy_limits_build(struct worker_shared *sh, char *err, size_t errlen)
{
	const struct conf *c = sh->conf;
	const struct conf_rate *ar = &c->limits.accept_rate_per_ip;
	if (ar->n) {
		if (ratelimit_init(&sh->accept_rate, ar->n, ar->per_s, 0) < 0)
			goto nomem;
		sh->has_accept_rate = 1;
	}
	if (!(sh->limits = calloc(c->nroutes ? c->nroutes : 1, sizeof(*sh->limits))))
		goto nomem;
	for (size_t i = 0; i < c->nroutes; i++)
		if (limits_init(&sh->limits[i], c->routes[i].rate_limit) < 0)
			goto nomem;
	if (!(sh->budgets = calloc(c->nroutes ? c->nroutes : 1, sizeof(*sh->budgets))))
		goto nomem;
	for (size_t i = 0; i < c->nroutes; i++)
		if (budget_init(&sh->budgets[i], c->routes[i].budget) < 0)
			goto nomem;
	return 0;
nomem:
	snprintf(err, errlen, "out of memory for rate limits");
	return -ENOMEM;
}

static void proxy_limits_free(struct worker_shared *sh)
{
	if (sh->has_accept_rate)
		ratelimit_fini(&sh->accept_rate);
	for (size_t i = 0; sh->limits && i < sh->conf->nroutes; i++)
		limits_fini(&sh->limits[i]);
	free(sh->limits);
	for (size_t i = 0; sh->budgets && i < sh->conf->nroutes; i++)
		budget_fini(&sh->budgets[i]);
	free(sh->budgets);
}

/*
 * Key material (TLS keys, a pool's client key, API keys, the admin token) stays out of core
 * dumps: no core file, and the process is not dumpable (nor attachable by its own user).
 */
static void proxy_protect_keys(const struct conf *c)
{
	int keys = c->admin_token_file != NULL;
	for (size_t i = 0; i < c->nlistens; i++)
		keys |= c->listens[i].tls != NULL;
	for (size_t i = 0; i < c->nroutes; i++)
		keys |= c->routes[i].auth != NULL;
	for (size_t i = 0; i < c->npools; i++)
		keys |= c->pools[i].tls && c->pools[i].tls->key;
	if (!keys)
		return;
	struct rlimit none = {0, 0};
	setrlimit(RLIMIT_CORE, &none);
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

/* user: / group: once every listener is open, run as them; -errno when that fails (the
 * start fails: a gateway meant to run unprivileged never serves as root). */
static int proxy_drop_privileges(const struct conf *c, char *err, size_t errlen)
{
	if (!c->user)
		return 0;
	struct passwd *pw = getpwnam(c->user);
	struct group *gr = c->group ? getgrnam(c->group) : NULL;
	if (!pw || (c->group && !gr)) {
		snprintf(err, errlen, "user %s / group %s: no such account", c->user,
			 c->group ? c->group : "-");
		return -ENOENT;
	}
	gid_t gid = gr ? gr->gr_gid : pw->pw_gid;
	if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(pw->pw_uid) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot run as %s: %s", c->user, strerror(e));
		return -e;
	}
	if (pw->pw_uid != 0 && setuid(0) == 0) { /* it must not be possible to go back */
		snprintf(err, errlen, "running as %s, but root could be regained", c->user);
		return -EPERM;
	}
	log_info("running as %s (uid %u, gid %u)", c->user, (unsigned)pw->pw_uid, (unsigned)gid);
	return 0;
}

/* Tell the service manager, if there is one; a failure is logged, never fatal. */
static void proxy_notify(const char *state)
{
	int rc = sdnotify_send(state);
	if (rc < 0)
		log_warn("cannot notify the service manager (NOTIFY_SOCKET=%s): %s",
			 getenv("NOTIFY_SOCKET"), strerror(-rc));
}

/*
 * Raise the soft RLIMIT_NOFILE to the hard limit, and return the connection cap that fits
 * under it: limits.max_connections, or less (with a warning) when each proxied connection's
 * two descriptors (client and backend) plus the reserve would not fit; said once, at start
 * (<quiet>: a reload).
 */
static unsigned proxy_fit_connections(const struct conf *c, size_t nbackends, int quiet)
{
	unsigned want = c->limits.max_connections;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return want;
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit raised = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
			rl.rlim_cur = rl.rlim_max;
	}
	uint64_t reserve = FD_RESERVE + (uint64_t)c->workers * (c->nlistens + 2) + nbackends;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= reserve + 2 * (uint64_t)want)
		return want;
	uint64_t fit =
	    rl.rlim_cur > reserve + 2 * c->workers ? (rl.rlim_cur - reserve) / 2 : c->workers;
	if (quiet)
		return (unsigned)fit;
	log_warn("limits.max_connections is %u, but the descriptor limit of %llu carries only "
		 "%llu (two per connection, %llu kept back): using %llu; raise the hard limit "
		 "(ulimit -Hn, LimitNOFILE=) to allow more",
		 want, (unsigned long long)rl.rlim_cur, (unsigned long long)fit,
		 (unsigned long long)reserve, (unsigned long long)fit);
	return (unsigned)fit;
}

/*
 * The listening sockets <g>'s workers take over, per listener: those of <from>'s workers on
 * the same address (a reload: the sockets, and the clients waiting in their backlogs, never
 * go away).
 */
static int gen_hand_sockets(struct gen *g, const struct gen *from)
{
	const struct conf *c = g->sh.conf;
	size_t total = 0;
	for (unsigned w = 0; w < from->inited; w++)
		total += from->workers[w].nlisteners;
	g->handed = calloc(c->nlistens ? c->nlistens : 1, sizeof(*g->handed));
	g->handed_fd = calloc(total ? total : 1, sizeof(*g->handed_fd));
	if (!g->handed || !g->handed_fd)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < c->nlistens; i++) {
		g->handed[i].fd = &g->handed_fd[k];
		for (unsigned w = 0; w < from->inited; w++)
			for (size_t j = 0; j < from->workers[w].nlisteners; j++) {
				const struct listener *l = &from->workers[w].listeners[j];
				const struct conf_listen *ol = &from->sh.conf->listens[l->index];
				if (l->io.fd >= 0 && net_addr_same(&ol->addr, &c->listens[i].addr))
					g->handed_fd[k++] = l->io.fd;
			}
		g->handed[i].n = (size_t)(&g->handed_fd[k] - g->handed[i].fd);
	}
	g->sh.handed = g->handed;
	return 0;
}

/* Stop what the main loop runs for <g> (checks, discovery, scrapes, KV events), its limits'
 * sync with Redis, and the admin endpoint's listener (but for a process draining to exit:
 * admin_set_draining() keeps it, for the probes); its open admin connections go on until
 * it is destroyed. */
static void gen_quiet(struct gen *g)
{
	health_stop(g->health);
	discover_stop(g->discover);
	scrape_stop(g->scrape);
	kvsub_stop(g->kvsub);
	tokwatch_stop(g->tokwatch);
	if (g->sh.rt)
		g->sh.rt->cluster = NULL;
	cluster_stop(g->cluster);
	g->health = NULL;
	g->discover = NULL;
	g->scrape = NULL;
	g->kvsub = NULL;
	g->tokwatch = NULL;
	g->cluster = NULL;
	admin_stop_listening(g->admin);
}

/* Free what <g> holds; its workers have stopped (or never started). <live>: the runtimes of
 * the generations that go on, which may hold shares of its backends (carry.h). */
static void gen_destroy(struct gen *g, struct runtime *const *live, size_t nlive)
{
	if (!g)
		return;
	for (unsigned i = 0; i < g->started; i++)
		pthread_join(g->workers[i].thread, NULL);
	for (unsigned i = 0; i < g->inited; i++)
		worker_destroy(&g->workers[i]);
	free(g->workers);
	if (g->sh.rt) {
		carry_release(g->sh.rt, live, nlive);
		g->sh.rt->alog = NULL; /* the admin endpoint has stopped reading it */
	}
	accesslog_close(g->sh.alog); /* after the workers: every line they pushed is written */
	gen_quiet(g);
	admin_stop(g->admin);
	debugreq_board_free(g->debug); /* after the workers and the admin endpoint */
	if (g->sh.conf)
		creds_free(&g->sh);
	proxy_limits_free(&g->sh);
	runtime_destroy(g->sh.rt);
	free(g->handed);
	free(g->handed_fd);
	free(g->marks);
	conf_free(g->own_conf);
	free(g);
}

static int proxy_api_reload(void *arg, char *err, size_t errlen);

/*
 * Port safety: an address this generation opens itself (not handed over by the one it
 * replaces, passed in by the service manager or an upgrade, nor listen[].reuse_port:
 * shared) must not have another process's listener on it, or the kernel would split the
 * clients between the two (SO_REUSEPORT) without a word. -EADDRINUSE (m->port_taken set)
 * with a message naming the address.
 */
static int gen_check_ports(struct main_state *m, const struct gen *g, int admin_given, char *err,
			   size_t errlen)
{
	const struct conf *c = g->sh.conf;
	for (size_t i = 0; i <= c->nlistens; i++) {
		int admin = i == c->nlistens;
		const struct conf_listen *l = admin ? &c->admin : &c->listens[i];
		if (admin ? !c->has_admin || admin_given >= 0
			  : l->shared || (g->sh.handed && g->sh.handed[i].n))
			continue;
		if (sock_probe_free(&l->addr) != -EADDRINUSE)
			continue;
		m->port_taken = 1;
		snprintf(err, errlen,
			 "%s%s is in use by another process: stop it or choose another address%s",
			 admin ? "admin: " : "", l->address,
			 admin ? "" : " (to share it on purpose: listen[].reuse_port: shared)");
		return -EADDRINUSE;
	}
	return 0;
}

/*
 * Build a generation for <conf> (owned by it when <own>), beside <from> (the one serving, or
 * NULL at start): its runtime with <from>'s backend state carried over, key material and
 * limits read anew, its workers on the same listening sockets, its admin endpoint, checks
 * and discovery. Nothing of it serves yet (gen_start). NULL with <err> filled on failure,
 * leaving <from> as it was.
 */
static struct gen *gen_build(struct main_state *m, const struct conf *conf, int own,
			     struct gen *from, char *err, size_t errlen)
{
	struct gen *g = calloc(1, sizeof(*g));
	int rc;
	if (!g) {
		snprintf(err, errlen, "out of memory");
		if (own)
			conf_free((struct conf *)conf);
		return NULL;
	}
	g->own_conf = own ? (struct conf *)conf : NULL;
	g->sh.conf = conf;
	g->sh.ops = &proxy_worker_ops;
	g->sh.main_loop = m->loop;
	g->sh.gen = m->ngens;
	proxy_protect_keys(conf);
	if ((rc = runtime_create(conf, &g->sh.rt)) < 0) {
		snprintf(err, errlen, "cannot build the runtime: %s", strerror(-rc));
		goto fail;
	}
	g->sh.rt->generation = m->ngens;
	g->sh.rt->reloads = m->conf_path ? &m->reloads : NULL;
	if (!from) /* (a reload's joins as carry_runtime() takes the running one's state) */
		carry_join(g->sh.rt);
	/* the admin API's changes: the running generation's, else admin.state_file's */
	if (from && statefile_carry(g->sh.rt, from->sh.rt) < 0)
		log_warn("reload: the admin API's changes could not be carried over (out of "
			 "memory)");
	else if (!from && conf->has_admin && conf->admin_state_file)
		statefile_start(g->sh.rt, conf->admin_state_file);
	if ((rc = creds_build(&g->sh, err, errlen)) < 0 ||
	    (rc = proxy_limits_build(&g->sh, err, errlen)) < 0)
		goto fail;
	if (conf->limits.max_connections_per_ip && !m->ip_conns &&
	    !(m->ip_conns = calloc(IP_CONN_SLOTS, sizeof(*m->ip_conns)))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	g->sh.ip_conns = conf->limits.max_connections_per_ip ? m->ip_conns : NULL;
	g->nworkers = conf->workers;
	if (!(g->workers = calloc(g->nworkers, sizeof(*g->workers))) ||
	    !(g->debug = debugreq_board_new(g->nworkers))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	g->sh.workers = g->workers;
	g->sh.nworkers = g->nworkers;
	g->sh.rt->buffer_arg = &g->sh;
	g->sh.rt->buffer_bytes = proxy_buffer_bytes;
	int admin_given = !from ? m->inherited_admin
			  : from->admin && from->sh.conf->has_admin &&
				  net_addr_same(&from->sh.conf->admin.addr, &conf->admin.addr)
			      ? admin_listen_fd(from->admin)
			      : -1;
	unsigned cap = proxy_fit_connections(conf, g->sh.rt->nbackends, from != NULL);
	unsigned per_worker = (cap + g->nworkers - 1) / g->nworkers;
	if (!from) {
		g->sh.handed = m->inherited;
	} else if (gen_hand_sockets(g, from) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (gen_check_ports(m, g, admin_given, err, errlen) < 0)
		goto fail;
	for (; g->inited < g->nworkers; g->inited++) {
		if (worker_init(&g->workers[g->inited], &g->sh, g->inited, per_worker, err,
				errlen) < 0) {
			g->inited++;
			goto fail;
		}
		g->debug->w[g->inited].loop = g->workers[g->inited].loop;
		g->workers[g->inited].dbg = &g->debug->w[g->inited];
	}
	if (conf->access_log.path) {
		if (accesslog_open(&g->sh.alog, conf->access_log.path,
				   conf->access_log.syslog_socket, conf->access_log.format,
				   g->nworkers, err, errlen) < 0)
			goto fail;
		g->sh.rt->alog = g->sh.alog;
		double s = conf->access_log.sample;
		uint64_t cut = s >= 1.0 ? UINT64_MAX : (uint64_t)(s * 18446744073709551616.0);
		for (unsigned i = 0; i < g->nworkers; i++) {
			g->workers[i].alog_ring = accesslog_ring(g->sh.alog, i);
			g->workers[i].alog_sample_cut = cut;
		}
	}
	if (conf->has_admin) {
		if (admin_start(m->loop, conf, g->sh.rt, admin_given, &g->admin, err, errlen) < 0)
			goto fail;
		admin_serve_debug(g->admin, g->debug);
		if (m->conf_path)
			admin_set_reload(g->admin, proxy_api_reload, m);
	}
	if (!from && (rc = proxy_drop_privileges(conf, err, errlen)) < 0)
		goto fail;
	if ((rc = health_start(m->loop, g->sh.rt, &g->health)) < 0) {
		snprintf(err, errlen, "cannot start health checks: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = discover_start(m->loop, g->sh.rt, &g->discover)) < 0) {
		snprintf(err, errlen, "cannot start DNS discovery (the log says why)");
		goto fail;
	}
	if ((rc = scrape_start(m->loop, g->sh.rt, &g->scrape)) < 0) {
		snprintf(err, errlen, "cannot start scraping the engines' metrics: %s",
			 strerror(-rc));
		goto fail;
	}
	if ((rc = kvsub_start(m->loop, g->sh.rt, &g->kvsub)) < 0) {
		snprintf(err, errlen, "cannot subscribe to KV events (the log says why)");
		goto fail;
	}
	if ((rc = tokwatch_start(m->loop, g->sh.rt, &g->tokwatch)) < 0) {
		snprintf(err, errlen, "cannot watch the tokenizers: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = cluster_start(conf, g->sh.rt, g->sh.limits, g->sh.budgets, &g->cluster)) < 0) {
		snprintf(err, errlen, "cannot share the limits through Redis (the log says why)");
		goto fail;
	}
	g->sh.rt->cluster = g->cluster ? cluster_stats(g->cluster) : NULL;

	m->ngens++;
	return g;
fail:
	gen_destroy(g, from ? &from->sh.rt : NULL, from ? 1 : 0);
	return NULL;
}

/* Start <g>'s workers: from now on it accepts. */
static int gen_start(struct gen *g)
{
	for (; g->started < g->nworkers; g->started++) {
		int rc = worker_start(&g->workers[g->started]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int cache_match_all(void *arg, const struct cache_obj *o)
{
	(void)arg;
	(void)o;
	return 1;
}

/* <g> takes no new connection; what it has in flight finishes. Its response cache is
 * emptied (objects being read stay until their readers are done): what is left of a
 * draining generation should not hold cache.memory for as long as a stream lasts. */
static void gen_drain(struct gen *g)
{
	for (unsigned i = 0; i < g->started; i++)
		worker_request_drain(&g->workers[i]);
	gen_quiet(g);
	if (g->sh.rt && g->sh.rt->cache)
		cache_purge_match(g->sh.rt->cache, cache_match_all, NULL);
}

/* The runtimes of every generation but <skip>. */
static size_t live_runtimes(const struct main_state *m, const struct gen *skip,
			    struct runtime **out, size_t cap)
{
	size_t n = 0;
	if (m->cur && m->cur != skip && n < cap)
		out[n++] = m->cur->sh.rt;
	for (const struct gen *o = m->older; o; o = o->older)
		if (o != skip && n < cap)
			out[n++] = o->sh.rt;
	return n;
}

/*
 * Wait, at most HANDOVER_WAIT_MS, until <g>'s workers have stopped accepting (they see the
 * drain on their next loop turn). From then on every new client is the new generation's, so
 * a reload that says it is loaded means it for the next connection; the listening sockets
 * stay open in the new generation meanwhile, and no client in their backlogs is lost.
 */
#define HANDOVER_WAIT_MS 2000
static void gen_wait_handover(const struct gen *g)
{
	uint64_t waited_us = 0;
	for (unsigned i = 0; i < g->started; i++) {
		while (!worker_accept_stopped(&g->workers[i]) &&
		       waited_us < HANDOVER_WAIT_MS * 1000ull) {
			struct timespec ts = {0, 200 * 1000};
			nanosleep(&ts, NULL);
			waited_us += 200;
		}
	}
	if (waited_us >= HANDOVER_WAIT_MS * 1000ull)
		log_warn("configuration generation %u: a worker still accepts after %u ms; it may "
			 "take a few more clients under the old configuration",
			 g->sh.gen, HANDOVER_WAIT_MS);
}

#define MAX_GENS 256 /* generations alive at once: reloads beyond it wait for one to end */
#define RETIRE_CHECK_MS 50

static int gen_alive(const struct main_state *m, const struct gen *g)
{
	if (m->cur == g)
		return 1;
	for (const struct gen *o = m->older; o; o = o->older)
		if (o == g)
			return 1;
	return 0;
}

static size_t count_gens(const struct main_state *m)
{
	size_t n = m->cur != NULL;
	for (const struct gen *o = m->older; o; o = o->older)
		n++;
	return n;
}

/* <g>'s workers have stopped: note every other worker's turns, to wait one turn of each. */
static void gen_mark_turns(struct main_state *m, struct gen *g)
{
	size_t n = 0;
	struct gen *all[MAX_GENS + 1];
	size_t na = 0;
	if (m->cur)
		all[na++] = m->cur;
	for (struct gen *o = m->older; o && na < MAX_GENS + 1; o = o->older)
		all[na++] = o;
	for (size_t i = 0; i < na; i++)
		if (all[i] != g)
			n += all[i]->started;
	g->ended = 1;
	g->marks = calloc(n ? n : 1, sizeof(*g->marks));
	if (!g->marks) /* without marks it waits for the process to end */
		return;
	for (size_t i = 0; i < na; i++) {
		if (all[i] == g)
			continue;
		for (unsigned w = 0; w < all[i]->started; w++) {
			g->marks[g->nmarks++] = (struct turn_mark){
			    .g = all[i],
			    .worker = w,
			    .turns = atomic_load_explicit(&all[i]->workers[w].turns,
							  memory_order_acquire)};
			loop_wake(all[i]->workers[w].loop);
		}
	}
}

/* Has every worker noted in <g->marks> (of a generation still alive) finished a turn? */
static int gen_turns_passed(const struct main_state *m, const struct gen *g)
{
	if (!g->marks)
		return 0;
	for (size_t i = 0; i < g->nmarks; i++) {
		const struct turn_mark *t = &g->marks[i];
		if (!gen_alive(m, t->g) || t->g->ended || t->worker >= t->g->started)
			continue;
		const struct worker *w = &t->g->workers[t->worker];
		if (atomic_load_explicit(&w->turns, memory_order_acquire) <= t->turns) {
			loop_wake(w->loop);
			return 0;
		}
	}
	return 1;
}

/* Free the draining generations whose workers have stopped and been waited out. */
static void main_on_retire(struct loop_timer *t)
{
	struct main_state *m = container_of(t, struct main_state, retire);
	struct gen **link = &m->older;
	int waiting = 0;
	while (*link) {
		struct gen *g = *link;
		if (m->cur && g->sh.rt) /* what its requests learn of sessions (carry.h) */
			carry_follow(m->cur->sh.rt, g->sh.rt);
		if (!g->ended && atomic_load(&g->sh.running) == 0) {
			carry_leave(g->sh.rt); /* no slot of its frees now: stop telling it */
			gen_mark_turns(m, g);
		}
		if (!g->ended || !gen_turns_passed(m, g)) {
			waiting |= 1;
			link = &g->older;
			continue;
		}
		*link = g->older;
		if (m->cur && g->sh.rt) /* (the last of it: its workers have stopped) */
			carry_follow(m->cur->sh.rt, g->sh.rt);
		struct runtime *live[MAX_GENS + 1];
		size_t n = live_runtimes(m, g, live, MAX_GENS + 1);
		log_info("configuration generation %u: its last request has ended; released",
			 g->sh.gen);
		gen_destroy(g, live, n);
	}
	if (waiting && !m->stopping)
		loop_timer_set(m->loop, t, loop_now(m->loop) + RETIRE_CHECK_MS);
}

/*
 * Reload: read the config file again and, if it is good, build a generation for it beside
 * the running one, start it, and let the running one drain. A bad config (or any failure to
 * build) changes nothing: 0, or -errno with the reason in <err> (FILE:LINE:COL for the
 * config's own errors), also logged.
 */
static int proxy_reload(struct main_state *m, const char *why, char *err, size_t errlen)
{
	struct conf_error ce;
	struct conf *conf;
	int rc = -EINVAL;
	if (m->stopping) {
		snprintf(err, errlen, "draining to exit: no reload");
		goto refused;
	}
	if (!m->conf_path) {
		snprintf(err, errlen, "not started from a config file: nothing to reload");
		goto refused;
	}
	if (count_gens(m) >= MAX_GENS) {
		snprintf(err, errlen,
			 "%zu configurations still finish requests; try again when one ends",
			 count_gens(m));
		rc = -EBUSY;
		goto refused;
	}
	if (conf_load_file(m->conf_path, &conf, &ce) < 0) {
		snprintf(err, errlen, "%.*s", (int)(errlen ? errlen - 1 : 0), ce.msg);
		goto refused;
	}
	if (proxy_check(conf, err, errlen) < 0) {
		conf_free(conf);
		goto refused;
	}
	struct gen *from = m->cur;
	struct gen *g = gen_build(m, conf, 1, from, err, errlen);
	if (!g)
		goto refused;
	size_t carried = carry_runtime(g->sh.rt, from->sh.rt);
	if ((rc = gen_start(g)) < 0) {
		snprintf(err, errlen, "cannot start worker threads: %s", strerror(-rc));
		/* it is retired like any drained one: its pools leave the shares then */
		gen_drain(g);
		g->older = m->older;
		m->older = g;
		loop_timer_set(m->loop, &m->retire, loop_now(m->loop) + RETIRE_CHECK_MS);
		goto refused;
	}
	m->cur = g;
	m->reloads.ok++;
	if ((rc = creds_watch(&g->sh, g->workers, g->nworkers)) < 0)
		log_error("%s: cannot watch the TLS files (reload_s): %s", why, strerror(-rc));
	gen_drain(from);
	gen_wait_handover(from);
	from->older = m->older;
	m->older = from;
	loop_timer_set(m->loop, &m->retire, loop_now(m->loop) + RETIRE_CHECK_MS);
	log_info("%s: %s loaded (configuration generation %u): %zu listener%s, %zu pool%s, "
		 "%zu route%s, %zu backend%s carried over; generation %u drains",
		 why, m->conf_path, g->sh.gen, conf->nlistens, conf->nlistens == 1 ? "" : "s",
		 conf->npools, conf->npools == 1 ? "" : "s", conf->nroutes,
		 conf->nroutes == 1 ? "" : "s", carried, carried == 1 ? "" : "s", from->sh.gen);
	char status[64];
	snprintf(status, sizeof(status), "STATUS=serving (configuration generation %u)", g->sh.gen);
	proxy_notify(status);
	return 0;
refused:
	m->reloads.failed++;
	log_error("%s: %s; the running configuration stays", why, err);
	return rc;
}

/* POST /api/reload (admin.h): a reload as SIGHUP's, its outcome in the answer. */
static int proxy_api_reload(void *arg, char *err, size_t errlen)
{
	return proxy_reload(arg, "admin API reload", err, errlen);
}

static void main_on_deadline(struct loop_timer *t)
{
	struct main_state *m = container_of(t, struct main_state, deadline);
	log_warn("shutdown_ms passed with requests still in flight; exiting anyway");
	m->forced = 1;
	loop_stop(m->loop);
}

static void proxy_upgrade(struct main_state *m);

static void main_on_signal(int signo, void *arg)
{
	struct main_state *m = arg;
	if (signo == SIGUSR1) { /* rotation: the access log file is opened again */
		accesslog_reopen(m->cur->sh.alog);
		for (struct gen *o = m->older; o; o = o->older)
			accesslog_reopen(o->sh.alog);
		return;
	}
	if (signo == SIGHUP) {
		char err[512];
		proxy_reload(m, "SIGHUP", err, sizeof(err));
		return;
	}
	if (signo == SIGUSR2) {
		proxy_upgrade(m);
		return;
	}
	if (m->stopping) {
		log_warn("second signal: exiting now");
		m->forced = 1;
		loop_stop(m->loop);
		return;
	}
	m->stopping = 1;
	upgrade_free(m->upgrade); /* one starting is told to stop too */
	m->upgrade = NULL;
	proxy_notify("STOPPING=1\nSTATUS=draining");
	log_info("%s: draining (up to %u ms)", signo == SIGTERM ? "SIGTERM" : "SIGINT",
		 m->cur->sh.conf->timeouts.shutdown_ms);
	atomic_store(&m->cur->sh.rt->stopping, 1); /* /readyz: 503 while it drains */
	admin_set_draining(m->cur->admin);	   /* ... and the admin endpoint says so */
	gen_drain(m->cur);
	loop_timer_stop(m->loop, &m->retire);
	loop_timer_set(m->loop, &m->deadline,
		       loop_now(m->loop) + m->cur->sh.conf->timeouts.shutdown_ms);
}

static unsigned running_workers(const struct main_state *m)
{
	unsigned n = m->cur ? atomic_load(&m->cur->sh.running) : 0;
	for (const struct gen *o = m->older; o; o = o->older)
		n += atomic_load(&o->sh.running);
	return n;
}

static void main_on_wake(void *arg)
{
	struct main_state *m = arg;
	if (m->stopping && running_workers(m) == 0)
		loop_stop(m->loop);
}

/*
 * The sockets passed in, by the service manager (one per listener whose address they are
 * bound to) or by the accelnet this one upgrades (each of its workers' sockets, and its
 * admin endpoint's), into m->inherited; a socket that matches no listener is an error from a
 * service manager (a .socket unit that names an address the config does not) and is closed
 * with a warning in an upgrade (the new config dropped that listener). 0 or -errno with
 * <err> filled.
 */
static int proxy_take_sockets(struct main_state *m, const struct conf *c, char *err, size_t errlen)
{
	const struct activation_socket *left;
	int upgrading = getenv("ACCELNET_UPGRADE_FD") != NULL;
	int rc = activation_take(&m->act, err, errlen);
	if (rc < 0 || !m->act.n)
		return rc;
	m->inherited = calloc(c->nlistens ? c->nlistens : 1, sizeof(*m->inherited));
	m->inherited_fd = calloc(m->act.n, sizeof(*m->inherited_fd));
	if (!m->inherited || !m->inherited_fd) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	size_t k = 0;
	for (size_t i = 0; i < c->nlistens; i++) {
		m->inherited[i].fd = &m->inherited_fd[k];
		m->inherited[i].n = activation_find_all(&m->act, &c->listens[i].addr,
							&m->inherited_fd[k], m->act.n - k);
		k += m->inherited[i].n;
	}
	if (c->has_admin)
		m->inherited_admin = activation_find(&m->act, &c->admin.addr);
	if ((left = activation_untaken(&m->act))) {
		char a[64];
		net_addr_format((const struct sockaddr *)&left->addr.ss, a, sizeof(a));
		if (upgrading) {
			log_warn("upgrade: the running process listens on %s, which this config no "
				 "longer names: closed",
				 a);
			return 0;
		}
		snprintf(err, errlen,
			 "the service manager passed a socket (%s) on %s that no listen: address "
			 "names; add the address to listen: or remove it from the .socket unit",
			 left->name, a);
		return -EINVAL;
	}
	return 0;
}

/* The new process is ready (it serves on our sockets), or failed. */
static void main_on_upgrade(void *arg, int ready, pid_t pid, const char *why)
{
	struct main_state *m = arg;
	upgrade_free(m->upgrade);
	m->upgrade = NULL;
	if (!ready) {
		log_error("upgrade: the new process (pid %d) failed: %s; this one serves on",
			  (int)pid, why);
		return;
	}
	/* like SIGTERM, but the service goes on: the new process told the manager it is the
	 * main one now, and no STOPPING=1 is sent */
	log_info("upgrade: the new process (pid %d) serves; this one drains (up to %u ms) and "
		 "exits",
		 (int)pid, m->cur->sh.conf->timeouts.shutdown_ms);
	m->stopping = 1;
	gen_drain(m->cur);
	loop_timer_stop(m->loop, &m->retire);
	loop_timer_set(m->loop, &m->deadline,
		       loop_now(m->loop) + m->cur->sh.conf->timeouts.shutdown_ms);
	main_on_wake(m);
}

/* SIGUSR2: start the executable on our sockets (upgrade.h). */
static void proxy_upgrade(struct main_state *m)
{
	struct gen *g = m->cur;
	char err[256];
	if (m->stopping || m->upgrade) {
		log_warn("upgrade: %s; SIGUSR2 ignored",
			 m->upgrade ? "one is under way" : "draining to exit");
		return;
	}
	size_t n = g->admin ? 1 : 0;
	for (unsigned w = 0; w < g->inited; w++)
		n += g->workers[w].nlisteners;
	int *fds = calloc(n ? n : 1, sizeof(*fds));
	const char **names = calloc(n ? n : 1, sizeof(*names));
	size_t k = 0;
	if (!fds || !names) {
		log_error("upgrade: out of memory; this process serves on");
		goto out;
	}
	for (unsigned w = 0; w < g->inited; w++)
		for (size_t j = 0; j < g->workers[w].nlisteners; j++)
			if (g->workers[w].listeners[j].io.fd >= 0) {
				names[k] = "listen";
				fds[k++] = g->workers[w].listeners[j].io.fd;
			}
	if (g->admin && admin_listen_fd(g->admin) >= 0) {
		names[k] = "admin";
		fds[k++] = admin_listen_fd(g->admin);
	}
	const char *exe = upgrade_exe_path();
	if (upgrade_start(m->loop, exe, fds, names, k, main_on_upgrade, m, &m->upgrade, err,
			  sizeof(err)) < 0) {
		log_error("upgrade: %s; this process serves on", err);
		goto out;
	}
	log_info("upgrade: started %s on %zu listening socket%s; this process serves until it "
		 "is ready",
		 exe, k, k == 1 ? "" : "s");
out:
	free(fds);
	free(names);
}

/* The features that follow every exchange (xhooks.h), in the order their hooks run: at the
 * end, the figures, the log and /debug/requests read what it did before the cache and the
 * limits let go of what it holds, and a spliced body's pipe goes back last. */
static const struct xhook *const proxy_features[] = {
    &tally_hook,   &spend_hook,	 &access_hook, &debugreq_hook,	  &caching_hook, &quota_hook,
    &forward_hook, &sticky_hook, &pd_hook,     &llm_explain_hook, &splice_hook,	 &h1_x_hook,
};

int proxy_run(const struct conf *conf, const struct proxy_hooks *hooks)
{
	struct main_state m = {.conf_path = hooks ? hooks->conf_path : NULL, .inherited_admin = -1};
	char err[512];
	int rc, status = 1;

	if ((rc = xhooks_setup(proxy_features, sizeof(proxy_features) / sizeof(proxy_features[0]),
			       sizeof(struct exchange))) < 0) {
		log_error("cannot register the exchange hooks: %s", strerror(-rc));
		return 1;
	}
	signals_block();
	upgrade_exe_path();		      /* before a package upgrade replaces the file */
	loop_set_backend((int)conf->tune.io); /* at start only: a reload keeps the loops */
	if ((rc = loop_create(&m.loop)) < 0) {
		log_error("cannot create the main loop: %s", strerror(-rc));
		return 1;
	}
	m.deadline.fn = main_on_deadline;
	m.retire.fn = main_on_retire;
	loop_set_wake_hook(m.loop, main_on_wake, &m);
	if (hooks && hooks->start && hooks->start(m.loop, hooks->arg) < 0)
		goto out;
	if ((rc = proxy_take_sockets(&m, conf, err, sizeof(err))) < 0) {
		log_error("%s", err);
		goto out;
	}
	if (!(m.cur = gen_build(&m, conf, 0, NULL, err, sizeof(err)))) {
		log_error("%s", err);
		goto out;
	}
	activation_close(&m.act); /* each worker holds its own dup() of what it uses */
	if ((rc = signals_watch(m.loop, main_on_signal, &m)) < 0) {
		log_error("cannot watch signals: %s", strerror(-rc));
		goto out;
	}
	if ((rc = gen_start(m.cur)) < 0) {
		log_error("cannot start worker thread: %s", strerror(-rc));
		goto out;
	}
	if ((rc = creds_watch(&m.cur->sh, m.cur->workers, m.cur->nworkers)) < 0) {
		log_error("cannot watch the TLS files (reload_s): %s", strerror(-rc));
		goto out;
	}
	int upgraded = upgrade_is_new();
	for (size_t i = 0; i < conf->nlistens; i++)
		log_info("listening on %s%s with %u workers%s", conf->listens[i].address,
			 conf->listens[i].tls ? " (TLS)" : "", m.cur->nworkers,
			 !m.inherited || !m.inherited[i].n ? ""
			 : upgraded			   ? " (sockets of the process upgraded)"
							   : " (socket from the service manager)");
	if (m.cur->admin)
		log_info("admin on %s (/status, /metrics, /dashboard, /debug/requests, /healthz, "
			 "/readyz)",
			 conf->admin.address);
	upgrade_say_ready();
	if (hooks && hooks->ready)
		hooks->ready(hooks->arg);
	if (upgraded) { /* the manager's main process is this one now */
		char state[64];
		snprintf(state, sizeof(state), "MAINPID=%d\nREADY=1\nSTATUS=serving",
			 (int)getpid());
		proxy_notify(state);
	} else {
		proxy_notify("READY=1\nSTATUS=serving");
	}

	loop_run(m.loop);
	status = 0;
	if (m.forced) {
		/* workers may be blocked mid-exchange; the process exit ends them */
		log_info("stopped");
		fflush(NULL);
		_exit(0);
	}
	log_info("stopped: every connection finished");
out:
	activation_close(&m.act);
	upgrade_free(m.upgrade);
	free(m.inherited);
	free(m.inherited_fd);
	if (status && m.cur)
		gen_drain(m.cur);
	/* every worker has stopped (or is told to, and joined here): nothing is waited out */
	while (m.older) {
		struct gen *o = m.older;
		struct runtime *live[MAX_GENS + 1];
		m.older = o->older;
		for (unsigned i = 0; i < o->started; i++)
			worker_request_drain(&o->workers[i]);
		gen_destroy(o, live, live_runtimes(&m, o, live, MAX_GENS + 1));
	}
	gen_destroy(m.cur, NULL, 0);
	if (hooks && hooks->stop)
		hooks->stop(hooks->arg);
	free(m.ip_conns);
	loop_destroy(m.loop);
	return m.port_taken && status ? 2 : status;
}
