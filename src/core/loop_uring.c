/*
 * loop_uring.c - the io_uring back end of core/loop.c.
 *
 * Readiness comes as multishot polls (IORING_OP_POLL_ADD with IORING_POLL_ADD_MULTI): one
 * poll per descriptor for its whole life, for read, write and hang-up together, edge-
 * triggered as epoll's EPOLLET is (a completion per wake-up of the socket, carrying the mask
 * then), so the owners see what they saw with epoll. Adding and removing only queue
 * submission entries; the turn's wait submits them all and waits in one io_uring_enter
 * (io_uring_submit_and_wait_timeout with the timeout as an argument, no timeout entry): a
 * turn costs one system call however many descriptors came and went.
 *
 * A completion names its descriptor by user_data = generation << 32 | fd, never by a
 * pointer: the table of slots by fd holds the io and the generation of its registration, and
 * loop_io_del bumps the generation, so completions already in the ring for a deleted io
 * (the rest of this batch, the poll's final -ECANCELED) are recognised and dropped, even if
 * its owner freed it or the descriptor number was reused. A poll the kernel ended (no
 * IORING_CQE_F_MORE: the completion queue overflowed) is armed again, and a fresh poll
 * reports the state it finds, so no edge is lost.
 *
 * The poll holds a reference to the file: a descriptor closed before loop_io_del stays open
 * in the kernel until the removal is submitted (the end of the turn), which is why loop.h
 * asks owners to delete before they close. Destroying the loop submits the
 * last removals and runs their completions, so a listener closed on the way out is closed
 * when the process exits; a killed process's ring (and the files its polls hold) is torn
 * down by the kernel a little after the process is gone.
 */
#include "core/loop_backend.h"
#include "core/check.h"
#include "core/loop.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#define URING_SQ 512
#define URING_CQ 4096
#define URING_BATCH 256

struct uring_slot {
	struct loop_io *io; /* NULL: no registration */
	uint32_t gen;	    /* of the registration now, or of the next one */
};

struct uring_done {
	uint64_t ud;
	int32_t res;
	uint32_t flags;
};

struct uring_be {
	struct io_uring ring;
	int ring_ok;
	struct uring_slot *slots; /* by fd */
	uint32_t nslots;
	struct uring_done done[URING_BATCH];
	unsigned ndone;
};

static uint64_t slot_ud(uint32_t gen, int fd)
{
	return (uint64_t)gen << 32 | (uint32_t)fd;
}

static void uring_destroy(void *arg)
{
	struct uring_be *be = arg;
	if (!be)
		return;
	if (be->ring_ok) {
		/* the removals queued last (a listener closed on the way out), submitted and
		 * completed now, so that their files close with the process, not after it */
		io_uring_submit(&be->ring);
		io_uring_get_events(&be->ring);
	}
	if (be->ring_ok)
		io_uring_queue_exit(&be->ring);
	free(be->slots);
	free(be);
}

/*
 * Needs what the back end uses: the wait's timeout as an argument (5.11), skipping the
 * completions of successful removals (5.17, after multishot poll in 5.13). Completions are
 * posted cooperatively where the kernel can (COOP_TASKRUN, 5.19: when the thread next enters
 * the kernel rather than by interrupting it); a blocking call a loop's thread makes may still
 * see EINTR when one is pending, as with a signal.
 */
static int uring_create(void **out)
{
	struct uring_be *be = calloc(1, sizeof(*be));
	struct io_uring_params p = {
	    .flags = IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
	    .cq_entries = URING_CQ,
	};
	int err;
	if (!be)
		return -ENOMEM;
	err = io_uring_queue_init_params(URING_SQ, &be->ring, &p);
	if (err == -EINVAL) { /* before 5.19 */
		p = (struct io_uring_params){.flags = IORING_SETUP_CQSIZE, .cq_entries = URING_CQ};
		err = io_uring_queue_init_params(URING_SQ, &be->ring, &p);
	}
	if (err < 0)
		goto fail;
	be->ring_ok = 1;
	if (!(p.features & IORING_FEAT_EXT_ARG) || !(p.features & IORING_FEAT_CQE_SKIP) ||
	    !(p.features & IORING_FEAT_NODROP)) {
		err = -ENOSYS;
		goto fail;
	}
	*out = be;
	return 0;
fail:
	uring_destroy(be);
	return err;
}

