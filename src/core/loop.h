/*
 * loop.h - the event loop: file readiness, timers, cross-thread wake-up.
 *
 * One loop per thread; nothing here is shared except loop_wake(). File descriptors are
 * registered once, edge-triggered, for read, write and peer hang-up together, so a connection
 * costs one registration for its whole life (an epoll_ctl, or a multishot poll queued on the
 * io_uring and submitted with the turn's wait); owners keep track of what they are waiting
 * for, and call loop_io_del before they close a descriptor. Callers embed struct loop_io and
 * struct loop_timer in their own objects and recover the owner with container_of().
 *
 * Two back ends (core/loop_backend.h): epoll and io_uring, chosen when a loop is created:
 * the environment's ACCELNET_IO (epoll | io_uring | auto) if set, else loop_set_backend()'s
 * choice, else epoll ("auto": io_uring where the kernel allows it, epoll where it refuses).
 *
 * One turn of loop_run(), in order:
 *   1. wait for readiness, at most until the nearest timer;
 *   2. dispatch every ready descriptor (an io deleted during the batch gets no further events,
 *      so an owner may free itself from its own callback once it has called loop_io_del);
 *   3. fire the timers that are due (a timer armed while they fire, even for a time already
 *      past, waits for the next turn: a callback re-arming itself "at once" lets the loop
 *      look at its descriptors in between, never spins inside one turn);
 *   4. run the after-turn hook (owners use it to flush work gathered during the turn).
 */
#ifndef ACCELNET_CORE_LOOP_H
#define ACCELNET_CORE_LOOP_H

#include "core/container.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

enum loop_event {
	LOOP_READ = 1u << 0,
	LOOP_WRITE = 1u << 1,
	LOOP_HUP = 1u << 2, /* the peer closed its side or the socket is in error */
};

struct loop;
struct loop_io;
struct loop_timer;

typedef void (*loop_io_fn)(struct loop_io *io, unsigned events);
typedef void (*loop_timer_fn)(struct loop_timer *t);
typedef void (*loop_hook_fn)(void *arg);

struct loop_io {
	int fd;
	loop_io_fn fn;
};

struct loop_timer {
	uint64_t deadline_ms;
	uint32_t slot; /* index in the heap, 0 when not armed */
	uint32_t pass; /* the loop's timer pass when it was armed (see loop.c) */
	loop_timer_fn fn;
};

enum loop_backend_choice {
	LOOP_BACKEND_AUTO,
	LOOP_BACKEND_EPOLL,
	LOOP_BACKEND_IO_URING,
	LOOP_BACKEND_CHOICES
};

/* The choices' names, by enum loop_backend_choice ("auto", "epoll", "io_uring"). */
extern const char *const loop_backend_names[LOOP_BACKEND_CHOICES];

/* "auto", "epoll", "io_uring": its enum loop_backend_choice, or -EINVAL. */
int loop_backend_parse(const char *name);
const char *loop_backend_choice_name(int choice);
/* The back end of the loops created from now on (before the threads start); ACCELNET_IO in
 * the environment wins over it. */
void loop_set_backend(int choice);
/* "epoll" or "io_uring": what <loop> runs on; loop_backend_in_use(): what this process's
 * first loop got (NULL before one was created). */
const char *loop_backend_name(const struct loop *loop);
const char *loop_backend_in_use(void);

/* A loop on the chosen back end; with io_uring asked for by name and refused by the
 * kernel, its error (-EPERM, -ENOSYS...): auto falls back to epoll instead. */
int loop_create(struct loop **out);
void loop_destroy(struct loop *loop);

/* Watch io->fd (non-blocking) for read, write and hang-up, edge-triggered. */
int loop_io_add(struct loop *loop, struct loop_io *io);
/* Stop watching; pending events of the current turn for <io> are dropped. Does not close;
 * call it before closing (io_uring's poll holds the file open until the removal is
 * submitted, at the end of the turn). */
void loop_io_del(struct loop *loop, struct loop_io *io);

/* Arm (or re-arm) <t> to fire once at <deadline_ms> on the monotonic clock. */
void loop_timer_set(struct loop *loop, struct loop_timer *t, uint64_t deadline_ms);
void loop_timer_stop(struct loop *loop, struct loop_timer *t);
static inline int loop_timer_armed(const struct loop_timer *t)
{
	return t->slot != 0;
}

