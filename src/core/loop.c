/*
 * loop.c - what every back end of loop.h shares: the choice of back end, a binary heap of
 * timers, the wake-up descriptor, the hooks and the order of a turn.
 *
 * The back ends (core/loop_backend.h: epoll in loop_epoll.c, io_uring in loop_uring.c) only
 * watch descriptors and wait. Which one a loop gets is chosen when it is created: the
 * environment's ACCELNET_IO if set, else what loop_set_backend() was given (the proxy's
 * tune.io), else epoll. "auto" asks for io_uring where the kernel lets this process set up a
 * ring, epoll where it refuses (a container's seccomp profile: EPERM; an old kernel: ENOSYS).
 * The first choice is logged once, with the reason when auto fell back. epoll is the default:
 * io_uring carries plain connections' receives and sends (loop_ring_*, which net/conn.c uses;
 * docs/benchmarks.md measures it) but is new, and a completion pending on a loop's thread can
 * interrupt a blocking call there with EINTR. loop_current() is the loop running on the
 * thread, so the transport finds its loop without its owners passing it.
 *
 * The heap holds pointers to caller-owned timers; each timer remembers its slot so that
 * stopping or re-arming is O(log n) without a search. Slot 0 is unused so that "slot == 0"
 * means "not armed". The wake-up descriptor is an eventfd.
 *
 * Each turn's timer firing is a numbered pass; a timer records the pass number current when
 * it was armed, and the pass stops at the first due timer armed during it. Deadlines are
 * compared with the turn's cached time, so without that a timer re-arming itself at
 * loop_now() would fire again and again within one pass and the descriptors would wait.
 */
#include "core/loop.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/loop_backend.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct loop {
	const struct loop_backend_ops *ops;
	void *be;
	int stopping;
	uint64_t now_ms;
	struct loop_timer **heap; /* heap[1..nheap] */
	uint32_t nheap, capheap;
	uint32_t pass; /* the number of the timer pass running or last run */
	struct loop_io wake_io;
	loop_hook_fn wake_fn, after_fn;
	void *wake_arg, *after_arg;
};

static void loop_on_wake(struct loop_io *io, unsigned events);

/* --- choosing the back end --- */

const char *const loop_backend_names[LOOP_BACKEND_CHOICES] = {"auto", "epoll", "io_uring"};
static _Atomic int backend_wanted = LOOP_BACKEND_EPOLL; /* enum loop_backend_choice */
static atomic_flag backend_said = ATOMIC_FLAG_INIT;
static _Atomic(const struct loop_backend_ops *) backend_first;

int loop_backend_parse(const char *name)
{
	for (int i = 0; i < LOOP_BACKEND_CHOICES; i++)
		if (name && strcmp(name, loop_backend_names[i]) == 0)
			return i;
	return -EINVAL;
}

const char *loop_backend_choice_name(int choice)
{
	return choice >= 0 && choice < LOOP_BACKEND_CHOICES ? loop_backend_names[choice] : "?";
}

void loop_set_backend(int choice)
{
	atomic_store(&backend_wanted, choice);
}

/* ACCELNET_IO's choice when it names one, else -EINVAL. */
static int backend_env(void)
{
	const char *env = getenv("ACCELNET_IO");
	return env && *env ? loop_backend_parse(env) : -EINVAL;
}

/* ACCELNET_IO wins over the config (the tests run the suite over each back end). */
static int backend_choice(void)
{
	int c = backend_env();
	return c >= 0 ? c : atomic_load(&backend_wanted);
}

static int backend_open(struct loop *loop)
{
	int choice = backend_choice(), err = 0;
	if (choice != LOOP_BACKEND_EPOLL) {
		loop->ops = &loop_uring_ops;
		err = loop->ops->create(&loop->be);
		if (!err || choice == LOOP_BACKEND_IO_URING)
			goto out;
	}
	loop->ops = &loop_epoll_ops;
	int rc = loop->ops->create(&loop->be);
	if (rc)
		return rc;
out:
	if (!atomic_flag_test_and_set(&backend_said)) {
		if (err && choice == LOOP_BACKEND_IO_URING)
			log_msg(LOG_ERROR,
				"event loop: io_uring was asked for (%s) and cannot be "
				"set up: %s",
				backend_env() >= 0 ? "ACCELNET_IO" : "tune.io", strerror(-err));
		else if (err)
			log_msg(LOG_INFO, "event loop: epoll (io_uring refused: %s)",
				strerror(-err));
		else
			log_msg(LOG_INFO, "event loop: %s", loop->ops->name);
	}
	if (err && choice == LOOP_BACKEND_IO_URING)
		return err;
	const struct loop_backend_ops *none = NULL;
	atomic_compare_exchange_strong(&backend_first, &none, loop->ops);
	return 0;
}

