/*
 * test_debugreq.c - what /debug/requests sees: the slowest exchanges kept per worker (the
 * slowest win, whatever order they end in), the in-flight snapshot (oldest first, capped),
 * the ask/answer handshake, the document's shape, and the X-Accelnet-Timing value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "core/clock.h"
#include "proxy/debugreq.h"
#include "proxy/pace.h"

#define NENDED 100
#define NLIVE 40

static struct worker w;
static struct debugreq_board *board;
static struct exchange ended[NENDED], live[NLIVE];
static struct xpace paces[NLIVE]; /* the live exchanges' pacing, as their codec keeps it */

static int setup(void **state)
{
	(void)state;
	memset(&w, 0, sizeof(w));
	if (loop_create(&w.loop) < 0)
		return -1;
	list_init(&w.live_exchanges);
	board = debugreq_board_new(1);
	if (!board)
		return -1;
	board->w[0].loop = w.loop;
	w.dbg = &board->w[0];
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	debugreq_board_free(board);
	loop_destroy(w.loop);
	return 0;
}

/* An exchange of <w> whose request head came <ago_ms> ago. */
static void make(struct exchange *x, const char *id, uint64_t ago_ms)
{
	memset(x, 0, sizeof(*x));
	x->w = &w;
	x->att = &x->tries[0]; /* not dispatched: its attempt holds nothing */
	x->pace = x >= live && x < live + NLIVE ? &paces[x - live] : &paces[0];
	snprintf(x->names.reqid, sizeof(x->names.reqid), "%s", id);
	snprintf(x->names.traceparent, sizeof(x->names.traceparent), "00-%032x-%016x-01", 7, 9);
	x->log.start_ms = loop_now(w.loop) - ago_ms;
	x->log.start_ns = clock_now_ns() - ago_ms * 1000000u;
	x->meth = HTTP_POST;
	x->peer.ip = "10.0.0.1";
}

/* The exchanges end in a scrambled order; the slowest 8 are kept. Their ages are 100 ms
 * apart: the document orders them by the time each took to its end as the clock read it
 * (made, then ended at once), and a thread stalled between the two under ThreadSanitizer on a
 * loaded machine once put r97 before r99 when they were 1 ms apart. */
static void slowest_are_kept(void **state)
{
	(void)state;
	for (unsigned i = 0; i < NENDED; i++) {
		unsigned k = (i * 37) % NENDED; /* a permutation of 0..99 */
		char id[16];
		snprintf(id, sizeof(id), "r%u", k);
		make(&ended[i], id, 1000 + 100 * k);
		ended[i].log.status = 503;
		debugreq_note_end(&ended[i]);
	}
	struct debugreq_worker *d = w.dbg;
	assert_int_equal(d->nslow[0], DEBUGREQ_SLOW);
	for (unsigned i = 0; i < DEBUGREQ_SLOW; i++) {
		unsigned k;
		assert_int_equal(sscanf(d->slow[0][i].reqid, "r%u", &k), 1);
		assert_true(k >= NENDED - DEBUGREQ_SLOW);
		assert_int_equal(d->slow[0][i].status, 503);
	}
}

static void snapshot_and_document(void **state)
{
	(void)state;
	for (unsigned i = 0; i < NLIVE; i++) {
		char id[16];
		snprintf(id, sizeof(id), "live%u", i);
		make(&live[i], id, 500 - i); /* pushed oldest first, as exchange_new() does */
		list_push_back(&w.live_exchanges, &live[i].link);
	}
	live[0].wt.state = W_QUEUED;
	live[0].wt.queued_ms = loop_now(w.loop) - 3;
	paces[1].buffering = 1;
	debugreq_ask(board);
	assert_false(debugreq_answered(board));
	debugreq_peek(&w);
	assert_true(debugreq_answered(board));
	struct debugreq_worker *d = w.dbg;
	assert_int_equal(d->nlive, NLIVE);
	assert_int_equal(d->ninflight, DEBUGREQ_INFLIGHT);
	assert_string_equal(d->inflight[0].reqid, "live0");
	assert_string_equal(d->inflight[0].state, "queued");
	assert_int_equal(d->inflight[0].queue_us, 3000);
	assert_string_equal(d->inflight[1].state, "reading body");
	assert_string_equal(d->inflight[2].state, "starting");

	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_int_equal(debugreq_write(board, f), 0);
	fclose(f);
	json_error_t err;
	json_t *doc = json_loads(text, 0, &err);
	assert_non_null(doc);
	assert_int_equal(json_integer_value(json_object_get(doc, "in_flight_count")), NLIVE);
	json_t *in = json_object_get(doc, "in_flight");
	assert_int_equal(json_array_size(in), DEBUGREQ_INFLIGHT);
	double prev = 1e18;
	for (size_t i = 0; i < json_array_size(in); i++) { /* the oldest first */
		double age = json_real_value(json_object_get(json_array_get(in, i), "age_ms"));
		assert_true(age <= prev);
		prev = age;
	}
	json_t *x0 = json_array_get(in, 0);
	assert_string_equal(json_string_value(json_object_get(x0, "method")), "POST");
	assert_true(json_is_null(json_object_get(x0, "path"))); /* no access log copy */
	assert_true(json_is_null(json_object_get(x0, "route")));
	assert_string_equal(json_string_value(json_object_get(x0, "trace_id")),
			    "00000000000000000000000000000007");
	json_t *slow = json_object_get(doc, "slowest");
	assert_int_equal(json_array_size(slow), DEBUGREQ_SLOW);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(slow, 0), "request_id")), "r99");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(slow, 0), "status")),
			 503);
	assert_int_equal(json_array_size(json_object_get(doc, "silent_workers")), 0);
	json_decref(doc);
	free(text);

	/* asked again and not answered: the worker is named silent, its lists left out */
	debugreq_ask(board);
	f = open_memstream(&text, &len);
	assert_int_equal(debugreq_write(board, f), 0);
	fclose(f);
	assert_non_null(
	    strstr(text, "\"silent_workers\":[0],\"in_flight_count\":0,\"in_flight\":[]"));
	free(text);
	debugreq_peek(&w);
	for (unsigned i = 0; i < NLIVE; i++)
		list_del(&w.live_exchanges, &live[i].link);
}

