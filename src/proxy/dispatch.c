/*
 * dispatch.c - admission, spillover, attaching an upstream connection, failed attempts
 * (see dispatch.h). Each try is the exchange's current attempt (attempt.h): begun on the
 * backend admission picks, connected here, ended on failure and begun again for a retry.
 */
#include "proxy/dispatch.h"
#include "core/log.h"
#include "core/rand.h"
#include "net/sock.h"
#include "proxy/admission.h"
#include "proxy/hedge.h"
#include "proxy/retry.h"
#include "proxy/spill.h"
#include "runtime/pick.h"
#include "runtime/proxy_metric.h"

#include <string.h>

/* Count a request of <pool> that no backend will serve. */
static void pool_turned_away(struct pool_rt *pool)
{
	pool_count(pool, PM_POOL_UNAVAILABLE, 1);
}

/* The connect of <x> found this process out of descriptors (or buffers) before a byte went
 * upstream: keep the slot and look again every LOCAL_WAIT_MS (deadline.c), for up to
 * timeouts.connect_ms, so a client accepted with the last descriptor is served once one
 * frees; then 503. The backend is never blamed. */
static enum run attach_wait(struct exchange *x, uint64_t now, int err)
{
	struct attempt *a = x->att;
	if (!a->local_wait) {
		a->local_wait = 1;
		a->local_wait_since = now;
		log_warn_every(10000,
			       "connect to backend %s: %s here, which is not the backend's fault; "
			       "the request waits for one to free (up to timeouts.connect_ms)",
			       a->be->name, strerror(-err));
	}
	if (now >= a->local_wait_since + x->w->conf->timeouts.connect_ms) {
		a->local_wait = 0;
		return dispatch_failed(x, UP_LOCAL);
	}
	return RUN_STAY;
}

/* The current attempt holds a claimed slot: take an idle connection to its backend, or
 * start a new one. The connection's events wake the connection that carries <x>. */
static enum run dispatch_attach(struct exchange *x)
{
	struct worker *w = x->w;
	struct attempt *a = x->att;
	uint64_t now = loop_now(w->loop);
	int err = attempt_connect(a, w, x->conn, x->codec->wake);
	if (!err)
		a->up->grpc_web = x->grpc_web;
	if (err) {
		/* the connect failed at once (refused on loopback, or out of descriptors) */
		log_debug("backend %s: connect: %s", a->be->name, strerror(-err));
		if (sock_error_is_local(err))
			return attach_wait(x, now, err);
		return dispatch_failed(x, UP_CONNECT);
	}
	/* the figures of the access log, X-Accelnet-Timing and /debug/requests */
	exchange_note_queue_end(x, now);
	x->log.backend = a->be;
	x->log.dispatch_ns = a->sent_ns;
	x->log.conn_ns = a->up->connecting ? 0 : a->sent_ns; /* a kept-alive one is ready */
	x->last_read_ns = 0;
	x->last_ms = now;
	return RUN_AGAIN;
}

enum run dispatch_attach_again(struct exchange *x)
{
	return dispatch_attach(x);
}

enum run dispatch_spill(struct exchange *x)
{
	spill_move(x);
	return dispatch_connect(x, NULL);
}

/* A retry: straight to the balancer, never back to <exclude>. */
static enum run connect_retry(struct exchange *x, const struct backend *exclude)
{
	struct worker *w = x->w;
	struct pick_hint h = {.exclude = exclude,
			      .key = x->wt.key,
			      .has_key = x->wt.has_key,
			      .blocks = x->wt.blocks,
			      .nblocks = x->wt.nblocks,
			      .missed = &x->wt.missed,
			      .ticks = &x->wt.ticks,
			      .work = &x->wt.work,
			      .explain = x->wt.explain,
			      .model = x->wt.model,
			      .has_model = x->wt.has_model,
			      .session = x->wt.session,
			      .has_session = x->wt.has_session,
			      .session_learn = x->wt.session_learn};
	struct attempt *a = x->att;
	struct backend *be = pool_pick(x->pool, loop_now(w->loop), rand_next(&w->rng), &h);
	if (be) {
		attempt_begin(a, x->pool, be);
		return dispatch_attach(x);
	}
	if (spill_possible(x))
		return dispatch_spill(x);
	pool_turned_away(x->pool);
	return exchange_reply(x, a->retry_status,
			      a->retry_status == 504 ? "backend connect timeout, no other backend"
			      : a->retry_tls ? "backend TLS handshake failed, no other backend"
					     : "backend connection failed, no other backend",
			      1);
}

