/*
 * proxy.h - running the gateway: `accelnet proxy` and the proxy half of `accelnet demo`.
 *
 * proxy_run() opens every listener before anything serves (so a busy port fails the start,
 * never half of it), starts one worker thread per configured worker, each with its own event
 * loop and SO_REUSEPORT listeners, and runs health checks, the admin endpoint and signal
 * handling on the calling thread. SIGTERM or SIGINT drains: listeners close, idle clients
 * are dropped, in-flight exchanges finish, and the process exits 0 when they are done or
 * when timeouts.shutdown_ms has passed.
 */
#ifndef ACCELNET_CONTROL_PROXY_H
#define ACCELNET_CONTROL_PROXY_H

#include "conf/model.h"
#include "core/loop.h"

struct proxy_hooks {
	/* Runs on the main loop before listeners open (the demo starts its simulators here). */
	int (*start)(struct loop *main_loop, void *arg);
	/* Runs once everything is up, e.g. to print what to try. */
	void (*ready)(void *arg);
	/* Runs after the workers have stopped. */
	void (*stop)(void *arg);
	void *arg;
	/* The config file a reload (SIGHUP) reads again; NULL: reloads are refused. */
	const char *conf_path;
};

/* What loading the config cannot see: the files routes read at start (API keys). 0, or
 * -errno with "FILE:LINE: what" in <err>. `accelnet check` runs it. */
int proxy_check(const struct conf *conf, char *err, size_t errlen);

/* Run until a signal stops it. Returns the process exit status (0, or 1 on start-up error). */
int proxy_run(const struct conf *conf, const struct proxy_hooks *hooks);

#endif
