/*
 * sched.c - the chunk scheduler (see sched.h): a ring of pending chunk ids under one mutex,
 * and per link the bytes in flight and a measured rate, from which the end is planned.
 */
#include "xfer/sched.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RATE_SAMPLE_NS 200000000ULL  /* a link's rate is sampled over at least this long */
#define RATE_WINDOW_NS 2000000000ULL /* and then averaged over the last 2-4 s */
#define LINK_ALIVE_NS 1000000000ULL  /* a link idle this long counts as gone */
#define DUP_CANDIDATES 1024	     /* chunks in flight weighed for an end-game copy */

int xfer_sched_init(struct xfer_sched *s, uint32_t n)
{
	memset(s, 0, sizeof(*s));
	s->slots = calloc(n ? n : 1, sizeof(*s->slots));
	s->ring = calloc((size_t)n + 1, sizeof(*s->ring));
	s->cap = n + 1;
	s->ncand = n < DUP_CANDIDATES ? (n ? n : 1) : DUP_CANDIDATES;
	s->cand = calloc(s->ncand, sizeof(*s->cand));
	if (!s->slots || !s->ring || !s->cand) {
		free(s->slots);
		free(s->ring);
		free(s->cand);
		return -ENOMEM;
	}
	s->n = n;
	s->absent = n;
	s->endgame = 1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	return 0;
}

void xfer_sched_open(struct xfer_sched *s)
{
	pthread_mutex_lock(&s->mu);
	s->open = 1;
	pthread_mutex_unlock(&s->mu);
}

