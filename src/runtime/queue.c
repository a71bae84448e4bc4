/*
 * queue.c - a pool's queue of requests waiting for a backend slot: its lock and its queue
 * discipline (see queue.h). Admission (admission.c) decides who enters and leaves it.
 */
#include "runtime/queue.h"
#include "conf/model.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

int pool_queue_init(struct pool_queue *q, const struct conf_pool *pc)
{
	pthread_mutex_init(&q->lock, NULL);
	atomic_init(&q->len, 0);
	atomic_init(&q->wake_fd, -1);
	q->qd.ops = pc->queue_discipline;
	return q->qd.ops->init(&q->qd);
}

void pool_queue_destroy(struct pool_queue *q)
{
	q->qd.ops->fini(&q->qd);
	pthread_mutex_destroy(&q->lock);
	int fd = atomic_load_explicit(&q->wake_fd, memory_order_relaxed);
	if (fd >= 0)
		close(fd);
}

int pool_queue_watch(struct pool_queue *q)
{
	int fd = atomic_load_explicit(&q->wake_fd, memory_order_acquire);
	if (fd >= 0)
		return fd;
	fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	atomic_store_explicit(&q->wake_fd, fd, memory_order_release);
	return fd;
}

void pool_queue_wake(struct pool_queue *q)
{
	int fd = atomic_load_explicit(&q->wake_fd, memory_order_acquire);
	uint64_t one = 1;
	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is full of wakes not yet read, which is one wake */
	}
}

unsigned pool_queue_len(const struct pool_queue *q)
{
	return atomic_load_explicit(&q->len, memory_order_relaxed);
}
