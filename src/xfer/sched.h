/*
 * sched.h - the chunk scheduler: which chunk a stream sends next.
 *
 * Chunks wait in one queue; a stream takes the next one when it has room in its window (work
 * stealing), so a link that drains faster simply takes more, and a link that slows down takes
 * less without anyone computing a split.
 *
 * The end of a transfer is planned from what each link delivers: the scheduler keeps, per
 * link, the bytes it has in flight and its rate (acknowledged bytes over time, measured while
 * it has work, after a first sample that holds the ramp up, over the last 2-4 s: chunks are
 * acknowledged in bursts, and shorter samples erred by a third on a slow link). A link takes the
 * next chunk only if it would finish everything it holds plus that chunk no later than the other
 * live links would finish theirs plus the whole queue, or, when that is sooner, than the best of
 * them would finish its own plus this chunk (earliest completion first; the link that would finish
 * a chunk first always may take it, so no chunk waits for nobody): near the end the slow links stop
 * taking, so every link finishes at about the same time instead of the fastest waiting for the
 * slowest. When the queue is empty and chunks are still in flight (the end game), a stream whose
 * link has less than a chunk's time of its own work left takes a second copy of a chunk in flight
 * on another link only when it would finish that copy at least twice a chunk's time (on its link)
 * before the other link is expected to finish the original (the chunk expected last first): a
 * copy wastes a chunk whichever wins, so it must gain more than the error of the estimates (with
 * one chunk's time, copies still lost to their originals on a loaded host). The first
 * acknowledgement wins, and a link with no rate measured yet is trusted to be fast. A chunk whose
 * stream died goes back to the front of the queue; a chunk the receiver found corrupt is sent
 * again, at most XFER_SCHED_TRIES times.
 *
 * Chunks are numbered 0..n-1 by the caller; while a sender still lists its files (a streamed
 * manifest) the scheduler is open: xfer_sched_grow() adds chunks, and it is not done when every
 * chunk it has is, until xfer_sched_close(). A chunk starts absent (a relay's chunk that has
 * not arrived yet), pending, or done (the receiver already has it). Thread-safe: one mutex,
 * and a condition variable that xfer_sched_wait() sleeps on.
 */
#ifndef ACCELNET_XFER_SCHED_H
#define ACCELNET_XFER_SCHED_H

#include <pthread.h>
#include <stdint.h>

#define XFER_SCHED_TRIES 5
#define XFER_SCHED_NOLINK 0xff
#define XFER_SCHED_LINKS 16 /* XFER_LINKS_MAX */

enum xfer_chunk_state { XS_ABSENT, XS_PENDING, XS_INFLIGHT, XS_DONE };

struct xfer_slot {
	uint8_t state;
	uint8_t copies; /* streams carrying it now */
	uint8_t link;	/* the link of the first copy */
	uint8_t tries;	/* corrupt arrivals so far */
	uint32_t len;	/* bytes; 0 until xfer_sched_size() */
	uint64_t sent_ns;
};

/* What the scheduler knows of one link. */
struct xfer_sched_link {
	uint64_t inflight;	      /* bytes of the copies it carries now */
	uint64_t acked;		      /* bytes acknowledged on it */
	uint64_t mark_acked, mark_ns; /* the start of the current rate sample */
	uint64_t mid_acked, mid_ns;   /* where the next sample will start */
	uint64_t seen_ns;	      /* its streams last asked for work or were acknowledged */
	uint64_t acked_ns;	      /* its last acknowledgement */
	double rate;		      /* bytes per ns, smoothed; 0 until measured */
};

struct xfer_sched_candidate { /* a chunk in flight weighed for an end-game copy */
	uint64_t sent_ns;
	uint32_t id;
};