const char *loop_backend_name(const struct loop *loop)
{
	return loop->ops->name;
}

const char *loop_backend_in_use(void)
{
	const struct loop_backend_ops *ops = atomic_load(&backend_first);
	return ops ? ops->name : NULL;
}

/* --- create, descriptors --- */

int loop_create(struct loop **out)
{
	struct loop *loop = calloc(1, sizeof(*loop));
	int err;
	if (!loop)
		return -ENOMEM;
	loop->wake_io.fd = -1;
	err = backend_open(loop);
	if (err) {
		loop->ops = NULL;
		goto fail;
	}
	loop->wake_io.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (loop->wake_io.fd < 0) {
		err = -errno;
		goto fail;
	}
	loop->wake_io.fn = loop_on_wake;
	loop->capheap = 64;
	loop->heap = calloc(loop->capheap + 1, sizeof(*loop->heap));
	if (!loop->heap) {
		err = -ENOMEM;
		goto fail;
	}
	err = loop_io_add(loop, &loop->wake_io);
	if (err)
		goto fail;
	loop->now_ms = clock_now_ms();
	*out = loop;
	return 0;
fail:
	loop_destroy(loop);
	return err;
}

void loop_destroy(struct loop *loop)
{
	if (!loop)
		return;
	if (loop->ops)
		loop->ops->destroy(loop->be);
	if (loop->wake_io.fd >= 0)
		close(loop->wake_io.fd);
	free(loop->heap);
	free(loop);
}

int loop_io_add(struct loop *loop, struct loop_io *io)
{
	return loop->ops->add(loop->be, io);
}

void loop_io_del(struct loop *loop, struct loop_io *io)
{
	loop->ops->del(loop->be, io);
}

uint64_t loop_now(const struct loop *loop)
{
	return loop->now_ms;
}

/* --- timer heap --- */

static void heap_place(struct loop *loop, uint32_t slot, struct loop_timer *t)
{
	loop->heap[slot] = t;
	t->slot = slot;
}

static void heap_up(struct loop *loop, uint32_t slot)
{
	struct loop_timer *t = loop->heap[slot];
	while (slot > 1 && loop->heap[slot / 2]->deadline_ms > t->deadline_ms) {
		heap_place(loop, slot, loop->heap[slot / 2]);
		slot /= 2;
	}
	heap_place(loop, slot, t);
}

static void heap_down(struct loop *loop, uint32_t slot)
{
	struct loop_timer *t = loop->heap[slot];
	for (;;) {
		uint32_t child = slot * 2;
		if (child > loop->nheap)
			break;
		if (child < loop->nheap &&
		    loop->heap[child + 1]->deadline_ms < loop->heap[child]->deadline_ms)
			child++;
		if (loop->heap[child]->deadline_ms >= t->deadline_ms)
			break;
		heap_place(loop, slot, loop->heap[child]);
		slot = child;
	}
	heap_place(loop, slot, t);
}

void loop_timer_stop(struct loop *loop, struct loop_timer *t)
{
	uint32_t slot = t->slot;
	if (!slot)
		return;
	ASSERT(slot <= loop->nheap && loop->heap[slot] == t);
	struct loop_timer *last = loop->heap[loop->nheap--];
	t->slot = 0;
	if (last == t)
		return;
	heap_place(loop, slot, last);
	heap_up(loop, slot);
	heap_down(loop, last->slot);
}

void loop_timer_set(struct loop *loop, struct loop_timer *t, uint64_t deadline_ms)
{
	t->pass = loop->pass;
	if (t->slot) {
		uint64_t old = t->deadline_ms;
		t->deadline_ms = deadline_ms;
		if (deadline_ms < old)
			heap_up(loop, t->slot);
		else
			heap_down(loop, t->slot);
		return;
	}
	if (loop->nheap == loop->capheap) {
		uint32_t cap = loop->capheap * 2;
		struct loop_timer **heap = realloc(loop->heap, (cap + 1) * sizeof(*heap));
		ASSERT(heap != NULL); /* timers are embedded in objects already allocated */
		loop->heap = heap;
		loop->capheap = cap;
	}
	t->deadline_ms = deadline_ms;
	loop->heap[++loop->nheap] = t;
	t->slot = loop->nheap;
	heap_up(loop, t->slot);
}

