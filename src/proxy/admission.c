/*
 * admission.c - admitting requests to backend slots, queueing them, granting freed slots
 * (see admission.h).
 */
#include "proxy/admission.h"
#include "core/check.h"
#include "core/loop.h"
#include "core/rand.h"
#include "runtime/llm.h"
#include "runtime/pick.h"
#include "runtime/proxy_metric.h"

static void inbox_push(struct admission_inbox *in, struct waiter *wt)
{
	pthread_mutex_lock(&in->lock);
	list_push_back(&in->granted, &wt->ilink);
	pthread_mutex_unlock(&in->lock);
	loop_wake(in->loop);
}

void admission_inbox_init(struct admission_inbox *in, struct loop *loop)
{
	pthread_mutex_init(&in->lock, NULL);
	list_init(&in->granted);
	in->loop = loop;
}

void admission_inbox_destroy(struct admission_inbox *in)
{
	pthread_mutex_destroy(&in->lock);
}

struct waiter *admission_inbox_take(struct admission_inbox *in)
{
	pthread_mutex_lock(&in->lock);
	struct list_node *n = list_pop_front(&in->granted);
	pthread_mutex_unlock(&in->lock);
	return n ? container_of(n, struct waiter, ilink) : NULL;
}

static struct waiter *waiter_of(struct qd_item *it)
{
	return it ? container_of(it, struct waiter, item) : NULL;
}

/* balance: llm: how long since a pick for <wt> first passed up a free slot to wait for its
 * home (0: none has). Its time in a line where no slot was free is not counted: when the
 * line itself takes max_wait_ms, counting it would send every request to whatever slot
 * freed first, the caches would lose the conversations they hold, every prefill would
 * grow and the line with it (bench/fleets.py's independent shape at 1.37x: hits 44 % ->
 * 34 %, first tokens past 3 s). */
static uint32_t waiter_declined_ms(const struct waiter *wt, uint64_t now_ms)
{
	uint64_t at = atomic_load_explicit(&wt->declined_ms, memory_order_relaxed);
	if (wt->state != W_QUEUED || !at || now_ms <= at)
		return 0;
	return now_ms - at > UINT32_MAX ? UINT32_MAX : (uint32_t)(now_ms - at);
}

/* What a pick for <wt>, of <pool>, knows. */
static struct pick_hint hint_of(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms)
{
	return (struct pick_hint){
	    .home = wt->home,
	    .queued = pool_queue_len(&pool->queue),
	    .key = wt->key,
	    .has_key = wt->has_key,
	    .blocks = wt->blocks,
	    .nblocks = wt->nblocks,
	    .waited_ms = wt->state == W_QUEUED && now_ms > wt->queued_ms
			     ? (uint32_t)(now_ms - wt->queued_ms)
			     : 0,
	    .declined_ms = waiter_declined_ms(wt, now_ms),
	    .missed = &wt->missed,
	    .ticks = &wt->ticks,
	    .work = &wt->work,
	    .explain = wt->explain,
	    .model = wt->model,
	    .has_model = wt->has_model,
	    .session = wt->session,
	    .has_session = wt->has_session,
	    .session_learn = wt->session_learn,
	};
}

/* The queue of <q> changed length: tell the picks made without its lock. Under the lock. */
static void queue_changed(struct pool_queue *q)
{
	atomic_store_explicit(&q->len, q->qd.len, memory_order_relaxed);
}

/* balance: llm: count <wt> as waiting for the backend at <idx> of <pool> (-1 or a backend
 * without llm state: for none), so that picks for others see it ahead of them there. Under
 * the queue lock; a waiter leaving the queue is counted for none. */
static void waiter_wait_for(struct pool_rt *pool, struct waiter *wt, int idx)
{
	struct backend *to =
	    idx >= 0 && (size_t)idx < pool->nbackends ? &pool->backends[idx] : NULL;
	if (to && !to->llm)
		to = NULL;
	if (to == wt->home)
		return;
	llm_wait_for(wt->home ? wt->home->llm : NULL, to ? to->llm : NULL);
	wt->home = to;
}

/* balance: llm: a pick for <wt> passed up a free slot to wait for the busy backend at <idx>
 * (its wait_for answer): the first time, its max_wait_ms starts (waiter_declined_ms()), and
 * it is counted waiting for that backend. Under the queue lock. */
