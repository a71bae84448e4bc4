/*
 * deadline.c - an exchange's clocks (see deadline.h).
 */
#include "proxy/deadline.h"
#include "core/rand.h"
#include "proxy/admission.h"
#include "proxy/caching.h"
#include "proxy/dispatch.h"
#include "proxy/forward.h"
#include "proxy/hedge.h"
#include "proxy/pace.h"
#include "proxy/pd.h"
#include "proxy/spill.h"

/* Is the proxy itself holding the request body back? Then a slow body is not the client's
 * doing. */
static int body_held_back(const struct exchange *x)
{
	const struct xpace *p = exchange_pace(x);
	const struct upconn *up = x->att->up;
	return x->wt.state != W_IDLE || p->buf_wait || x->att->local_wait ||
	       x->codec->body_held(x) || (x->req.ready && up && (up->connecting || !up->writable));
}

/* When the request body is next judged: the end of timeouts.body_ms or of the current rate
 * window, the earlier; 0 when neither applies. */
static uint64_t body_deadline(const struct exchange *x)
{
	const struct xpace *p = exchange_pace(x);
	const struct conf *c = x->w->conf;
	uint64_t due = 0;
	if (x->req.done)
		return 0;
	if (c->timeouts.body_ms)
		due = p->body_start_ms + c->timeouts.body_ms;
	if (c->limits.min_body_rate) {
		uint64_t window_end = p->rate_mark_ms + BODY_RATE_WINDOW_MS;
		if (!due || window_end < due)
			due = window_end;
	}
	return due;
}

/* The body deadline came: is the body late? A good window starts the next. */
static int body_late(struct exchange *x, uint64_t now)
{
	struct xpace *p = exchange_pace(x);
	const struct conf *c = x->w->conf;
	uint64_t got = x->req.sent + x->req.ready;
	if (c->timeouts.body_ms && now >= p->body_start_ms + c->timeouts.body_ms)
		return 1;
	if (!c->limits.min_body_rate || now < p->rate_mark_ms + BODY_RATE_WINDOW_MS)
		return 0;
	uint64_t need = (uint64_t)c->limits.min_body_rate * (now - p->rate_mark_ms) / 1000;
	if (got - p->rate_mark_bytes < need && !body_held_back(x))
		return 1;
	p->rate_mark_ms = now;
	p->rate_mark_bytes = got;
	return 0;
}

/* timeouts.send_ms: when a client whose socket is full (it takes none of the response bytes
 * waiting for it) is cut; 0 when it is taking them, or there is no limit. */
static uint64_t send_deadline(const struct exchange *x)
{
	const struct xpace *p = exchange_pace(x);
	unsigned send_ms = x->w->conf->timeouts.send_ms;
	return p->client_full && send_ms ? p->client_took_ms + send_ms : 0;
}

/* routes.sse_heartbeat_ms (sse.h): while it waits for its backend. Not while it waits on
 * another's fill for the cached head (caching.h, bounded by routes.cache.wait_ms): the answer
 * is the cache's head, not the proxy's event stream, and deadline_fire() ends that wait first,
 * so a heartbeat due then would never be sent nor put off (the timer firing at once, again
 * and again: a worker spinning until the fill's head came). */
static int heartbeat_due(const struct exchange *x)
{
	const struct xpace *p = exchange_pace(x);
	return p->sse_hb && !x->resp_head && !p->buffering && !caching_hit_waiting(x, NULL);
}

/* The queue's own deadline: spill over (after spillover.after_ms), or give up
 * (queue.timeout_ms). */
static uint64_t queue_due(const struct exchange *x)
{
	uint64_t due = x->wt.queued_ms + x->pool->conf->queue_timeout_ms;
	if (spill_possible(x) && x->wt.queued_ms + x->route->spill_after_ms < due)
		due = x->wt.queued_ms + x->route->spill_after_ms;
	return due;
}

/* balance: llm: when a request queued for its busy home stops waiting for it (max_wait_ms
 * after a pick first passed up a free slot for it) and must be offered a free slot
 * elsewhere, even if nothing else happens in the pool; 0: not such a request, or already
 * offered. A pick made by another worker, as a slot freed there, may start that wait
 * unheard of here: until it has started, the request looks again max_wait_ms after <now>. */
static uint64_t llm_wait_end(const struct exchange *x, uint64_t now)
{
	if (x->wt.state != W_QUEUED || x->llm_wait_over || !x->pool->conf->balance->blocks)
		return 0; /* (x->pool is set once it queues: not before its route is known) */
	unsigned max_wait = x->pool->conf->lb.max_wait_ms;
	uint64_t at = atomic_load_explicit(&x->wt.declined_ms, memory_order_relaxed);
	return max_wait ? (at ? at : now) + max_wait + 1 : 0; /* (0: it never waits) */
}

