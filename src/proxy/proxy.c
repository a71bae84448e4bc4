/*
 * proxy.c - start-up, the main thread's loop, and shutdown.
 *
 * Order matters: the runtime is built and every listener (workers' and admin) is opened
 * before any thread starts, so that an error leaves nothing running. The main loop then
 * owns signals, health checks and the admin endpoint while the workers serve.
 */
#include "proxy/proxy.h"
#include "core/log.h"
#include "core/signals.h"
#include "proxy/admin.h"
#include "proxy/health.h"
#include "proxy/worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct main_state {
	struct proxy *px;
	struct loop_timer deadline;
	int stopping;
	int forced;
};

static void main_on_deadline(struct loop_timer *t)
{
	struct main_state *m = container_of(t, struct main_state, deadline);
	log_warn("shutdown_ms passed with requests still in flight; exiting anyway");
	m->forced = 1;
	loop_stop(m->px->main_loop);
}

static void main_on_signal(int signo, void *arg)
{
	struct main_state *m = arg;
	struct proxy *px = m->px;
	if (signo == SIGHUP) {
		log_warn("SIGHUP: configuration reload is not built yet; "
			 "the running configuration stays");
		return;
	}
	if (m->stopping) {
		log_warn("second signal: exiting now");
		m->forced = 1;
		loop_stop(px->main_loop);
		return;
	}
	m->stopping = 1;
	log_info("%s: draining (up to %u ms)", signo == SIGTERM ? "SIGTERM" : "SIGINT",
		 px->conf->timeouts.shutdown_ms);
	for (unsigned i = 0; i < px->nworkers; i++)
		worker_request_drain(&px->workers[i]);
	loop_timer_set(px->main_loop, &m->deadline,
		       loop_now(px->main_loop) + px->conf->timeouts.shutdown_ms);
}

static void main_on_wake(void *arg)
{
	struct main_state *m = arg;
	if (m->stopping && atomic_load(&m->px->running) == 0)
		loop_stop(m->px->main_loop);
}

int proxy_run(const struct conf *conf, const struct proxy_hooks *hooks)
{
	struct proxy px = {.conf = conf};
	struct main_state m = {.px = &px};
	struct health *health = NULL;
	struct admin *admin = NULL;
	char err[256];
	int rc, status = 1;
	unsigned inited = 0, started = 0;

	signals_block();
	if ((rc = loop_create(&px.main_loop)) < 0) {
		log_error("cannot create the main loop: %s", strerror(-rc));
		return 1;
	}
	m.deadline.fn = main_on_deadline;
	loop_set_wake_hook(px.main_loop, main_on_wake, &m);
	if (hooks && hooks->start && hooks->start(px.main_loop, hooks->arg) < 0)
		goto out;
	if ((rc = runtime_create(conf, &px.rt)) < 0) {
		log_error("cannot build the runtime: %s", strerror(-rc));
		goto out;
	}
	px.nworkers = conf->workers;
	px.workers = calloc(px.nworkers, sizeof(*px.workers));
	if (!px.workers)
		goto out;
	for (; inited < px.nworkers; inited++) {
		if (worker_init(&px.workers[inited], &px, inited, err, sizeof(err)) < 0) {
			log_error("%s", err);
			inited++;
			goto out;
		}
	}
	if (conf->has_admin && (rc = admin_start(px.main_loop, &conf->admin.addr, px.rt, &admin))) {
		log_error("cannot serve admin on %s: %s", conf->admin.address, strerror(-rc));
		goto out;
	}
	if ((rc = health_start(px.main_loop, px.rt, &health)) < 0) {
		log_error("cannot start health checks: %s", strerror(-rc));
		goto out;
	}
	if ((rc = signals_watch(px.main_loop, main_on_signal, &m)) < 0) {
		log_error("cannot watch signals: %s", strerror(-rc));
		goto out;
	}
	for (; started < px.nworkers; started++) {
		if ((rc = worker_start(&px.workers[started])) < 0) {
			log_error("cannot start worker thread: %s", strerror(-rc));
			goto out;
		}
	}
	for (size_t i = 0; i < conf->nlistens; i++)
		log_info("listening on %s with %u workers", conf->listens[i].address, px.nworkers);
	if (admin)
		log_info("admin on %s (/status, /metrics)", conf->admin.address);
	if (hooks && hooks->ready)
		hooks->ready(hooks->arg);

	loop_run(px.main_loop);
	status = 0;
	if (m.forced) {
		/* workers may be blocked mid-exchange; the process exit ends them */
		log_info("stopped");
		fflush(NULL);
		_exit(0);
	}
	log_info("stopped: every connection finished");
out:
	if (status && started) {
		for (unsigned i = 0; i < started; i++)
			worker_request_drain(&px.workers[i]);
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(px.workers[i].thread, NULL);
	for (unsigned i = 0; i < inited; i++)
		worker_destroy(&px.workers[i]);
	free(px.workers);
	health_stop(health);
	admin_stop(admin);
	if (hooks && hooks->stop)
		hooks->stop(hooks->arg);
	runtime_destroy(px.rt);
	loop_destroy(px.main_loop);
	return status;
}
