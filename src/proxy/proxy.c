/*
 * proxy.c - start-up, the main thread's loop, and shutdown.
 *
 * Order matters: the runtime is built and every listener (workers' and admin) is opened
 * before any thread starts, so that an error leaves nothing running. The main loop then
 * owns signals, health checks and the admin endpoint while the workers serve.
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
#include "proxy/proxy.h"
#include "core/log.h"
#include "core/signals.h"
#include "net/activation.h"
#include "net/sdnotify.h"
#include "obs/accesslog.h"
#include "proxy/admin.h"
#include "proxy/creds.h"
#include "proxy/debugreq.h"
#include "proxy/caching.h"
#include "proxy/dispatch.h"
#include "proxy/discover.h"
#include "proxy/health.h"
#include "proxy/kvsub.h"
#include "proxy/scrape.h"
#include "proxy/session.h"
#include "proxy/shed.h"
#include "proxy/worker.h"

#include <errno.h>
#include <signal.h>
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

/* What runs on the workers: HTTP/1 client connections (session.h), and the exchanges they
 * carry, granted slots through dispatch.h. */
static const struct worker_ops proxy_worker_ops = {
    .accept = session_accept,
    .take_grants = dispatch_take_grants,
    .take_fills = caching_take_ready,
    .peek = debugreq_peek,
    .close_idle = session_close_idle,
};

struct proxy {
	struct worker_shared sh; /* conf, runtime, main loop, running count */
	struct worker *workers;
	unsigned nworkers;
};

struct main_state {
	struct proxy *px;
	struct loop_timer deadline;
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

/* The routes' limits and the accept rate: fixed tables, made before anything serves. */
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
 * The sockets the service manager passed, one per listener whose address they are bound to
 * (into sh->inherited), and an error when one matches no listener. Returns 0 or -errno
 * with <err> filled.
 */
static int proxy_take_sockets(struct worker_shared *sh, struct activation *act, int **fds,
			      char *err, size_t errlen)
{
	const struct conf *c = sh->conf;
	const struct activation_socket *left;
	int rc = activation_take(act, err, errlen);
	if (rc < 0 || !act->n)
		return rc;
	if (!(*fds = malloc((c->nlistens ? c->nlistens : 1) * sizeof(**fds)))) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->nlistens; i++)
		(*fds)[i] = activation_find(act, &c->listens[i].addr);
	if ((left = activation_untaken(act))) {
		char a[64];
		snprintf(err, errlen,
			 "the service manager passed a socket (%s) on %s that no listen: address "
			 "names; add the address to listen: or remove it from the .socket unit",
			 left->name,
			 net_addr_format((const struct sockaddr *)&left->addr.ss, a, sizeof(a)));
		return -EINVAL;
	}
	sh->inherited = *fds;
	return 0;
}

static void main_on_deadline(struct loop_timer *t)
{
	struct main_state *m = container_of(t, struct main_state, deadline);
	log_warn("shutdown_ms passed with requests still in flight; exiting anyway");
	m->forced = 1;
	loop_stop(m->px->sh.main_loop);
}

static void main_on_signal(int signo, void *arg)
{
	struct main_state *m = arg;
	struct proxy *px = m->px;
	if (signo == SIGUSR1) { /* rotation: the access log file is opened again */
		accesslog_reopen(px->sh.alog);
		return;
	}
	if (signo == SIGHUP) {
		/* certificates, keys and API keys files are read again; the rest of the
		 * configuration stays until reload is built */
		creds_reload(&px->sh, px->workers, px->nworkers, "SIGHUP");
		return;
	}
	if (m->stopping) {
		log_warn("second signal: exiting now");
		m->forced = 1;
		loop_stop(px->sh.main_loop);
		return;
	}
	m->stopping = 1;
	proxy_notify("STOPPING=1\nSTATUS=draining");
	log_info("%s: draining (up to %u ms)", signo == SIGTERM ? "SIGTERM" : "SIGINT",
		 px->sh.conf->timeouts.shutdown_ms);
	for (unsigned i = 0; i < px->nworkers; i++)
		worker_request_drain(&px->workers[i]);
	loop_timer_set(px->sh.main_loop, &m->deadline,
		       loop_now(px->sh.main_loop) + px->sh.conf->timeouts.shutdown_ms);
}

