/*
 * admin.h - the admin endpoint (admin.address): GET /status (JSON: pools, backends, their
 * health and load) and GET /metrics (Prometheus text format), both written from the
 * runtime's metrics registry. Served on the main thread: it sums the per-worker counters
 * and reads the live atomics, and never blocks a worker. With admin.token_file, every
 * request needs "Authorization: Bearer TOKEN" (else 401). GET /debug/requests (JSON: the
 * exchanges in flight and the slowest recent ones) asks the workers (debugreq.h).
 * POST /cache/purge unlinks stored responses (cache/purge.h; docs/cache.md, "Purge").
 * /api/ is the runtime admin API (adminapi.h; docs/operations.md, "Runtime admin API").
 * GET /healthz and /readyz are the liveness and readiness probes (no token needed).
 */
#ifndef ACCELNET_CONTROL_ADMIN_H
#define ACCELNET_CONTROL_ADMIN_H

#include "conf/model.h"
#include "core/loop.h"
#include "control/adminapi.h"
#include "runtime/pool.h"

#include <stddef.h>

struct admin;

/* Serve conf->admin (address, token, timeouts): on a dup() of <given>, the listening socket
 * of the admin endpoint it replaces (a reload), or (-1) on a socket of its own. 0, or
 * -errno with <err> filled. */
int admin_start(struct loop *loop, const struct conf *conf, struct runtime *rt, int given,
		struct admin **out, char *err, size_t errlen);
/* Its listening socket, for a reload's admin endpoint to take over. */
int admin_listen_fd(const struct admin *a);
/* Stop taking connections (a reload's endpoint has taken over); the open ones go on. Not
 * once draining: the endpoint then listens until it is stopped. */
void admin_stop_listening(struct admin *a);
/* The process drains to exit (SIGTERM; runtime.stopping makes GET /readyz answer 503): the
 * endpoint keeps listening so that probes hear it (GET /healthz still answers 200). */
void admin_set_draining(struct admin *a);
struct debugreq_board;
/* Serve GET /debug/requests from <b> (which outlives the admin endpoint). */
void admin_serve_debug(struct admin *a, struct debugreq_board *b);
/*
 * POST /api/reload calls <fn>(<arg>, err, errlen): 0 answers 200 {"reloaded": true}, -EINVAL
 * 400 and another -errno 500, with {"error": err}. Without a hook it answers 501.
 */
void admin_set_reload(struct admin *a, adminapi_reload_fn fn, void *arg);
/* Close every admin connection and wipe the token. */
void admin_stop(struct admin *a);

#endif
