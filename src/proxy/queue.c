/*
 * queue.c - pool admission queues and worker inboxes (see queue.h).
 *
 * Lock order: a pool's queue lock, then a worker's inbox lock; nothing else is held with
 * either. The slot accounting itself stays lock-free (pool_pick claims a slot with one
 * atomic add); the queue lock only orders "slot freed" against "request starts waiting":
 * pool_release() gives the slot back before taking the lock, and pool_admit() tries once
 * more under the lock before queueing, so a request never waits beside a free slot.
 */
#include "proxy/proxy-t.h"
#include "core/check.h"
#include "core/rand.h"

static void inbox_push(struct worker_inbox *in, struct waiter *wt)
{
	pthread_mutex_lock(&in->lock);
	wt->next = NULL;
	if (in->tail)
		in->tail->next = wt;
	else
		in->head = wt;
	in->tail = wt;
	pthread_mutex_unlock(&in->lock);
}

void worker_inbox_init(struct worker_inbox *in)
{
	pthread_mutex_init(&in->lock, NULL);
	in->head = in->tail = NULL;
}

void worker_inbox_destroy(struct worker_inbox *in)
{
	pthread_mutex_destroy(&in->lock);
}

struct waiter *worker_inbox_take(struct worker_inbox *in)
{
	pthread_mutex_lock(&in->lock);
	struct waiter *list = in->head;
	in->head = in->tail = NULL;
	pthread_mutex_unlock(&in->lock);
	return list;
}

void pool_queue_init(struct pool_queue *q)
{
	pthread_mutex_init(&q->lock, NULL);
	q->head = q->tail = NULL;
	q->len = 0;
}

void pool_queue_destroy(struct pool_queue *q)
{
	pthread_mutex_destroy(&q->lock);
}

unsigned pool_queue_len(struct pool_queue *q)
{
	pthread_mutex_lock(&q->lock);
	unsigned n = q->len;
	pthread_mutex_unlock(&q->lock);
	return n;
}

static void queue_unlink(struct pool_queue *q, struct waiter *wt)
{
	if (wt->prev)
		wt->prev->next = wt->next;
	else
		q->head = wt->next;
	if (wt->next)
		wt->next->prev = wt->prev;
	else
		q->tail = wt->prev;
	wt->prev = wt->next = NULL;
	q->len--;
}

/* Could a request of <pool> get a slot later: is some backend up but at its cap? */
static int pool_has_capped_backend(const struct pool_rt *pool, uint64_t now_ms)
{
	for (size_t i = 0; i < pool->nbackends; i++) {
		const struct backend *b = &pool->backends[i];
		if (b->conf->max_concurrency && atomic_load_explicit(&b->up, memory_order_relaxed) &&
		    now_ms >= atomic_load_explicit(&b->down_until_ms, memory_order_relaxed))
			return 1;
	}
	return 0;
}

enum queue_result pool_admit(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms,
			     uint64_t rnd, struct backend **out)
{
	struct pool_queue *q = &pool->queue;
	ASSERT(wt->state == W_IDLE);
	if ((*out = pool_pick(pool, now_ms, rnd, NULL)))
		return Q_PICKED;
	if (!pool_has_capped_backend(pool, now_ms))
		return Q_NONE;
	pthread_mutex_lock(&q->lock);
	if (!q->head && (*out = pool_pick(pool, now_ms, rnd, NULL))) {
		pthread_mutex_unlock(&q->lock);
		return Q_PICKED;
	}
	if (q->len >= pool->conf->queue_max) {
		pthread_mutex_unlock(&q->lock);
		atomic_fetch_add_explicit(&q->overflows, 1, memory_order_relaxed);
		return Q_FULL;
	}
	wt->prev = q->tail;
	wt->next = NULL;
	if (q->tail)
		q->tail->next = wt;
	else
		q->head = wt;
	q->tail = wt;
	q->len++;
	wt->state = W_QUEUED;
	wt->queued_ms = now_ms;
	pthread_mutex_unlock(&q->lock);
	atomic_fetch_add_explicit(&q->enqueued, 1, memory_order_relaxed);
	return Q_QUEUED;
}

void pool_release(struct pool_rt *pool, struct backend *be, uint64_t now_ms, uint64_t rnd)
{
	atomic_fetch_sub_explicit(&be->inflight, 1, memory_order_relaxed);
	if (be->conf->max_concurrency)
		pool_grant(pool, now_ms, rnd); /* an uncapped backend never made anyone wait */
}

void pool_grant(struct pool_rt *pool, uint64_t now_ms, uint64_t rnd)
{
	struct pool_queue *q = &pool->queue;
	pthread_mutex_lock(&q->lock);
	while (q->head) {
		struct backend *nb = pool_pick(pool, now_ms, rnd, NULL);
		if (!nb)
			break;
		struct waiter *wt = q->head;
		queue_unlink(q, wt);
		wt->granted = nb;
		wt->state = W_GRANTED;
		inbox_push(&wt->owner->inbox, wt);
		loop_wake(wt->owner->loop);
		atomic_fetch_add_explicit(&q->granted, 1, memory_order_relaxed);
		rnd = rand_next(&rnd);
	}
	pthread_mutex_unlock(&q->lock);
}

void pool_withdraw(struct pool_rt *pool, struct waiter *wt, uint64_t now_ms, uint64_t rnd)
{
	struct pool_queue *q = &pool->queue;
	pthread_mutex_lock(&q->lock);
	enum waiter_state st = wt->state;
	if (st == W_QUEUED) {
		queue_unlink(q, wt);
		wt->state = W_IDLE;
	}
	pthread_mutex_unlock(&q->lock);
	if (st != W_GRANTED)
		return;
	/* granted meanwhile: take it out of our inbox and give the slot back */
	struct worker_inbox *in = &wt->owner->inbox;
	pthread_mutex_lock(&in->lock);
	struct waiter **pp = &in->head, *prev = NULL;
	while (*pp && *pp != wt) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (*pp) {
		*pp = wt->next;
		if (in->tail == wt)
			in->tail = prev;
	}
	pthread_mutex_unlock(&in->lock);
	struct backend *be = wt->granted;
	wt->granted = NULL;
	wt->state = W_IDLE;
	wt->next = NULL;
	pool_release(pool, be, now_ms, rnd);
}