/* A submission entry; when the queue is full, what it holds is submitted first. */
static struct io_uring_sqe *uring_sqe(struct uring_be *be)
{
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&be->ring)))
		io_uring_submit(&be->ring);
	return sqe;
}

static void uring_arm(struct uring_be *be, int fd, uint64_t ud)
{
	struct io_uring_sqe *sqe = uring_sqe(be);
	io_uring_prep_poll_multishot(sqe, fd, POLLIN | POLLOUT | POLLRDHUP);
	io_uring_sqe_set_data64(sqe, ud);
}

static int uring_add(void *arg, struct loop_io *io)
{
	struct uring_be *be = arg;
	int fd = io->fd;
	if (fd < 0)
		return -EBADF;
	if ((uint32_t)fd >= be->nslots) {
		uint32_t n = be->nslots ? be->nslots : 64;
		while (n <= (uint32_t)fd)
			n *= 2;
		struct uring_slot *s = realloc(be->slots, n * sizeof(*s));
		if (!s)
			return -ENOMEM;
		memset(s + be->nslots, 0, (n - be->nslots) * sizeof(*s));
		be->slots = s;
		be->nslots = n;
	}
	struct uring_slot *s = &be->slots[fd];
	if (s->io)
		return -EEXIST;
	if (++s->gen == 0)
		s->gen = 1;
	s->io = io;
	uring_arm(be, fd, slot_ud(s->gen, fd));
	return 0;
}

static void uring_del(void *arg, struct loop_io *io)
{
	struct uring_be *be = arg;
	int fd = io->fd;
	if (fd < 0 || (uint32_t)fd >= be->nslots || be->slots[fd].io != io)
		return;
	struct uring_slot *s = &be->slots[fd];
	struct io_uring_sqe *sqe = uring_sqe(be);
	io_uring_prep_poll_remove(sqe, slot_ud(s->gen, fd));
	io_uring_sqe_set_data64(sqe, 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	s->io = NULL;
	if (++s->gen == 0)
		s->gen = 1;
}

static void uring_wait(void *arg, int timeout_ms)
{
	struct uring_be *be = arg;
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
				       .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
	int rc =
	    io_uring_submit_and_wait_timeout(&be->ring, &cqe, 1, timeout_ms < 0 ? NULL : &ts, NULL);
	ASSERT(rc >= 0 || rc == -ETIME || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
	unsigned head, n = 0;
	io_uring_for_each_cqe(&be->ring, head, cqe)
	{
		if (n == URING_BATCH)
			break;
		be->done[n++] = (struct uring_done){cqe->user_data, cqe->res, cqe->flags};
	}
	io_uring_cq_advance(&be->ring, n);
	be->ndone = n;
}

static void uring_dispatch(void *arg)
{
	struct uring_be *be = arg;
	for (unsigned i = 0; i < be->ndone; i++) {
		const struct uring_done *d = &be->done[i];
		int fd = (int)(uint32_t)d->ud;
		uint32_t gen = (uint32_t)(d->ud >> 32);
		if (!d->ud || (uint32_t)fd >= be->nslots || be->slots[fd].gen != gen ||
		    !be->slots[fd].io)
			continue; /* a removal's failure, or an io deleted since */
		struct loop_io *io = be->slots[fd].io;
		unsigned events = 0;
		if (d->res < 0) {
			/* the poll failed: let the owner try the socket and meet the error */
			events = LOOP_READ | LOOP_WRITE | LOOP_HUP;
		} else {
			if (!(d->flags & IORING_CQE_F_MORE))
				uring_arm(be, fd, d->ud);
			if (d->res & POLLIN)
				events |= LOOP_READ;
			if (d->res & POLLOUT)
				events |= LOOP_WRITE;
			if (d->res & (POLLRDHUP | POLLHUP | POLLERR))
				events |= LOOP_HUP;
			if (!events)
				continue;
		}
		io->fn(io, events);
	}
	be->ndone = 0;
}

const struct loop_backend_ops loop_uring_ops = {
    .name = "io_uring",
    .create = uring_create,
    .destroy = uring_destroy,
    .add = uring_add,
    .del = uring_del,
    .wait = uring_wait,
    .dispatch = uring_dispatch,
};