static void waiter_declined(struct pool_rt *pool, struct waiter *wt, int idx, uint64_t now_ms)
{
	if (!atomic_load_explicit(&wt->declined_ms, memory_order_relaxed))
		atomic_store_explicit(&wt->declined_ms, now_ms ? now_ms : 1, memory_order_relaxed);
	waiter_wait_for(pool, wt, idx);
}

/* How far behind the head a freed slot looks for the request that gains most from it. */
#define GRANT_LOOK_BEHIND 32

/*
 * balance: llm: a slot is free but the head of the line would rather wait for its own
 * backend (or the pick said so for it). Look behind it: first for a waiter whose cached
 * prefix is on a backend with a free slot, then for any waiter that takes a free slot.
 * The item found, with its backend in *nb, or NULL.
 */
static struct qd_item *grant_look_behind(struct pool_rt *pool, uint64_t now_ms, uint64_t rnd,
					 struct qd_item *head, struct backend **nb)
{
	struct pool_queue *q = &pool->queue;
	if (!q->qd.ops->next)
		return NULL;
	for (int home_only = 1; home_only >= 0; home_only--) {
		struct qd_item *it = home_only ? head : q->qd.ops->next(&q->qd, head);
		for (unsigned k = 0; it && k < GRANT_LOOK_BEHIND;
		     k++, it = q->qd.ops->next(&q->qd, it)) {
			struct waiter *wt = waiter_of(it);
			struct pick_hint h = hint_of(pool, wt, now_ms);
			int would_wait = 0, wait_for = -1;
			h.home_only = home_only;
			h.would_wait = &would_wait;
			h.wait_for = &wait_for;
			if ((*nb = pool_pick(pool, now_ms, rnd, &h)))
				return it;
			if (wait_for >= 0)
				waiter_declined(pool, wt, wait_for, now_ms);
			if (!would_wait && !wt->has_model)
				return NULL; /* no backend has a free slot at all */
		}
	}
	return NULL;
}

/*
 * pools.backends.models: a slot is free, but not on a backend that serves the model of the
 * head of the line. Look behind it for a waiter the slot serves (another model, or none),
 * so that the slot is not left idle while the head waits for its own backends. The item
 * found, with its backend in *nb, or NULL.
 */
static struct qd_item *grant_other_model(struct pool_rt *pool, uint64_t now_ms, uint64_t rnd,
					 struct qd_item *head, struct backend **nb)
{
	struct pool_queue *q = &pool->queue;
	if (!q->qd.ops->next)
		return NULL;
	struct qd_item *it = q->qd.ops->next(&q->qd, head);
	for (unsigned k = 0; it && k < GRANT_LOOK_BEHIND; k++, it = q->qd.ops->next(&q->qd, it)) {
		struct waiter *wt = waiter_of(it);
		struct pick_hint h = hint_of(pool, wt, now_ms);
		if ((*nb = pool_pick(pool, now_ms, rnd, &h)))
			return it;
		if (!wt->has_model)
			return NULL; /* one that any backend serves found no slot: none is free */
	}
	return NULL;
}

/* Grant slots to waiting requests while the balancer finds backends for them. With <self>
 * (a request just queued by this thread), a slot granted to it is returned instead of
 * being sent through the inbox. Under the queue lock. */
static struct backend *grant_locked(struct pool_rt *pool, uint64_t now_ms, uint64_t rnd,
				    struct waiter *self)
{
	struct pool_queue *q = &pool->queue;
	struct backend *mine = NULL;
	struct qd_item *head;
	while ((head = q->qd.ops->peek(&q->qd))) {
		struct waiter *wt = waiter_of(head);
		/* ask on behalf of the last in line: would anyone rather have this slot? */
		struct pick_hint h = hint_of(pool, wt, now_ms);
		int would_wait = 0, wait_for = -1;
		h.waiting = q->qd.len - 1;
		h.would_wait = &would_wait;
		h.wait_for = &wait_for;
		struct backend *nb = pool_pick(pool, now_ms, rnd, &h);
		if (nb) {
			q->qd.ops->pop(&q->qd);
		} else {
			if (wait_for >= 0)
				waiter_declined(pool, wt, wait_for, now_ms);
			struct qd_item *it = NULL;
			/* (only when a slot frees: a request joining the queue changes
			 * nothing for those already in it) */
			if (would_wait && pool->conf->balance->blocks && !self)
				it = grant_look_behind(pool, now_ms, rnd, head, &nb);
			else if (wt->has_model && pool->models.e)
				it = grant_other_model(pool, now_ms, rnd, head, &nb);
			if (!it)
				break;
			q->qd.ops->remove(&q->qd, it);
			wt = waiter_of(it);
		}
		waiter_wait_for(pool, wt, -1);
		queue_changed(q);
		pool_count(pool, PM_POOL_QUEUE_GRANTED, 1);
		/* (another worker's clock may be a millisecond behind the one that queued it) */
		pool_observe_us(pool, PM_POOL_QUEUE_WAIT,
				now_ms > wt->queued_ms ? (now_ms - wt->queued_ms) * 1000 : 0);
		rnd = rand_next(&rnd);
		if (wt == self) {
			wt->state = W_IDLE;
			mine = nb;
			continue;
		}
		wt->granted = nb;
		wt->state = W_GRANTED;
		inbox_push(wt->owner, wt);
	}
	return mine;
}