static void timing_value(void **state)
{
	(void)state;
	struct exchange x;
	make(&x, "t", 0);
	char out[160];
	/* answered before dispatch: nothing measured but the whole */
	assert_int_equal(debugreq_timing(&x, 0, out, sizeof(out)), 0);
	assert_true(debugreq_timing(&x, 1, out, sizeof(out)) > 0);
	assert_true(strncmp(out, "total;dur=", 10) == 0);
	x.log.start_ns = 1000000000u;
	x.log.queue_us = 1500;
	x.log.queue_noted = 1;
	x.log.dispatch_ns = x.log.start_ns + 2000000u;
	x.log.conn_ns = x.log.dispatch_ns + 250000u;
	x.log.ttfb_ns = x.log.start_ns + 42000000u;
	int n = debugreq_timing(&x, 0, out, sizeof(out));
	assert_int_equal(n, (int)strlen(out));
	assert_string_equal(
	    out, "queue;dur=1.500, connect;dur=0.250, backend;dur=39.750, ttfb;dur=42.000");
	assert_int_equal(debugreq_timing(&x, 0, out, 20), -1);
}

/* The wait for a slot, noted once when it ends: granted or given up (queue.timeout_ms), so
 * far while waiting, none before a pool; past 71.6 minutes it stays at the most, where a
 * 32-bit product in milliseconds * 1000 wrapped round to a few milliseconds. */
static void queue_wait(void **state)
{
	(void)state;
	struct exchange x;
	make(&x, "q", 0);
	assert_int_equal(exchange_queue_us(&x, 5000), UINT32_MAX); /* no pool yet */
	x.wt.state = W_QUEUED;
	x.wt.queued_ms = 1000;
	assert_int_equal(exchange_queue_us(&x, 1250), 250000);
	exchange_note_queue_end(&x, 1300); /* given up: the 503 says how long */
	x.wt.state = W_IDLE;
	assert_int_equal(exchange_queue_us(&x, 9000), 300000);
	exchange_note_queue_end(&x, 9000); /* the first end is the one kept */
	assert_int_equal(exchange_queue_us(&x, 9000), 300000);
	char out[160];
	assert_true(debugreq_timing(&x, 0, out, sizeof(out)) > 0);
	assert_string_equal(out, "queue;dur=300.000");

	make(&x, "long", 0);
	x.wt.queued_ms = 1000;
	exchange_note_queue_end(&x, 1000 + 4294968u); /* 71.6 minutes in the queue */
	assert_int_equal(exchange_queue_us(&x, 0), UINT32_MAX - 1);
	make(&x, "free", 0);
	exchange_note_queue_end(&x, 1000); /* a slot was free at once */
	assert_int_equal(exchange_queue_us(&x, 2000), 0);
	assert_int_equal(exchange_us_between(1000, 1000 + 5000000000000ull), UINT32_MAX - 1);
	assert_int_equal(exchange_us_between(0, 1000), UINT32_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(slowest_are_kept),
	    cmocka_unit_test(snapshot_and_document),
	    cmocka_unit_test(timing_value),
	    cmocka_unit_test(queue_wait),
	};
	return cmocka_run_group_tests_name("debug requests", tests, setup, teardown);
}