enum run dispatch_connect(struct exchange *x, const struct backend *exclude)
{
	struct worker *w = x->w;
	struct backend *be = NULL;
	if (x->att->retried)
		return connect_retry(x, exclude);
	x->llm_wait_over = 0; /* a new place in a queue (a spill's, a decode's): max_wait anew */
	switch (admission_admit(x->pool, &x->wt, loop_now(w->loop), rand_next(&w->rng), &be)) {
	case ADMIT_PICKED:
		break;
	case ADMIT_QUEUED:
		return RUN_STAY; /* dispatch_take_grants() resumes it */
	case ADMIT_FULL:
		pool_turned_away(x->pool);
		if (spill_possible(x))
			return dispatch_spill(x);
		return exchange_reply(x, 503, "every backend is busy and the queue is full", 1);
	case ADMIT_NONE:
		pool_turned_away(x->pool);
		if (spill_possible(x))
			return dispatch_spill(x);
		return exchange_reply(x, 503, "no backend available", 1);
	}
	attempt_begin(x->att, x->pool, be);
	return dispatch_attach(x);
}

enum run dispatch_failed(struct exchange *x, enum up_failure why)
{
	if (why == UP_LOCAL) { /* never marks the backend failed, never spends a retry */
		exchange_drop_upstream(x);
		if (x->resp_head)
			return exchange_abort(x, "proxy out of descriptors or buffers");
		return exchange_reply(x, 503, "proxy out of descriptors or buffers", 1);
	}
	int status = 502;
	const char *detail = "";
	struct backend *be = x->att->be;
	switch (retry_decide(x, why, &status, &detail)) {
	case RETRY_TO_HEDGE:
		hedge_promote(x); /* the copy on another backend carries on alone */
		return RUN_AGAIN;
	case RETRY_AGAIN: /* this attempt ends; the retry begins in its place */
		exchange_drop_upstream(x);
		x->att->retried = 1;
		if (be)
			backend_count(be, PM_BACKEND_RETRIES, 1);
		return dispatch_connect(x, retry_connect_failed(why) ? be : NULL);
	case RETRY_NO:
		break;
	}
	exchange_drop_upstream(x);
	if (x->resp_head)
		return exchange_abort(x, "upstream failed mid-response");
	return exchange_reply(x, status, detail, 1);
}

void dispatch_take_grants(struct worker *w)
{
	struct waiter *wt;
	while ((wt = admission_inbox_take(&w->inbox))) {
		struct exchange *x = container_of(wt, struct exchange, wt);
		wt->state = W_IDLE;
		struct backend *be = wt->granted;
		wt->granted = NULL;
		x->last_ms = loop_now(w->loop);
		void *conn = x->conn; /* the attempt may end the exchange, not the connection */
		const struct exchange_codec_ops *codec = x->codec;
		enum run r;
		if (be) {
			attempt_begin(x->att, x->pool, be);
			r = dispatch_attach(x);
		} else { /* pushed out of the full queue by a lighter tenant */
			pool_turned_away(x->pool);
			r = spill_possible(x)
				? dispatch_spill(x)
				: exchange_reply(x, 503,
						 "the queue is full and this place went "
						 "to a tenant with fewer requests waiting",
						 1);
		}
		if (r != RUN_GONE)
			codec->wake(conn);
	}
}