uint64_t deadline_next(const struct exchange *x, uint64_t now)
{
	const struct xpace *p = exchange_pace(x);
	const struct conf_timeouts *t = &x->w->conf->timeouts;
	const struct attempt *a = x->att;
	uint64_t deadline;
	if (caching_hit_waiting(x, &deadline)) {
		/* a coalesced wait for a fill's head: until it ends */
	} else if (a->local_wait) {
		deadline = now + LOCAL_WAIT_MS; /* bounded in dispatch.c */
	} else if (x->wt.state != W_IDLE) {
		deadline = queue_due(x);
	} else if (pd_waiting(x)) {
		deadline = pd_deadline(x); /* its prefill's */
	} else if (a->up && a->up->connecting) {
		deadline = a->connect_ms + t->connect_ms;
	} else if (!x->resp_head && x->req.done && !x->req.ready &&
		   (!x->uphead || a->head_off == forward_head_len(x, a))) {
		deadline = x->last_ms + t->first_byte_ms;
	} else {
		deadline = x->last_ms + t->between_bytes_ms;
	}
	uint64_t body_due = body_deadline(x), send_due = send_deadline(x), hedge_at;
	if (body_due && body_due < deadline)
		deadline = body_due;
	if (send_due && send_due < deadline)
		deadline = send_due;
	if (p->buf_wait && now + BODY_BUF_WAIT_MS < deadline)
		deadline = now + BODY_BUF_WAIT_MS;
	if (hedge_due(x, &hedge_at) && hedge_at < deadline)
		deadline = hedge_at;
	if (heartbeat_due(x) && p->hb_next_ms < deadline)
		deadline = p->hb_next_ms;
	uint64_t wait_end = llm_wait_end(x, now);
	if (wait_end && wait_end < deadline)
		deadline = wait_end;
	if (x->until_ms && x->until_ms < deadline)
		deadline = x->until_ms;
	return deadline;
}

/* The queue's deadline: spill over (after spillover.after_ms), or give up (queue.timeout_ms). */
static enum run queue_deadline(struct exchange *x, uint64_t now)
{
	if (spill_possible(x) && now < x->wt.queued_ms + x->pool->conf->queue_timeout_ms)
		return dispatch_spill(x);
	/* a slot granted at this very moment is handed back by the withdrawal */
	exchange_note_queue_end(x, now);
	admission_withdraw(x->pool, &x->wt, now, rand_next(&x->w->rng), WITHDRAW_TIMEOUT);
	return exchange_reply(x, 503, "no backend slot freed within queue.timeout_ms", 1);
}

/* The client's own deadline (grpc-timeout) passed: out of the queue, and 504 (gRPC's
 * DEADLINE_EXCEEDED) before a response began, the response cut after; the backend's work is
 * cancelled either way. */
static enum run client_deadline(struct exchange *x, uint64_t now)
{
	if (x->wt.state != W_IDLE) {
		exchange_note_queue_end(x, now);
		admission_withdraw(x->pool, &x->wt, now, rand_next(&x->w->rng), WITHDRAW_TIMEOUT);
	}
	if (x->resp_head)
		return exchange_abort(x, "the client's deadline (grpc-timeout) passed");
	exchange_drop_upstream(x);
	return exchange_reply(x, 504, "the client's deadline (grpc-timeout) passed", 1);
}

enum run deadline_fire(struct exchange *x, uint64_t now)
{
	struct xpace *p = exchange_pace(x);
	if (x->until_ms && now >= x->until_ms)
		return client_deadline(x, now);
	uint64_t body_due = body_deadline(x), hedge_at;
	if (body_due && now >= body_due && body_late(x, now)) {
		/* a body too slow or too late: whatever slot it holds is freed */
		if (x->resp_head)
			return exchange_abort(x, "request body not received in time");
		return exchange_reply(x, 408, "request body not received in time", 0);
	}
	uint64_t send_due = send_deadline(x);
	if (send_due && now >= send_due)
		return exchange_abort(x,
				      "the client took no response bytes within timeouts.send_ms");
	if (p->buf_wait) {
		p->buf_wait = 0; /* look for a free body buffer again */
		return RUN_AGAIN;
	}
	if (x->att->local_wait)
		return dispatch_attach_again(x); /* a descriptor may have freed */
	if (caching_hit_waiting(x, NULL))
		return RUN_AGAIN; /* the wait for the fill's head is over: hit.h gives it up */
	if (body_due && now >= body_due)
		return RUN_AGAIN; /* a good rate window ended: the next one is armed */
	if (heartbeat_due(x) && now >= p->hb_next_ms) {
		x->codec->heartbeat(x);
		return RUN_AGAIN;
	}
	if (hedge_due(x, &hedge_at) && now >= hedge_at) {
		hedge_start(x); /* no answer yet: ask a second backend too */
		return RUN_AGAIN;
	}
	uint64_t wait_end = llm_wait_end(x, now);
	if (wait_end && now >= wait_end) {
		/* it has waited for its home long enough: a free slot anywhere will do now */
		x->llm_wait_over = 1;
		admission_grant(x->pool, now, rand_next(&x->w->rng));
		return RUN_AGAIN;
	}
	if (x->wt.state != W_IDLE) /* (before its deadline: llm's look, its wait not started) */
		return now >= queue_due(x) ? queue_deadline(x, now) : RUN_AGAIN;
	if (pd_waiting(x))
		return pd_timeout(x, now);
	if (x->att->up && x->att->up->connecting)
		return dispatch_failed(x, UP_CONNECT_TIMEOUT);
	if (!x->resp_head && x->req.done)
		return dispatch_failed(x, UP_TIMEOUT);
	if (!x->resp_head)
		return exchange_reply(x, 408, "request body not received in time", 0);
	x->up_stalled = 1;
	return exchange_abort(x, "no bytes within between_bytes_ms");
}