/* Could a request of <pool> get a slot later: is some backend that serves its model up but
 * at its cap? */
static int pool_has_capped_backend(const struct pool_rt *pool, const struct waiter *wt,
				   uint64_t now_ms)
{
	const uint64_t *serving = wt->has_model ? models_mask(&pool->models, wt->model) : NULL;
	for (size_t i = 0; i < pool->nbackends; i++) {
		const struct backend *b = &pool->backends[i];
		if (backend_cap(b) && (!serving || models_mask_has(serving, i)) &&
		    backend_usable(b, now_ms))
			return 1;
	}
	return 0;
}

enum admit_result admission_admit(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms,
				  uint64_t rnd, struct backend **out)
{
	struct pool_queue *q = &pool->queue;
	ASSERT(wt->state == W_IDLE);
	struct pick_hint h = hint_of(pool, wt, now_ms);
	int wait_for = -1;
	h.wait_for = &wait_for;
	if ((*out = pool_pick(pool, now_ms, rnd, &h)))
		return ADMIT_PICKED;
	if (!pool_has_capped_backend(pool, wt, now_ms))
		return ADMIT_NONE;
	pthread_mutex_lock(&q->lock);
	if (q->qd.len >= pool->conf->queue_max) {
		/* no room to wait (queue.max 0, say): a slot freed since the first look still
		 * serves it, if nobody waits before it */
		if (!q->qd.len && (*out = pool_pick(pool, now_ms, rnd, &h))) {
			pthread_mutex_unlock(&q->lock);
			return ADMIT_PICKED;
		}
		/* a discipline may give it the place of a request from a longer line: that
		 * one is told through its owner's inbox, with no slot (admission_withdrawn) */
		struct qd_item *out_it = q->qd.ops->push_out && q->qd.len
					     ? q->qd.ops->push_out(&q->qd, &wt->item)
					     : NULL;
		pool_count(pool, PM_POOL_QUEUE_OVERFLOWS, 1);
		if (!out_it) {
			pthread_mutex_unlock(&q->lock);
			return ADMIT_FULL;
		}
		pool_count(pool, PM_POOL_QUEUE_DISPLACED, 1);
		struct waiter *victim = waiter_of(out_it);
		waiter_wait_for(pool, victim, -1);
		victim->granted = NULL;
		victim->state = W_GRANTED;
		inbox_push(victim->owner, victim);
	}
	wt->queued_ms = now_ms;
	atomic_store_explicit(&wt->declined_ms, 0, memory_order_relaxed);
	if (q->qd.ops->push(&q->qd, &wt->item) < 0) {
		queue_changed(q); /* (a push_out above took one out) */
		pthread_mutex_unlock(&q->lock);
		pool_count(pool, PM_POOL_QUEUE_OVERFLOWS, 1);
		return ADMIT_FULL;
	}
	queue_changed(q);
	if (wait_for >= 0) /* its first look chose to wait for that one */
		waiter_declined(pool, wt, wait_for, now_ms);
	wt->state = W_QUEUED;
	pool_count(pool, PM_POOL_QUEUE_ENQUEUED, 1);
	/* a slot may have freed since the first look, or the longer queue may now make a
	 * slower backend worth it: grant in queue order, which may be this request */
	*out = grant_locked(pool, now_ms, rand_next(&rnd), wt);
	pthread_mutex_unlock(&q->lock);
	if (*out)
		return ADMIT_PICKED;
	pool_queue_wake(q); /* cluster: it asks for a slot now, not at the next tick */
	return ADMIT_QUEUED;
}