/* Fire the due timers armed before this pass; one armed during it (and any due timer behind
 * it in the heap) fires next turn, after the descriptors had their say. */
static void loop_fire_timers(struct loop *loop)
{
	uint32_t pass = ++loop->pass;
	while (loop->nheap && loop->heap[1]->deadline_ms <= loop->now_ms) {
		struct loop_timer *t = loop->heap[1];
		if (t->pass == pass)
			break;
		loop_timer_stop(loop, t);
		t->fn(t);
	}
}

/* --- wake-up and run --- */

void loop_set_wake_hook(struct loop *loop, loop_hook_fn fn, void *arg)
{
	loop->wake_fn = fn;
	loop->wake_arg = arg;
}

void loop_set_after_hook(struct loop *loop, loop_hook_fn fn, void *arg)
{
	loop->after_fn = fn;
	loop->after_arg = arg;
}

void loop_wake(struct loop *loop)
{
	uint64_t one = 1;
	ssize_t n = write(loop->wake_io.fd, &one, sizeof(one));
	(void)n; /* EAGAIN means a wake-up is already pending */
}

static void loop_on_wake(struct loop_io *io, unsigned events)
{
	struct loop *loop = container_of(io, struct loop, wake_io);
	uint64_t count;
	(void)events;
	while (read(io->fd, &count, sizeof(count)) > 0)
		;
	if (loop->wake_fn)
		loop->wake_fn(loop->wake_arg);
}

/* --- receives and sends through the back end --- */

static _Thread_local struct loop *loop_running;

struct loop *loop_current(void)
{
	return loop_running;
}

int loop_ring_attach(struct loop *loop, int fd, struct loop_ring_io *r)
{
	if (!loop->ops->ring_attach)
		return -ENOTSUP;
	int rc = loop->ops->ring_attach(loop->be, fd, r);
	if (!rc)
		r->loop = loop;
	return rc;
}

size_t loop_ring_take(struct loop_ring_io *r, void *buf, size_t len)
{
	return r->held ? r->loop->ops->ring_take(r->loop->be, r, buf, len, 1) : 0;
}

size_t loop_ring_peek(const struct loop_ring_io *r, void *buf, size_t len)
{
	struct loop_ring_io *w = (struct loop_ring_io *)r; /* not written when not consuming */
	return r->held ? r->loop->ops->ring_take(r->loop->be, w, buf, len, 0) : 0;
}

int loop_ring_rearm(struct loop_ring_io *r, int fd)
{
	return r->loop->ops->ring_rearm(r->loop->be, r, fd);
}

int loop_ring_pause(struct loop_ring_io *r, int fd)
{
	return r->loop->ops->ring_pause(r->loop->be, r, fd);
}

ssize_t loop_ring_send(struct loop_ring_io *r, int fd, const struct iovec *iov, int n)
{
	return r->loop->ops->ring_send(r->loop->be, r, fd, iov, n);
}

void loop_ring_shutdown(struct loop_ring_io *r, int fd)
{
	r->loop->ops->ring_shutdown(r->loop->be, r, fd);
}

void loop_ring_detach(struct loop_ring_io *r, int fd)
{
	if (r->loop)
		r->loop->ops->ring_detach(r->loop->be, r, fd);
	*r = (struct loop_ring_io){0};
}

void loop_stop(struct loop *loop)
{
	loop->stopping = 1;
}

void loop_run(struct loop *loop)
{
	struct loop *outer = loop_running;
	loop_running = loop;
	loop->stopping = 0;
	while (!loop->stopping) {
		int timeout = -1;
		loop->now_ms = clock_now_ms();
		if (loop->nheap) {
			uint64_t next = loop->heap[1]->deadline_ms;
			timeout = next <= loop->now_ms ? 0 : (int)(next - loop->now_ms);
		}
		loop->ops->wait(loop->be, timeout);
		loop->now_ms = clock_now_ms();
		loop->ops->dispatch(loop->be);
		loop_fire_timers(loop);
		if (loop->after_fn)
			loop->after_fn(loop->after_arg);
	}
	loop_running = outer;
}
