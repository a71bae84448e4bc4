/*
 * test_loop.c - the event loop's timer pass: a timer that re-arms itself at loop_now() while
 * the timers fire waits for the next turn, so a descriptor that became ready meanwhile is
 * dispatched between two firings (issue 24: a KV-events subscriber re-arming "at once"
 * kept the main loop inside one pass for a whole flood); timers due at the start of a pass
 * still all fire in it, in deadline order.
 *
 * Then loop.h's contract for each back end (epoll, io_uring): a descriptor's readiness is an
 * edge (bytes left unread bring no second event until more come), an io deleted during a
 * batch gets none of that batch's events, and loop_wake() from another thread runs the wake
 * hook. Where the kernel refuses io_uring, its cases are skipped.
 */
#include "core/loop.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

struct again {
	struct loop_timer t;
	struct loop *loop;
	int fired, io_seen_at, wfd;
};

struct reader {
	struct loop_io io;
	struct again *a;
	int seen;
};

static void again_fire(struct loop_timer *t)
{
	struct again *a = container_of(t, struct again, t);
	if (++a->fired == 1)
		assert_int_equal(write(a->wfd, "x", 1), 1); /* ready from now on */
	if (a->fired == 1000) {
		loop_stop(a->loop); /* the descriptor never came between: fail below */
		return;
	}
	loop_timer_set(a->loop, t, loop_now(a->loop));
}

static void reader_ready(struct loop_io *io, unsigned events)
{
	struct reader *r = container_of(io, struct reader, io);
	char c;
	if (!(events & LOOP_READ) || read(io->fd, &c, 1) != 1)
		return;
	r->seen = 1;
	r->a->io_seen_at = r->a->fired;
	loop_timer_stop(r->a->loop, &r->a->t);
	loop_stop(r->a->loop);
}

static void rearm_at_now_waits_for_the_next_turn(void **state)
{
	(void)state;
	struct loop *loop;
	int fds[2];
	assert_int_equal(loop_create(&loop), 0);
	assert_int_equal(pipe(fds), 0);
	struct again a = {.t.fn = again_fire, .loop = loop, .wfd = fds[1]};
	struct reader r = {.io = {.fd = fds[0], .fn = reader_ready}, .a = &a};
	assert_int_equal(loop_io_add(loop, &r.io), 0);
	loop_timer_set(loop, &a.t, loop_now(loop));
	loop_run(loop);
	assert_true(r.seen);
	assert_int_equal(a.io_seen_at, 1); /* the very next turn */
	loop_io_del(loop, &r.io);
	close(fds[0]);
	close(fds[1]);
	loop_destroy(loop);
}

struct order;
struct ordered {
	struct loop_timer t;
	int id;
	struct order *o;
};

struct order {
	struct ordered t[3];
	int got[3], n;
	struct loop *loop;
};

static void order_fire(struct loop_timer *t)
{
	struct ordered *e = container_of(t, struct ordered, t);
	e->o->got[e->o->n++] = e->id;
	if (e->o->n == 3)
		loop_stop(e->o->loop);
}

static void due_timers_fire_in_one_pass_in_order(void **state)
{
	(void)state;
	struct loop *loop;
	assert_int_equal(loop_create(&loop), 0);
	struct order o = {.loop = loop};
	uint64_t past = loop_now(loop) - 10; /* every deadline due at once */
	for (int i = 2; i >= 0; i--) {
		o.t[i] = (struct ordered){.t.fn = order_fire, .id = i, .o = &o};
		loop_timer_set(loop, &o.t[i].t, past + (uint64_t)i);
	}
	loop_run(loop);
	assert_int_equal(o.n, 3);
	assert_int_equal(o.got[0], 0);
	assert_int_equal(o.got[1], 1);
	assert_int_equal(o.got[2], 2);
	loop_destroy(loop);
}

/* --- each back end --- */

static int backend_setup(void **state, int choice)
{
	unsetenv("ACCELNET_IO"); /* a test pass may name one for the whole suite */
	loop_set_backend(choice);
	*state = (void *)(intptr_t)choice;
	return 0;
}

static int on_epoll(void **state)
{
	return backend_setup(state, LOOP_BACKEND_EPOLL);
}

static int on_uring(void **state)
{
	return backend_setup(state, LOOP_BACKEND_IO_URING);
}

static int back_to_auto(void **state)
{
	(void)state;
	loop_set_backend(LOOP_BACKEND_AUTO);
	return 0;
}

/* A loop on the back end the case was set up for; 1 when the kernel refuses io_uring. */
static int loop_for(void **state, struct loop **loop)
{
	int rc = loop_create(loop);
	if ((rc == -EPERM || rc == -ENOSYS) && (intptr_t)*state == LOOP_BACKEND_IO_URING)
		return 1;
	assert_int_equal(rc, 0);
	assert_string_equal(loop_backend_name(*loop),
			    loop_backend_choice_name((int)(intptr_t)*state));
	return 0;
}