int xfer_sched_grow(struct xfer_sched *s, uint32_t n, const uint32_t *lens)
{
	pthread_mutex_lock(&s->mu);
	int rc = 0;
	if (n > s->n && n >= s->cap) {
		/* room for twice as many: a streamed manifest grows part by part */
		uint64_t want = (uint64_t)n * 2 + 1;
		uint32_t cap =
		    want > (uint64_t)XFER_SCHED_MAX + 1 ? XFER_SCHED_MAX + 1 : (uint32_t)want;
		struct xfer_slot *slots = realloc(s->slots, (size_t)cap * sizeof(*slots));
		uint32_t *ring = malloc((size_t)cap * sizeof(*ring));
		struct xfer_sched_candidate *cand =
		    s->ncand < DUP_CANDIDATES ? calloc(DUP_CANDIDATES, sizeof(*cand)) : NULL;
		if (slots)
			s->slots = slots;
		if (!slots || !ring || (s->ncand < DUP_CANDIDATES && !cand)) {
			free(ring);
			free(cand);
			rc = -ENOMEM;
		} else {
			uint32_t k = 0; /* the queue, unwrapped into the larger ring */
			for (uint32_t i = s->head; i != s->tail; i = (i + 1) % s->cap)
				ring[k++] = s->ring[i];
			free(s->ring);
			s->ring = ring;
			s->head = 0;
			s->tail = k;
			s->cap = cap;
			if (cand) {
				free(s->cand);
				s->cand = cand;
				s->ncand = DUP_CANDIDATES;
			}
		}
	}
	if (!rc && n > s->n) {
		memset(s->slots + s->n, 0, (size_t)(n - s->n) * sizeof(*s->slots));
		for (uint32_t id = s->n; id < n; id++) { /* absent, and sized */
			s->slots[id].len = lens[id - s->n];
			s->waiting += lens[id - s->n];
		}
		s->absent += n - s->n;
		s->n = n;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void xfer_sched_close(struct xfer_sched *s)
{
	pthread_mutex_lock(&s->mu);
	s->open = 0;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

int xfer_sched_over(struct xfer_sched *s)
{
	pthread_mutex_lock(&s->mu);
	int over = s->done == s->n && !s->open;
	pthread_mutex_unlock(&s->mu);
	return over;
}

void xfer_sched_destroy(struct xfer_sched *s)
{
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s->slots);
	free(s->ring);
	free(s->cand);
	memset(s, 0, sizeof(*s));
}

static void push_back(struct xfer_sched *s, uint32_t id)
{
	s->ring[s->tail] = id;
	s->tail = (s->tail + 1) % s->cap;
}

static void push_front(struct xfer_sched *s, uint32_t id)
{
	s->head = (s->head + s->cap - 1) % s->cap;
	s->ring[s->head] = id;
}

static uint8_t link_index(uint8_t link)
{
	return link < XFER_SCHED_LINKS ? link : XFER_SCHED_LINKS - 1;
}

/* A copy of chunk <id> left on <link>. */
static void copy_out(struct xfer_sched *s, uint32_t id, uint8_t link, uint64_t now)
{
	struct xfer_sched_link *l = &s->links[link_index(link)];
	if (!l->inflight) { /* busy again: a new rate sample starts */
		l->mark_ns = l->mid_ns = now;
		l->mark_acked = l->mid_acked = l->acked;
	}
	l->inflight += s->slots[id].len;
	l->seen_ns = now;
}

/* A copy of chunk <id> on <link> is over: acknowledged (<now> then), lost or corrupt. */
static void copy_back(struct xfer_sched *s, uint32_t id, uint8_t link, int acked, uint64_t now)
{
	struct xfer_sched_link *l = &s->links[link_index(link)];
	uint32_t len = s->slots[id].len;
	l->inflight -= len < l->inflight ? len : l->inflight;
	if (!acked)
		return;
	l->acked += len;
	l->seen_ns = l->acked_ns = now;
	/* <now> was read before the lock: another stream may have marked a later time */
	if (now > l->mark_ns && now - l->mark_ns >= RATE_SAMPLE_NS) {
		double r = (double)(l->acked - l->mark_acked) / (double)(now - l->mark_ns);
		int first = l->rate <= 0;
		l->rate = r;
		if (first) { /* the first sample holds the ramp up: the average starts after it */
			l->mark_ns = l->mid_ns = now;
			l->mark_acked = l->mid_acked = l->acked;
		} else if (now - l->mid_ns >=
			   RATE_WINDOW_NS) { /* slide: keep the last 1-2 windows */
			l->mark_ns = l->mid_ns;
			l->mark_acked = l->mid_acked;
			l->mid_ns = now;
			l->mid_acked = l->acked;
		}
	}
}

/* The bytes <l> carried, at its rate, of what it holds: since its last acknowledgement, or
 * since it went busy (the chunks it is on are partly across). */
static double link_across(const struct xfer_sched_link *l, uint64_t now)
{
	uint64_t since = l->acked_ns > l->mark_ns ? l->acked_ns : l->mark_ns;
	return l->inflight && l->rate > 0 && now > since ? l->rate * (double)(now - since) : 0;
}

/* The time <l> needs to carry what it holds and <more> bytes, in ns. */
static double link_drain(const struct xfer_sched_link *l, uint64_t more, uint64_t now)
{
	double left = (double)l->inflight - link_across(l, now);
	return ((left > 0 ? left : 0) + (double)more) / l->rate;
}

static int link_alive(const struct xfer_sched *s, unsigned i, uint64_t now)
{
	const struct xfer_sched_link *l = &s->links[i];
	return l->inflight ||
	       (l->seen_ns && (now <= l->seen_ns || now - l->seen_ns < LINK_ALIVE_NS));
}

/*
 * Earliest completion first: may <link> take a chunk of <len> bytes? Not when another live
 * link would finish it sooner: when the others, at their measured rates, would finish what
 * they hold plus everything not yet taken (split among them), and the best of them would
 * finish what it holds plus this chunk, both before this link finishes what it holds plus
 * this chunk. The link that would finish it first always may (no chunk waits for nobody). A
 * link not measured yet takes, and is not counted on by the others.
 */
static int worth_taking(const struct xfer_sched *s, uint8_t link, uint32_t len, uint64_t now)
{
	const struct xfer_sched_link *me = &s->links[link_index(link)];
	if (me->rate <= 0)
		return 1;
	double mine = link_drain(me, len, now);
	double others = 0, held = 0, best = INFINITY;
	for (unsigned i = 0; i < XFER_SCHED_LINKS; i++) {
		const struct xfer_sched_link *l = &s->links[i];
		if (i == link_index(link) || l->rate <= 0 || !link_alive(s, i, now))
			continue;
		others += l->rate;
		held += link_drain(l, 0, now) * l->rate;
		double t = link_drain(l, len, now);
		best = t < best ? t : best;
	}
	if (others <= 0)
		return 1;
	double pooled = (held + (double)s->waiting) / others;
	return mine <= (pooled > best ? pooled : best);
}

static void requeue(struct xfer_sched *s, uint32_t id)
{
	s->slots[id].state = XS_PENDING;
	s->waiting += s->slots[id].len;
	s->resends++;
	push_front(s, id);
	pthread_cond_broadcast(&s->cv);
}

void xfer_sched_size(struct xfer_sched *s, uint32_t id, uint32_t len)
{
	pthread_mutex_lock(&s->mu);
	if (id < s->n && s->slots[id].state == XS_ABSENT) {
		s->waiting -= s->slots[id].len < s->waiting ? s->slots[id].len : s->waiting;
		s->slots[id].len = len;
		s->waiting += len;
	}
	pthread_mutex_unlock(&s->mu);
}

static void add_locked(struct xfer_sched *s, uint32_t id, int have)
{
	struct xfer_slot *c = id < s->n ? &s->slots[id] : NULL;
	if (c && c->state == XS_ABSENT) {
		s->absent--;
		if (have) {
			c->state = XS_DONE;
			s->done++;
			s->waiting -= c->len < s->waiting ? c->len : s->waiting;
		} else {
			c->state = XS_PENDING;
			push_back(s, id);
		}
		pthread_cond_broadcast(&s->cv);
	}
}

void xfer_sched_add(struct xfer_sched *s, uint32_t id, int have)
{
	pthread_mutex_lock(&s->mu);
	add_locked(s, id, have);
	pthread_mutex_unlock(&s->mu);
}

void xfer_sched_add_run(struct xfer_sched *s, uint32_t first, uint32_t n, const uint8_t *have)
{
	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < n; i++)
		add_locked(s, first + i, have[i]);
	pthread_mutex_unlock(&s->mu);
}

static int by_sent(const void *a, const void *b)
{
	const struct xfer_sched_candidate *x = a, *y = b;
	return x->sent_ns < y->sent_ns ? -1 : x->sent_ns > y->sent_ns;
}

/*
 * The end game: of the chunks in flight with a single copy on another link, the one expected
 * to finish last (a link drains its chunks in the order it took them, at its measured rate),
 * if <link> would finish a copy of it sooner. A chunk on a link not measured yet is expected
 * never; with more chunks in flight than are weighed, the oldest one is copied.
 */
static int pick_dup(struct xfer_sched *s, uint8_t link, uint64_t now, uint32_t *id)
{
	struct xfer_sched_candidate *c = s->cand;
	unsigned k = 0, over = 0;
	uint64_t oldest = UINT64_MAX;
	int found = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		const struct xfer_slot *x = &s->slots[i];
		if (x->state != XS_INFLIGHT)
			continue;
		if (x->copies == 1 && x->link != link && x->sent_ns < oldest) {
			oldest = x->sent_ns;
			*id = i;
			found = 1;
		}
		if (k < s->ncand)
			c[k++] = (struct xfer_sched_candidate){.sent_ns = x->sent_ns, .id = i};
		else
			over = 1;
	}
	if (!found || over)
		return found;
	qsort(c, k, sizeof(c[0]), by_sent);
	const struct xfer_sched_link *me = &s->links[link_index(link)];
	/* while this link has more than a chunk's time of its own work left, both ends of the
	 * comparison are estimates far ahead: their error is larger than a chunk's time */
	if (me->rate > 0 && link_drain(me, 0, now) * me->rate > (double)s->slots[*id].len)
		return 0;
	double ahead[XFER_SCHED_LINKS] = {0}, latest = -1;
	found = 0;
	for (unsigned j = 0; j < k; j++) {
		const struct xfer_slot *x = &s->slots[c[j].id];
		unsigned m = link_index(x->link);
		ahead[m] += x->len;
		if (x->copies != 1 || x->link == link)
			continue;
		const struct xfer_sched_link *on = &s->links[m];
		double left = ahead[m] - link_across(on, now);
		double when = on->rate > 0 ? (left > 0 ? left : 0) / on->rate : INFINITY;
		/* a copy wastes a chunk whichever wins: it must gain at least twice its own time */
		double mine =
		    me->rate > 0 ? link_drain(me, x->len, now) + 2 * x->len / me->rate : 0;
		if (mine < when && when > latest) {
			latest = when;
			*id = c[j].id;
			found = 1;
		}
	}
	return found;
}