/* The time at the start of this turn, in ms (cheap; good enough for timeouts). */
uint64_t loop_now(const struct loop *loop);

void loop_set_wake_hook(struct loop *loop, loop_hook_fn fn, void *arg);
/* Make <loop> run its wake hook soon. Safe from any thread and from signal handlers. */
void loop_wake(struct loop *loop);
void loop_set_after_hook(struct loop *loop, loop_hook_fn fn, void *arg);

/* Run turns until loop_stop() is called from a callback. */
void loop_run(struct loop *loop);
void loop_stop(struct loop *loop);

/*
 * A connection's receives and sends through the loop itself (the io_uring back end only: the
 * others answer -ENOTSUP), for net/conn.c. Attached to a descriptor registered with
 * loop_io_add, a multishot receive lands the peer's bytes in the loop's buffers, held here in
 * order until taken, and the io's fn is called with LOOP_READ when some came (or the end);
 * a send is copied into a buffer of the loop's and queued, submitted with the turn's wait,
 * the io's fn called with LOOP_WRITE when it is done. Zeroed (all 0) means not attached.
 */
struct loop_ring_io {
	struct loop *loop;   /* NULL: not attached */
	uint32_t head, tail; /* received buffers held, in order, as id + 1 (0: none) */
	uint32_t off;	     /* bytes of head already taken */
	uint32_t held;	     /* bytes held */
	uint32_t bufs;	     /* buffers held */
	int32_t end;	     /* 0: open; 1: the peer's end came; -errno: the receive failed */
	int32_t tx_err;	     /* a send's failure, told by the next write */
	uint32_t tx;	     /* the send in flight, as id + 1 (0: none) */
	uint64_t rx_ud;	     /* the receive's tag in the ring */
	uint8_t armed;	     /* a multishot receive is in the ring */
	uint8_t cancelling;  /* ... and its cancellation is asked for */
	uint8_t shut;	     /* shut the sending side once the send in flight is done */
	uint8_t paused;	     /* receiving stopped for the owner to read the socket itself */
};

/* The loop running on this thread (inside loop_run), or NULL. */
struct loop *loop_current(void);
/* Attach <r> to registered descriptor <fd> and start receiving: 0, or -errno (-ENOTSUP).
 * io_uring keeps <r> as an offset from the io registered on <fd>: <r> lies in the same
 * object as that io (within 2 GiB of it, not at its address: else -ENOTSUP), and neither
 * moves while attached. */
int loop_ring_attach(struct loop *loop, int fd, struct loop_ring_io *r);
/* Up to <len> bytes held, consumed: a count, 0 when none is held. */
size_t loop_ring_take(struct loop_ring_io *r, void *buf, size_t len);
/* Copy up to <len> held bytes without consuming them: a count. */
size_t loop_ring_peek(const struct loop_ring_io *r, void *buf, size_t len);
/* Receive again after the receive ended (the loop's buffers ran out, too much held), or was
 * paused (loop_ring_pause; the poll then stops telling of bytes). */
int loop_ring_rearm(struct loop_ring_io *r, int fd);
/* Stop receiving while the owner reads the socket itself (splice(2)): the receive in the ring
 * is cancelled (its completion, bytes or the cancellation, still calls the io's fn with
 * LOOP_READ; the socket is not the owner's to read while r->armed), the bytes held stay held
 * for it to take first, and the descriptor's poll tells of bytes again. loop_ring_rearm
 * receives through the ring again. 0, or -errno. */
int loop_ring_pause(struct loop_ring_io *r, int fd);
/* Queue a send of <iov>: the count copied and queued, -EAGAIN while one is in flight,
 * -EMSGSIZE when it is too large for one (nothing in flight: the caller may send it itself). */
ssize_t loop_ring_send(struct loop_ring_io *r, int fd, const struct iovec *iov, int n);
/* Shut the sending side of <fd> after the send in flight, if any. */
void loop_ring_shutdown(struct loop_ring_io *r, int fd);
/* Detach before <fd> is closed: the receive cancelled, the buffers held given back, a send in
 * flight left to finish for a short grace, then cancelled (its buffer is the loop's, freed at
 * its completion, when the ring lets the file go). */
void loop_ring_detach(struct loop_ring_io *r, int fd);

#endif
