/*
 * loop_epoll.c - the epoll back end of core/loop.c.
 *
 * Every descriptor is registered once, edge-triggered, for read, write and hang-up together:
 * one epoll_ctl per connection for its whole life. A turn is one epoll_wait of up to
 * LOOP_BATCH events; an io deleted while the batch is dispatched has its remaining entries
 * blanked, so it gets none of them.
 */
#include "core/loop_backend.h"
#include "core/check.h"
#include "core/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#define LOOP_BATCH 256

struct epoll_be {
	int epfd;
	struct epoll_event events[LOOP_BATCH];
	int nevents, cursor;
};

static void epoll_destroy(void *arg)
{
	struct epoll_be *be = arg;
	if (!be)
		return;
	if (be->epfd >= 0)
		close(be->epfd);
	free(be);
}

static int epoll_create_be(void **out)
{
	struct epoll_be *be = calloc(1, sizeof(*be));
	if (!be)
		return -ENOMEM;
	be->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (be->epfd < 0) {
		int err = -errno;
		epoll_destroy(be);
		return err;
	}
	*out = be;
	return 0;
}

static int epoll_add(void *arg, struct loop_io *io)
{
	struct epoll_be *be = arg;
	struct epoll_event ev = {
	    .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
	    .data.ptr = io,
	};
	if (epoll_ctl(be->epfd, EPOLL_CTL_ADD, io->fd, &ev) < 0)
		return -errno;
	return 0;
}

static void epoll_del(void *arg, struct loop_io *io)
{
	struct epoll_be *be = arg;
	epoll_ctl(be->epfd, EPOLL_CTL_DEL, io->fd, NULL);
	for (int i = be->cursor; i < be->nevents; i++)
		if (be->events[i].data.ptr == io)
			be->events[i].data.ptr = NULL;
}

static void epoll_wait_be(void *arg, int timeout_ms)
{
	struct epoll_be *be = arg;
	int n = epoll_wait(be->epfd, be->events, LOOP_BATCH, timeout_ms);
	if (n < 0) {
		ASSERT(errno == EINTR);
		n = 0;
	}
	be->nevents = n;
}

static void epoll_dispatch(void *arg)
{
	struct epoll_be *be = arg;
	for (be->cursor = 0; be->cursor < be->nevents;) {
		struct epoll_event *ev = &be->events[be->cursor++];
		struct loop_io *io = ev->data.ptr;
		if (!io)
			continue;
		unsigned events = 0;
		if (ev->events & EPOLLIN)
			events |= LOOP_READ;
		if (ev->events & EPOLLOUT)
			events |= LOOP_WRITE;
		if (ev->events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			events |= LOOP_HUP;
		io->fn(io, events);
	}
	be->nevents = be->cursor = 0;
}

const struct loop_backend_ops loop_epoll_ops = {
    .name = "epoll",
    .create = epoll_create_be,
    .destroy = epoll_destroy,
    .add = epoll_add,
    .del = epoll_del,
    .wait = epoll_wait_be,
    .dispatch = epoll_dispatch,
};