void admission_release(struct pool_rt *pool, struct backend *be, uint64_t now_ms, uint64_t rnd)
{
	atomic_fetch_sub_explicit(&be->share->inflight, 1, memory_order_relaxed);
	unsigned cap = backend_cap(be);
	if (cap) { /* an uncapped backend never made anyone wait here */
		admission_grant(pool, now_ms, rnd);
		/* cluster: other instances wait for its slots: the sync thread says now, not at
		 * its next tick, that this one let a slot go (control/cluster.c) */
		if (atomic_load_explicit(&be->others_waiting, memory_order_relaxed))
			pool_queue_wake(&pool->queue);
	}
	/* the other configurations holding it (a reload), whatever this one's cap: a request
	 * may wait for this slot in any of their queues */
	for (size_t i = 0; i < SHARE_POOLS; i++) {
		struct pool_rt *p =
		    atomic_load_explicit(&be->share->pools[i], memory_order_acquire);
		if (p && p != pool)
			admission_grant(p, now_ms, rnd);
	}
}

void admission_grant(struct pool_rt *pool, uint64_t now_ms, uint64_t rnd)
{
	struct pool_queue *q = &pool->queue;
	pthread_mutex_lock(&q->lock);
	grant_locked(pool, now_ms, rnd, NULL);
	pthread_mutex_unlock(&q->lock);
}

void admission_oldest(struct pool_rt *pool, uint64_t now_ms, uint32_t *ages)
{
	struct pool_queue *q = &pool->queue;
	uint64_t loose = 0;
	size_t left = pool->nbackends; /* backends with no waiter found yet */
	int by_age = q->qd.ops->by_age;
	for (size_t j = 0; j < pool->nbackends; j++)
		ages[j] = 0;
	pthread_mutex_lock(&q->lock);
	struct qd_item *it = q->qd.ops->peek(&q->qd);
	for (; it; it = q->qd.ops->next ? q->qd.ops->next(&q->qd, it) : NULL) {
		const struct waiter *wt = waiter_of(it);
		uint64_t age = now_ms > wt->queued_ms ? now_ms - wt->queued_ms : 0;
		age = age ? age : 1; /* (0 says none waits) */
		age = age > UINT32_MAX ? UINT32_MAX : age;
		if (!wt->home) {
			loose = age > loose ? age : loose;
			if (by_age) /* (those behind it are younger: it is every backend's oldest)
				     */
				break;
		} else if (age > ages[wt->home - pool->backends]) {
			left -= !ages[wt->home - pool->backends];
			ages[wt->home - pool->backends] = (uint32_t)age;
		}
		if (by_age && !left)
			break; /* (oldest first: each backend's first is its oldest) */
	}
	pthread_mutex_unlock(&q->lock);
	for (size_t j = 0; j < pool->nbackends; j++)
		ages[j] = loose > ages[j] ? (uint32_t)loose : ages[j];
}

static const unsigned withdraw_counter[] = {
    [WITHDRAW_GONE] = PM_POOL_QUEUE_WITHDRAWN,
    [WITHDRAW_TIMEOUT] = PM_POOL_QUEUE_TIMEOUTS,
    [WITHDRAW_SPILL] = PM_POOL_QUEUE_SPILLED,
};

void admission_withdraw(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms, uint64_t rnd,
			enum withdraw_why why)
{
	struct pool_queue *q = &pool->queue;
	pthread_mutex_lock(&q->lock);
	enum waiter_state st = wt->state;
	if (st == W_QUEUED) {
		q->qd.ops->remove(&q->qd, &wt->item);
		waiter_wait_for(pool, wt, -1);
		queue_changed(q);
		wt->state = W_IDLE;
	}
	pthread_mutex_unlock(&q->lock);
	if (st == W_QUEUED)
		pool_count(pool, withdraw_counter[why], 1);
	if (st != W_GRANTED)
		return;
	/* granted meanwhile: take it out of our inbox and give the slot back */
	struct admission_inbox *in = wt->owner;
	pthread_mutex_lock(&in->lock);
	if (list_linked(&wt->ilink))
		list_del(&in->granted, &wt->ilink);
	pthread_mutex_unlock(&in->lock);
	struct backend *be = wt->granted;
	wt->granted = NULL;
	wt->state = W_IDLE;
	if (be && be->llm && wt->work) { /* REVIEW fix: the grant's pick counted work there */
		llm_unpicked(be->llm, wt->blocks, wt->nblocks, wt->missed, /* ... and its prompt */
			     wt->ticks);
		llm_done(be->llm, wt->work);
		wt->work = 0;
	}
	if (be) /* NULL: pushed out of the queue, with no slot to give back */
		admission_release(pool, be, now_ms, rnd);
}