struct peer {
	struct loop_io io;
	struct loop *loop;
	struct peer *other; /* deleted by whichever of the two runs first */
	int reads, calls, deleted;
};

static void peer_ready(struct loop_io *io, unsigned events)
{
	struct peer *p = container_of(io, struct peer, io);
	p->calls++;
	assert_false(p->deleted);
	if (!(events & LOOP_READ))
		return;
	p->reads++;
	if (p->other && !p->deleted) {
		loop_io_del(p->loop, &p->other->io);
		p->other->deleted = 1;
		p->other->other = NULL;
		loop_stop(p->loop);
	}
}

static void stop_fire(struct loop_timer *t)
{
	struct again *a = container_of(t, struct again, t);
	loop_stop(a->loop);
}

static void deleted_io_gets_nothing_more_of_the_batch(void **state)
{
	struct loop *loop;
	int a[2], b[2];
	if (loop_for(state, &loop))
		skip();
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, a), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b), 0);
	assert_int_equal(write(a[1], "x", 1), 1);
	assert_int_equal(write(b[1], "x", 1), 1);
	struct peer pa = {.io = {.fd = a[0], .fn = peer_ready}, .loop = loop};
	struct peer pb = {.io = {.fd = b[0], .fn = peer_ready}, .loop = loop};
	pa.other = &pb;
	pb.other = &pa;
	assert_int_equal(loop_io_add(loop, &pa.io), 0);
	assert_int_equal(loop_io_add(loop, &pb.io), 0);
	loop_run(loop); /* both ready in one batch: the first deletes the second */
	struct again t = {.t.fn = stop_fire, .loop = loop};
	loop_timer_set(loop, &t.t, loop_now(loop) + 20);
	assert_int_equal(write(pa.deleted ? a[1] : b[1], "y", 1), 1); /* the deleted one's */
	loop_run(loop);
	assert_int_equal(pa.reads + pb.reads, 1);
	assert_true(pa.deleted != pb.deleted);
	loop_io_del(loop, pa.deleted ? &pb.io : &pa.io);
	close(a[0]), close(a[1]), close(b[0]), close(b[1]);
	loop_destroy(loop);
}

static void bytes_left_unread_bring_no_second_event(void **state)
{
	struct loop *loop;
	int sp[2];
	if (loop_for(state, &loop))
		skip();
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp), 0);
	assert_int_equal(write(sp[1], "xy", 2), 2);
	struct peer p = {.io = {.fd = sp[0], .fn = peer_ready}, .loop = loop};
	assert_int_equal(loop_io_add(loop, &p.io), 0);
	struct again t = {.t.fn = stop_fire, .loop = loop};
	loop_timer_set(loop, &t.t, loop_now(loop) + 20);
	loop_run(loop); /* turns for 20 ms: one read edge, one byte of two still unread */
	assert_int_equal(p.reads, 1);
	assert_int_equal(write(sp[1], "z", 1), 1); /* a new edge */
	loop_timer_set(loop, &t.t, loop_now(loop) + 20);
	loop_run(loop);
	assert_int_equal(p.reads, 2);
	loop_io_del(loop, &p.io);
	close(sp[0]), close(sp[1]);
	loop_destroy(loop);
}

static void wake_stop(void *arg)
{
	loop_stop(arg);
}

static void *wake_from_thread(void *arg)
{
	loop_wake(arg);
	return NULL;
}

static void wake_from_another_thread_runs_the_hook(void **state)
{
	struct loop *loop;
	pthread_t th;
	if (loop_for(state, &loop))
		skip();
	loop_set_wake_hook(loop, wake_stop, loop);
	assert_int_equal(pthread_create(&th, NULL, wake_from_thread, loop), 0);
	loop_run(loop); /* no timer: only the wake-up ends it */
	pthread_join(th, NULL);
	loop_destroy(loop);
}

static void names_parse(void **state)
{
	(void)state;
	assert_int_equal(loop_backend_parse("auto"), LOOP_BACKEND_AUTO);
	assert_int_equal(loop_backend_parse("epoll"), LOOP_BACKEND_EPOLL);
	assert_int_equal(loop_backend_parse("io_uring"), LOOP_BACKEND_IO_URING);
	assert_int_equal(loop_backend_parse("uring"), -EINVAL);
}

#define EACH_BACKEND(t)                                                                            \
	cmocka_unit_test_setup_teardown(t, on_epoll, back_to_auto),                                \
	    cmocka_unit_test_setup_teardown(t, on_uring, back_to_auto)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(rearm_at_now_waits_for_the_next_turn),
	    cmocka_unit_test(due_timers_fire_in_one_pass_in_order),
	    EACH_BACKEND(deleted_io_gets_nothing_more_of_the_batch),
	    EACH_BACKEND(bytes_left_unread_bring_no_second_event),
	    EACH_BACKEND(wake_from_another_thread_runs_the_hook),
	    cmocka_unit_test(names_parse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
