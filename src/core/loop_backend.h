/*
 * loop_backend.h - what core/loop.c asks of a readiness back end (epoll, io_uring).
 *
 * For core/loop*.c only. loop.c owns what every back end shares (the timer heap, the wake-up
 * descriptor, the hooks and the order of a turn); a back end owns how descriptors are watched
 * and how a turn waits: one const table each (core/loop_epoll.c, core/loop_uring.c), chosen
 * by name when a loop is created.
 *
 * create: 0 and *be set, or -errno (io_uring refused by the kernel or a seccomp filter:
 * -EPERM, -ENOSYS; the caller may then try another). add/del: as loop_io_add/loop_io_del,
 * including "an io deleted during dispatch gets no further events of that batch". wait: block
 * at most <timeout_ms> (-1: no limit, 0: not at all), submitting the back end's queued work
 * in the same call, and keep what came for dispatch. dispatch: call each ready io's fn with
 * LOOP_* events.
 */
#ifndef ACCELNET_CORE_LOOP_BACKEND_H
#define ACCELNET_CORE_LOOP_BACKEND_H

#include <sys/types.h>

struct iovec;
struct loop_io;	     /* core/loop.h */
struct loop_ring_io; /* core/loop.h */

struct loop_backend_ops {
	const char *name;
	int (*create)(void **be);
	void (*destroy)(void *be);
	int (*add)(void *be, struct loop_io *io);
	void (*del)(void *be, struct loop_io *io);
	void (*wait)(void *be, int timeout_ms);
	void (*dispatch)(void *be);
	/* receives and sends through the back end (loop.h: loop_ring_*); NULL: not offered */
	int (*ring_attach)(void *be, int fd, struct loop_ring_io *r);
	size_t (*ring_take)(void *be, struct loop_ring_io *r, void *buf, size_t len, int consume);
	int (*ring_rearm)(void *be, struct loop_ring_io *r, int fd);
	int (*ring_pause)(void *be, struct loop_ring_io *r, int fd);
	ssize_t (*ring_send)(void *be, struct loop_ring_io *r, int fd, const struct iovec *iov,
			     int n);
	void (*ring_shutdown)(void *be, struct loop_ring_io *r, int fd);
	void (*ring_detach)(void *be, struct loop_ring_io *r, int fd);
};

extern const struct loop_backend_ops loop_epoll_ops;
extern const struct loop_backend_ops loop_uring_ops;

#endif