/*
 * Raise the soft RLIMIT_NOFILE to the hard limit, and return the connection cap that fits
 * under it: limits.max_connections, or less (with a warning) when each proxied connection's
 * two descriptors (client and backend) plus the reserve would not fit.
 */
static unsigned proxy_fit_connections(const struct conf *c, size_t nbackends)
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
	log_warn("limits.max_connections is %u, but the descriptor limit of %llu carries only "
		 "%llu (two per connection, %llu kept back): using %llu; raise the hard limit "
		 "(ulimit -Hn, LimitNOFILE=) to allow more",
		 want, (unsigned long long)rl.rlim_cur, (unsigned long long)fit,
		 (unsigned long long)reserve, (unsigned long long)fit);
	return (unsigned)fit;
}

static void main_on_wake(void *arg)
{
	struct main_state *m = arg;
	if (m->stopping && atomic_load(&m->px->sh.running) == 0)
		loop_stop(m->px->sh.main_loop);
}

int proxy_run(const struct conf *conf, const struct proxy_hooks *hooks)
{
	struct proxy px = {.sh = {.conf = conf, .ops = &proxy_worker_ops}};
	struct main_state m = {.px = &px};
	struct health *health = NULL;
	struct discover *discover = NULL;
	struct scrape *scrape = NULL;
	struct kvsub *kvsub = NULL;
	struct admin *admin = NULL;
	struct debugreq_board *debug = NULL;
	struct activation act = {0};
	int *inherited = NULL;
	char err[256];
	int rc, status = 1;
	unsigned inited = 0, started = 0;

	signals_block();
	proxy_protect_keys(conf);
	if ((rc = loop_create(&px.sh.main_loop)) < 0) {
		log_error("cannot create the main loop: %s", strerror(-rc));
		return 1;
	}
	m.deadline.fn = main_on_deadline;
	loop_set_wake_hook(px.sh.main_loop, main_on_wake, &m);
	if (hooks && hooks->start && hooks->start(px.sh.main_loop, hooks->arg) < 0)
		goto out;
	if ((rc = runtime_create(conf, &px.sh.rt)) < 0) {
		log_error("cannot build the runtime: %s", strerror(-rc));
		goto out;
	}
	if ((rc = creds_build(&px.sh, err, sizeof(err))) < 0 ||
	    (rc = proxy_limits_build(&px.sh, err, sizeof(err))) < 0) {
		log_error("%s", err);
		goto out;
	}
	if (conf->limits.max_connections_per_ip &&
	    !(px.sh.ip_conns = calloc(IP_CONN_SLOTS, sizeof(*px.sh.ip_conns)))) {
		snprintf(err, sizeof(err), "out of memory");
		log_error("%s", err);
		goto out;
	}
	px.nworkers = conf->workers;
	px.workers = calloc(px.nworkers, sizeof(*px.workers));
	if (!px.workers)
		goto out;
	px.sh.workers = px.workers;
	px.sh.nworkers = px.nworkers;
	px.sh.rt->buffer_arg = &px.sh;
	px.sh.rt->buffer_bytes = proxy_buffer_bytes;
	unsigned cap = proxy_fit_connections(conf, px.sh.rt->nbackends);
	unsigned per_worker = (cap + px.nworkers - 1) / px.nworkers;
	if ((rc = proxy_take_sockets(&px.sh, &act, &inherited, err, sizeof(err))) < 0) {
		log_error("%s", err);
		goto out;
	}
	for (; inited < px.nworkers; inited++) {
		if (worker_init(&px.workers[inited], &px.sh, inited, per_worker, err, sizeof(err)) <
		    0) {
			log_error("%s", err);
			inited++;
			goto out;
		}
	}
	activation_close(&act); /* each worker holds its own dup() of what it uses */
	if (!(debug = debugreq_board_new(px.nworkers))) {
		log_error("out of memory");
		goto out;
	}
	for (unsigned i = 0; i < px.nworkers; i++) {
		debug->w[i].loop = px.workers[i].loop;
		px.workers[i].dbg = &debug->w[i];
	}
	if (conf->access_log.path) {
		if ((rc = accesslog_open(&px.sh.alog, conf->access_log.path,
					 conf->access_log.syslog_socket, conf->access_log.format,
					 px.nworkers, err, sizeof(err))) < 0) {
			log_error("%s", err);
			goto out;
		}
		px.sh.rt->alog = px.sh.alog;
		double s = conf->access_log.sample;
		uint64_t cut = s >= 1.0 ? UINT64_MAX : (uint64_t)(s * 18446744073709551616.0);
		for (unsigned i = 0; i < px.nworkers; i++) {
			px.workers[i].alog_ring = accesslog_ring(px.sh.alog, i);
			px.workers[i].alog_sample_cut = cut;
		}
	}
	if (conf->has_admin &&
	    (rc = admin_start(px.sh.main_loop, conf, px.sh.rt, &admin, err, sizeof(err))) < 0) {
		log_error("%s", err);
		goto out;
	}
	if (admin)
		admin_serve_debug(admin, debug);
	if ((rc = proxy_drop_privileges(conf, err, sizeof(err))) < 0) {
		log_error("%s", err);
		goto out;
	}
	if ((rc = health_start(px.sh.main_loop, px.sh.rt, &health)) < 0) {
		log_error("cannot start health checks: %s", strerror(-rc));
		goto out;
	}
	if ((rc = discover_start(px.sh.main_loop, px.sh.rt, &discover)) < 0)
		goto out; /* it said why */
	if ((rc = scrape_start(px.sh.main_loop, px.sh.rt, &scrape)) < 0) {
		log_error("cannot start scraping the engines' metrics: %s", strerror(-rc));
		goto out;
	}
	if ((rc = kvsub_start(px.sh.main_loop, px.sh.rt, &kvsub)) < 0)
		goto out; /* it said why */
	if ((rc = signals_watch(px.sh.main_loop, main_on_signal, &m)) < 0) {
		log_error("cannot watch signals: %s", strerror(-rc));
		goto out;
	}
	if ((rc = creds_watch(&px.sh, px.workers, px.nworkers)) < 0) {
		log_error("cannot watch the TLS files (reload_s): %s", strerror(-rc));
		goto out;
	}
	for (; started < px.nworkers; started++) {
		if ((rc = worker_start(&px.workers[started])) < 0) {
			log_error("cannot start worker thread: %s", strerror(-rc));
			goto out;
		}
	}
	for (size_t i = 0; i < conf->nlistens; i++)
		log_info("listening on %s%s with %u workers%s", conf->listens[i].address,
			 conf->listens[i].tls ? " (TLS)" : "", px.nworkers,
			 inherited && inherited[i] >= 0 ? " (socket from the service manager)"
							: "");
	if (admin)
		log_info("admin on %s (/status, /metrics, /dashboard, /debug/requests)",
			 conf->admin.address);
	if (hooks && hooks->ready)
		hooks->ready(hooks->arg);
	proxy_notify("READY=1\nSTATUS=serving");

	loop_run(px.sh.main_loop);
	status = 0;
	if (m.forced) {
		/* workers may be blocked mid-exchange; the process exit ends them */
		log_info("stopped");
		fflush(NULL);
		_exit(0);
	}
	log_info("stopped: every connection finished");
out:
	activation_close(&act);
	free(inherited);
	px.sh.inherited = NULL;
	if (status && started) {
		for (unsigned i = 0; i < started; i++)
			worker_request_drain(&px.workers[i]);
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(px.workers[i].thread, NULL);
	for (unsigned i = 0; i < inited; i++)
		worker_destroy(&px.workers[i]);
	free(px.workers);
	if (px.sh.rt)
		px.sh.rt->alog = NULL; /* the admin endpoint has stopped reading it */
	accesslog_close(px.sh.alog);   /* after the workers: every line they pushed is written */
	health_stop(health);
	discover_stop(discover);
	scrape_stop(scrape);
	kvsub_stop(kvsub);
	admin_stop(admin);
	debugreq_board_free(debug); /* after the workers and the admin endpoint */
	if (hooks && hooks->stop)
		hooks->stop(hooks->arg);
	creds_free(&px.sh);
	proxy_limits_free(&px.sh);
	free(px.sh.ip_conns);
	runtime_destroy(px.sh.rt);
	loop_destroy(px.sh.main_loop);
	return status;
}