struct xfer_sched {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t n;
	struct xfer_slot *slots;
	uint32_t *ring; /* pending chunk ids; capacity cap (> n) */
	uint32_t cap;	/* slots and ring entries allocated */
	uint32_t head, tail;
	uint64_t waiting; /* bytes of the chunks absent or pending: not yet taken */
	uint32_t done, absent;
	uint32_t dups;	  /* end-game copies sent */
	uint32_t resends; /* chunks sent again after a failure or a bad hash */
	struct xfer_sched_link links[XFER_SCHED_LINKS];
	struct xfer_sched_candidate *cand; /* room for the end game's weighing */
	unsigned ncand;
	int endgame; /* 0 turns end-game copies off */
	int open;    /* more chunks may come (xfer_sched_grow): done is not the end */
	int error;   /* first fatal error, -errno; takers see it */
};

/* All chunks start absent. 0 or -ENOMEM. */
int xfer_sched_init(struct xfer_sched *s, uint32_t n);
/* An open scheduler: chunks <n> onwards come later (xfer_sched_grow), until xfer_sched_close.
 * Grow to <n> chunks, the new ones absent and of <lens> bytes (lens[0] for the first new one):
 * 0 or -ENOMEM (nothing changed). Room grows twice what is asked, so parts cost no copy each. */
#define XFER_SCHED_MAX (1u << 31) /* chunks, at most (XFER_CHUNKS_MAX) */
void xfer_sched_open(struct xfer_sched *s);
int xfer_sched_grow(struct xfer_sched *s, uint32_t n, const uint32_t *lens);
void xfer_sched_close(struct xfer_sched *s);
/* Every chunk acknowledged, and no more to come. */
int xfer_sched_over(struct xfer_sched *s);
void xfer_sched_destroy(struct xfer_sched *s);

/* Chunk <id> is <len> bytes (before it is added; a chunk never sized counts as 0). */
void xfer_sched_size(struct xfer_sched *s, uint32_t id, uint32_t len);
/* Make chunk <id> pending (at the back), or done when <have> (the receiver has it). */
void xfer_sched_add(struct xfer_sched *s, uint32_t id, int have);
/* Chunks [first, first + n) at once, <have>[i] for chunk first + i: a stream never takes the
 * first of them alone (a batch of small files takes those behind it in the queue). */
void xfer_sched_add_run(struct xfer_sched *s, uint32_t first, uint32_t n, const uint8_t *have);

/*
 * Take a chunk for a stream on <link>: 0 with *id (and *dup = 1 for an end-game copy),
 * -EAGAIN when nothing can be taken now (wait and retry), -ENODATA when every chunk is done
 * (even after an abort), or the error set by xfer_sched_abort().
 */
int xfer_sched_take(struct xfer_sched *s, uint8_t link, uint64_t now_ns, uint32_t *id, int *dup);
/* A stream filling a batch of small files takes <id> too, but only when it is next in the
 * queue and the link would take it now (as xfer_sched_take would): 0, or -EAGAIN. */
int xfer_sched_take_next(struct xfer_sched *s, uint8_t link, uint64_t now_ns, uint32_t id);
/* The receiver verified the copy of chunk <id> sent on <link>. Returns 1 when this was the
 * first acknowledgement. */
int xfer_sched_ack(struct xfer_sched *s, uint32_t id, uint8_t link, uint64_t now_ns);
/* The copy of <id> on <link> was lost with its stream: requeue it unless another copy is
 * still out. */
void xfer_sched_lost(struct xfer_sched *s, uint32_t id, uint8_t link);
/* The receiver found the copy of <id> on <link> corrupt: send again, or fail the transfer
 * after too many tries (then returns 1). */
int xfer_sched_bad(struct xfer_sched *s, uint32_t id, uint8_t link);
/* Stop the transfer with <err> (-errno); every waiter wakes and sees it. */
void xfer_sched_abort(struct xfer_sched *s, int err);
/* Wake every waiter (a stream ended). */
void xfer_sched_wake(struct xfer_sched *s);
/* Sleep until something changes or <ms> pass; not at all once every chunk is done or the
 * transfer failed. */
void xfer_sched_wait(struct xfer_sched *s, int ms);
/* Chunks acknowledged so far. */
uint32_t xfer_sched_done(struct xfer_sched *s);

#endif