/* The chunk at the head of the queue goes out on <link> (under mu). */
static void take_head(struct xfer_sched *s, uint8_t link, uint64_t now_ns)
{
	uint32_t next = s->ring[s->head];
	struct xfer_slot *c = &s->slots[next];
	s->head = (s->head + 1) % s->cap;
	s->waiting -= c->len < s->waiting ? c->len : s->waiting;
	c->state = XS_INFLIGHT;
	c->copies = 1;
	c->link = link;
	c->sent_ns = now_ns;
	copy_out(s, next, link, now_ns);
}

int xfer_sched_take_next(struct xfer_sched *s, uint8_t link, uint64_t now_ns, uint32_t id)
{
	int rc = -EAGAIN;
	pthread_mutex_lock(&s->mu);
	if (!s->error && s->head != s->tail && s->ring[s->head] == id &&
	    s->slots[id].state == XS_PENDING && worth_taking(s, link, s->slots[id].len, now_ns)) {
		take_head(s, link, now_ns);
		rc = 0;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int xfer_sched_take(struct xfer_sched *s, uint8_t link, uint64_t now_ns, uint32_t *id, int *dup)
{
	int rc = -EAGAIN;
	pthread_mutex_lock(&s->mu);
	*dup = 0;
	if (s->done == s->n && !s->open) {
		rc = -ENODATA;
	} else if (s->error) {
		rc = s->error;
	} else if (s->head != s->tail) {
		s->links[link_index(link)].seen_ns = now_ns;
		uint32_t next = s->ring[s->head];
		if (worth_taking(s, link, s->slots[next].len, now_ns)) {
			*id = next;
			take_head(s, link, now_ns);
			rc = 0;
		}
	} else if (s->endgame && !s->open && s->absent == 0 && pick_dup(s, link, now_ns, id)) {
		s->slots[*id].copies++;
		s->dups++;
		copy_out(s, *id, link, now_ns);
		*dup = 1;
		rc = 0;
	} else {
		s->links[link_index(link)].seen_ns = now_ns;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int xfer_sched_ack(struct xfer_sched *s, uint32_t id, uint8_t link, uint64_t now_ns)
{
	int first = 0;
	pthread_mutex_lock(&s->mu);
	struct xfer_slot *c = &s->slots[id];
	if (c->copies) {
		c->copies--;
		copy_back(s, id, link, 1, now_ns);
	}
	if (c->state != XS_DONE) {
		if (c->state == XS_PENDING) {
			/* acknowledged while requeued (a late ack after its stream was given up):
			 * it stays in the ring and take() skips nothing, so mark it and let the
			 * ring hold a stale id that take() drops */
			for (uint32_t k = s->head; k != s->tail; k = (k + 1) % s->cap)
				if (s->ring[k] == id) {
					s->ring[k] = s->ring[s->head];
					s->head = (s->head + 1) % s->cap;
					s->waiting -= c->len < s->waiting ? c->len : s->waiting;
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

void xfer_sched_lost(struct xfer_sched *s, uint32_t id, uint8_t link)
{
	pthread_mutex_lock(&s->mu);
	struct xfer_slot *c = &s->slots[id];
	if (c->copies) {
		c->copies--;
		copy_back(s, id, link, 0, 0);
	}
	if (c->state == XS_INFLIGHT && c->copies == 0)
		requeue(s, id);
	pthread_mutex_unlock(&s->mu);
}

int xfer_sched_bad(struct xfer_sched *s, uint32_t id, uint8_t link)
{
	int fatal = 0;
	pthread_mutex_lock(&s->mu);
	struct xfer_slot *c = &s->slots[id];
	if (c->copies) {
		c->copies--;
		copy_back(s, id, link, 0, 0);
	}
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
	/* the last acknowledgement may have been broadcast before this waiter came: the end
	 * is a state, not only an event, so it is never slept through */
	if ((s->done != s->n || s->open) && !s->error)
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
