/*
 * test_loop.c - the event loop's timer pass: a timer that re-arms itself at loop_now() while
 * the timers fire waits for the next turn, so a descriptor that became ready meanwhile is
 * dispatched between two firings (issue 24: a KV-events subscriber re-arming "at once"
 * kept the main loop inside one pass for a whole flood); timers due at the start of a pass
 * still all fire in it, in deadline order.
 */
#include "core/loop.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(rearm_at_now_waits_for_the_next_turn),
	    cmocka_unit_test(due_timers_fire_in_one_pass_in_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
