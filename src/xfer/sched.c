/*
 * sched.c - the chunk scheduler (see sched.h): a ring of pending chunk ids under one mutex.
 */
#include "xfer/sched.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int xfer_sched_init(struct xfer_sched *s, uint32_t n)
{
	memset(s, 0, sizeof(*s));
	s->slots = calloc(n ? n : 1, sizeof(*s->slots));
	s->ring = calloc((size_t)n + 1, sizeof(*s->ring));
	if (!s->slots || !s->ring) {
		free(s->slots);
		free(s->ring);
		return -ENOMEM;
	}
	s->n = n;
	s->absent = n;
	s->endgame = 1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	return 0;
}

void xfer_sched_destroy(struct xfer_sched *s)
{
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s->slots);
	free(s->ring);
	memset(s, 0, sizeof(*s));
}

static void push_back(struct xfer_sched *s, uint32_t id)
{
	s->ring[s->tail] = id;
	s->tail = (s->tail + 1) % (s->n + 1);
}

static void push_front(struct xfer_sched *s, uint32_t id)
{
	s->head = (s->head + s->n) % (s->n + 1);
	s->ring[s->head] = id;
}

static void requeue(struct xfer_sched *s, uint32_t id)
{
	s->slots[id].state = XS_PENDING;
	s->resends++;
	push_front(s, id);
	pthread_cond_broadcast(&s->cv);
}

void xfer_sched_add(struct xfer_sched *s, uint32_t id, int have)
{
	pthread_mutex_lock(&s->mu);
	struct xfer_slot *c = id < s->n ? &s->slots[id] : NULL;
	if (c && c->state == XS_ABSENT) {
		s->absent--;
		if (have) {
			c->state = XS_DONE;
			s->done++;
		} else {
			c->state = XS_PENDING;
			push_back(s, id);
		}
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
}

/* The end game: the oldest chunk in flight with a single copy on another link. */
static int pick_dup(struct xfer_sched *s, uint8_t link, uint32_t *id)
{
	uint64_t oldest = UINT64_MAX;
	int found = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		const struct xfer_slot *c = &s->slots[i];
		if (c->state == XS_INFLIGHT && c->copies == 1 && c->link != link &&
		    c->sent_ns < oldest) {
			oldest = c->sent_ns;
			*id = i;
			found = 1;
		}
	}
	return found;
}

int xfer_sched_take(struct xfer_sched *s, uint8_t link, uint64_t now_ns, uint32_t *id, int *dup)
{
	int rc = -EAGAIN;
	pthread_mutex_lock(&s->mu);
	*dup = 0;
	if (s->done == s->n) {
		rc = -ENODATA;
	} else if (s->error) {
		rc = s->error;
	} else if (s->head != s->tail) {
		*id = s->ring[s->head];
		s->head = (s->head + 1) % (s->n + 1);
		struct xfer_slot *c = &s->slots[*id];
		c->state = XS_INFLIGHT;
		c->copies = 1;
		c->link = link;
		c->sent_ns = now_ns;
		rc = 0;
	} else if (s->endgame && s->absent == 0 && pick_dup(s, link, id)) {
		s->slots[*id].copies++;
		s->dups++;
		*dup = 1;
		rc = 0;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int xfer_sched_ack(struct xfer_sched *s, uint32_t id)
{
	int first = 0;
	pthread_mutex_lock(&s->mu);
	struct xfer_slot *c = &s->slots[id];
	if (c->copies)
		c->copies--;
	if (c->state != XS_DONE) {
		if (c->state == XS_PENDING) {
			/* acknowledged while requeued (a late ack after its stream was given up):
			 * it stays in the ring and take() skips nothing, so mark it and let the
			 * ring hold a stale id that take() drops */
			for (uint32_t k = s->head; k != s->tail; k = (k + 1) % (s->n + 1))
				if (s->ring[k] == id) {
					s->ring[k] = s->ring[s->head];
					s->head = (s->head + 1) % (s->n + 1);
					break;
				}
		}
		c->state = XS_DONE;
		s->done++;
		first = 1;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return first;
}

void xfer_sched_lost(struct xfer_sched *s, uint32_t id)
{
	pthread_mutex_lock(&s->mu);
	struct xfer_slot *c = &s->slots[id];
	if (c->copies)
		c->copies--;
	if (c->state == XS_INFLIGHT && c->copies == 0)
		requeue(s, id);
	pthread_mutex_unlock(&s->mu);
}

int xfer_sched_bad(struct xfer_sched *s, uint32_t id)
{
	int fatal = 0;
	pthread_mutex_lock(&s->mu);
	struct xfer_slot *c = &s->slots[id];
	if (c->copies)
		c->copies--;
	if (c->state == XS_INFLIGHT) {
		if (++c->tries >= XFER_SCHED_TRIES) {
			fatal = 1;
			if (!s->error)
				s->error = -EIO;
			pthread_cond_broadcast(&s->cv);
		} else if (c->copies == 0) {
			requeue(s, id);
		}
	}
	pthread_mutex_unlock(&s->mu);
	return fatal;
}

void xfer_sched_abort(struct xfer_sched *s, int err)
{
	pthread_mutex_lock(&s->mu);
	if (!s->error)
		s->error = err;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void xfer_sched_wake(struct xfer_sched *s)
{
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void xfer_sched_wait(struct xfer_sched *s, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&s->mu);
	pthread_cond_timedwait(&s->cv, &s->mu, &ts);
	pthread_mutex_unlock(&s->mu);
}

uint32_t xfer_sched_done(struct xfer_sched *s)
{
	pthread_mutex_lock(&s->mu);
	uint32_t d = s->done;
	pthread_mutex_unlock(&s->mu);
	return d;
}
