/*
 * queue.c - a pool's queue of requests waiting for a backend slot: its lock and its queue
 * discipline (see queue.h). Admission (admission.c) decides who enters and leaves it.
 */
#include "runtime/queue.h"
#include "conf/model.h"

#include <errno.h>

int pool_queue_init(struct pool_queue *q, const struct conf_pool *pc)
{
	pthread_mutex_init(&q->lock, NULL);
	atomic_init(&q->len, 0);
	q->qd.ops = pc->queue_discipline;
	return q->qd.ops->init(&q->qd);
}

void pool_queue_destroy(struct pool_queue *q)
{
	q->qd.ops->fini(&q->qd);
	pthread_mutex_destroy(&q->lock);
}

unsigned pool_queue_len(const struct pool_queue *q)
{
	return atomic_load_explicit(&q->len, memory_order_relaxed);
}
