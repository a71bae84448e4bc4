/*
 * exchange.c - an exchange's life: made from a request head (its names with it: reqnames.h)
 * and its client, reused from the worker's free list, and the letting go of everything it
 * holds (see exchange.h). The features hear of its start and end through the hook lists of
 * xhooks.h, never by name: the block it comes in holds their contexts too.
 *
 * A block is whole pages from mmap, as a buffer is (core/buf.c), not malloc: the worker keeps
 * up to FREE_MAX of them for reuse and gives the rest back to the kernel at once, so a burst
 * of requests (10,000 connections that each sent one at the same moment) leaves no memory
 * behind once they are answered; malloc would keep the touched pages in its arena, some 3.4
 * KiB for every request the burst held at once. The free list absorbs the steady state, so
 * mmap and munmap run only when the load changes.
 *
 * How much to keep follows the requests begun lately. HTTP/2 streams end and begin in batches
 * of a connection's 100, so a steady load of 400 streams swings the exchanges (and buffers)
 * in use by hundreds from one loop turn to the next; past a fixed bound each swing would go
 * back to the kernel and come back, an munmap (a TLB shootdown) and page faults for each
 * exchange, half of the worker's time at 100 streams a connection. So every SPARES_TICK_MS
 * while requests begin, the worker's free lists are allowed as many exchanges as began in
 * the last two ticks or so far in the one under way (and SPARES_BUFS_PER buffers each),
 * never fewer than their fixed bounds; a free list never holds more than was once in use
 * together, so this only keeps what the load swings through. Once no request has begun for two
 * ticks the bounds fall back and what is beyond them is given back: a burst whose answers come
 * later than that after its requests gives its memory back as it drains, as before, and one
 * answered sooner within 0.2 s of its last request.
 *
 * What else a burst took lies in malloc's arena: the clients' records, and among them those of
 * the upstream connections opened for it and closed again as its answers came. Their freed
 * chunks lie between the records of the clients that stay, so the arena cannot shrink from its
 * top, and its free pages stay resident (on io_uring, whose accepts and connects interleave
 * differently, 2.2 MiB after 9,000 connections' requests at once). So once requests stop
 * beginning after more than FREE_MAX were under way together, the last of them to end hands
 * the arena's free pages back (malloc_trim): once a burst, never on a steady load's way, and
 * at most once a SPARES_TRIM_MS (a trim takes every arena's lock in turn, other workers' too):
 * a burst over sooner after the last trim is trimmed once that time is up.
 *
 * So a pointer to an exchange that outlives exchange_free() may meet an unmapped page. To
 * find one, build with -DACCELNET_EXCHANGE_POISON (make CFLAGS="-O1 -g
 * -DACCELNET_EXCHANGE_POISON" BUILD=build-poison): no block is kept or reused, and a freed one
 * stays mapped with no access, so the first touch after the end faults where it happens.
 */
#include "proxy/exchange.h"
#include "runtime/llm.h"
#include "core/clock.h"
#include "core/rand.h"
#include "proxy/admission.h"
#include "runtime/proxy_metric.h"
#include "proxy/xhooks.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FREE_MAX 128	    /* exchange blocks a worker keeps for reuse */
#define SPARES_TICK_MS 100  /* how often the bounds follow the requests begun */
#define SPARES_TRIM_MS 1000 /* a worker trims the heap at most this often (each arena locked) */
#define SPARES_BUFS_PER 4   /* buffers a request under way may hold (head, upstream, body) */

/* An exchange block's bytes: the hooks' block, in whole pages. */
static size_t block_bytes(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	return (xhooks_block_size() + page - 1) / page * page;
}

#ifdef ACCELNET_EXCHANGE_POISON
static const unsigned free_max = 0;
#else
static const unsigned free_max = FREE_MAX;
#endif

static void block_unmap(struct exchange *x)
{
#ifdef ACCELNET_EXCHANGE_POISON
	mprotect(x, block_bytes(), PROT_NONE); /* never reused: any touch faults */
#else
	munmap(x, block_bytes());
#endif
}

/* The worker's free buffers kept for <demand> requests begun lately. */
static void spares_keep_bufs(struct worker *w, uint32_t demand)
{
	uint64_t bufs = (uint64_t)demand * SPARES_BUFS_PER;
	buf_pool_keep(&w->bufs, bufs < UINT32_MAX ? (uint32_t)bufs : UINT32_MAX);
}

static void spares_tick(struct loop_timer *t);

/* The heap's free pages back to the kernel once a burst is over (see the top of this file);
 * one asked for within SPARES_TRIM_MS of the last waits for the tick at its end. */
static void spares_trim_heap(struct worker *w)
{
	struct worker_spares *sp = &w->spares;
	uint64_t now = loop_now(w->loop);
	if (sp->trimmed_ms && now < sp->trimmed_ms + SPARES_TRIM_MS) {
		/* bursts that end more often than that are a load: theirs are reused; but the
		 * last of them is trimmed once the time is up (spares_tick), or it stays */
		sp->trim_due = 1;
		if (!loop_timer_armed(&sp->timer)) {
			sp->timer.fn = spares_tick;
			loop_timer_set(w->loop, &sp->timer, sp->trimmed_ms + SPARES_TRIM_MS);
		}
		return;
	}
	log_debug("worker %u: heap trimmed after %u exchanges at once", w->id, sp->peak);
	sp->trimmed_ms = now;
	sp->trim_due = 0;
	sp->peak = (uint32_t)w->live_exchanges.count;
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}

/* Exchanges and buffers to keep for the requests begun in the last two ticks. */
static void spares_tick(struct loop_timer *t)
{
	struct worker *w = container_of(t, struct worker, spares.timer);
	struct worker_spares *sp = &w->spares;
	uint32_t demand = sp->starts > sp->starts_before ? sp->starts : sp->starts_before;
	sp->starts_before = sp->starts;
	sp->starts = 0;
	sp->exchanges = free_max ? demand : 0;
	unsigned bound = sp->exchanges > free_max ? sp->exchanges : free_max;
	while (w->free_exchanges.count > bound)
		block_unmap(
		    container_of(list_pop_front(&w->free_exchanges), struct exchange, link));
	spares_keep_bufs(w, demand);
	if (demand)
		loop_timer_set(w->loop, t, loop_now(w->loop) + SPARES_TICK_MS);
	else if (sp->peak > FREE_MAX) {
		sp->trim_due = 1; /* now, or when the last of them ends */
		if (!w->live_exchanges.count)
			spares_trim_heap(w);
	}
}

/* The tick under way counts as its requests begin: a load that starts from idle (or grows)
 * keeps what it swings through from its first loop turns on, not only after its first tick.
 * Without this, the 400 streams of h2load's first 100 ms mapped some 1,000 exchanges and
 * buffers and unmapped 800 of them again (a TLB shootdown each, then the page faults of
 * mapping them anew) before the first tick raised the bounds. */
static void spares_grow(struct worker *w)
{
	w->spares.exchanges = w->spares.starts;
	spares_keep_bufs(w, w->spares.starts);
}

struct exchange *exchange_new(struct worker *w, void *conn, const struct exchange_codec_ops *codec,
			      const struct http_head *h, const struct exchange_peer *peer)
{
	struct list_node *n = list_pop_front(&w->free_exchanges);
	struct worker_spares *sp = &w->spares;
	if (sp->starts++ == 0) {
		/* (armed later than a tick from now: a trim waits; the load's tick comes first) */
		uint64_t tick = loop_now(w->loop) + SPARES_TICK_MS;
		if (!loop_timer_armed(&sp->timer) || sp->timer.deadline_ms > tick) {
			sp->timer.fn = spares_tick;
			loop_timer_set(w->loop, &sp->timer, tick);
		}
	}
	if (free_max && sp->starts > sp->exchanges)
		spares_grow(w);
	struct exchange *x;
	if (n) {
		x = container_of(n, struct exchange, link);
	} else {
		void *p = mmap(NULL, block_bytes(), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		x = p;
	}
	/* the exchange, then the always features' contexts (the others are zeroed as they
	 * join: xhooks.h): two calls, as one of this size goes to rep stosb, which costs a
	 * request some 2,000 counted instructions */
	memset(x, 0, sizeof(*x));
	xhooks_start(x);
	x->w = w;
	x->conn = conn;
	x->codec = codec;
	x->head = h;
	x->peer = *peer;
	x->att = &x->tries[0];
	x->wt.owner = &w->inbox;
	x->meth = h->meth;
	x->protocol = codec->http2 ? CLIENT_PROTO_HTTP2
		      : h->minor   ? CLIENT_PROTO_HTTP11
				   : CLIENT_PROTO_HTTP10;
	metrics_add(metrics_shard_self(w->rt->metrics), PM_PROCESS_CLIENT_REQUESTS, x->protocol, 1);
	http_body_init(&x->req, h->framing, h->content_length);
	x->log.start_ns = clock_now_ns();
	x->log.start_ms = loop_now(w->loop);
	x->log.head_len = h->head_len;
	reqnames_make(&x->names, w, h, peer->trusted);
	xhooks_head(x, h);
	list_push_back(&w->live_exchanges, &x->link);
	if (w->live_exchanges.count > sp->peak)
		sp->peak = (uint32_t)w->live_exchanges.count;
	return x;
}

void exchange_note_queue_end(struct exchange *x, uint64_t now_ms)
{
	if (x->log.queue_noted)
		return;
	x->log.queue_noted = 1;
	x->log.queue_us = x->wt.queued_ms && now_ms > x->wt.queued_ms
			      ? exchange_us((now_ms - x->wt.queued_ms) * 1000)
			      : 0;
}

uint32_t exchange_queue_us(const struct exchange *x, uint64_t now_ms)
{
	if (x->log.queue_noted)
		return x->log.queue_us;
	if (x->wt.state != W_IDLE && x->wt.queued_ms)
		return exchange_us(now_ms > x->wt.queued_ms ? (now_ms - x->wt.queued_ms) * 1000
							    : 0);
	return UINT32_MAX;
}

void exchange_drop_hedge(struct exchange *x)
{
	if (!x->hedge)
		return;
	attempt_end(x->hedge, x->w, 0);
	x->hedge = NULL;
}

/* balance: llm: the current attempt's work on its backend is done, before its slot goes. */
static void slot_work_done(struct exchange *x)
{
	struct attempt *a = x->att;
	if (!a->be || a->slot_freed || !a->be->llm || !x->wt.work)
		return;
	if (x->wt.blocks) /* no answer came (its head lets the blocks go): none cached */
		llm_unpicked(a->be->llm, x->wt.blocks, x->wt.nblocks, x->wt.missed, x->wt.ticks);
	llm_done(a->be->llm, x->wt.work);
	x->wt.work = 0;
	if (a->first_ns > a->sent_ns) /* its first token came (up_h1.c) */
		llm_observe_decode(a->be->llm, (clock_now_ns() - a->first_ns) / 1000);
}

void exchange_drop_upstream(struct exchange *x)
{
	if (!x->hedge && !x->att->be && !x->att->up)
		return; /* ended already (client_finish): nothing held */
	exchange_drop_hedge(x);
	slot_work_done(x);
	attempt_end(x->att, x->w, 0);
}

int exchange_take_upstream(struct exchange *x, struct upconn **up, struct pool_rt **pool,
			   struct backend **be)
{
	struct attempt *a = x->att;
	if (!a->up || !a->be || a->slot_freed || a->up->h2s || a->up->failed || a->up->read_end ||
	    a->up->connecting)
		return -1;
	exchange_drop_hedge(x);
	slot_work_done(x);
	net_conn_read_stop(&a->up->conn);
	*up = a->up;
	*pool = a->pool;
	*be = a->be;
	a->up = NULL;
	a->be = NULL;
	a->reusable = 0;
	return 0;
}

void exchange_free_slot(struct exchange *x)
{
	if (!x->att->be || x->att->slot_freed)
		return; /* given back already (the response was whole) */
	slot_work_done(x);
	attempt_free_slot(x->att, x->w);
}

void exchange_free(struct exchange *x)
{
	struct worker *w = x->w;
	xhooks_end(x, clock_now_ns()); /* one clock read for the figures, log and limits */
	if (x->wt.state != W_IDLE)
		admission_withdraw(x->pool, &x->wt, loop_now(w->loop), rand_next(&w->rng),
				   WITHDRAW_GONE);
	exchange_drop_upstream(x);
	buf_put(&w->bufs, x->uphead);
	x->uphead = NULL;
	reqbody_end(&x->reqbody, w);
	list_del(&w->live_exchanges, &x->link);
	if (w->spares.trim_due && !w->live_exchanges.count)
		spares_trim_heap(w);
	if (w->free_exchanges.count >= free_max && w->free_exchanges.count >= w->spares.exchanges)
		block_unmap(x);
	else
		list_push_front(&w->free_exchanges, &x->link);
}

void exchange_response_started(struct exchange *x)
{
	x->resp_head = 1;
	exchange_drop_hedge(x); /* the first answer wins; the other backend stops working on it */
	buf_put(&x->w->bufs, x->uphead); /* no retry once a response has started */
	x->uphead = NULL;
}

void exchange_drain_free(struct worker *w)
{
	struct list_node *n;
	if (loop_timer_armed(&w->spares.timer))
		loop_timer_stop(w->loop, &w->spares.timer);
	while ((n = list_pop_front(&w->free_exchanges)))
		block_unmap(container_of(n, struct exchange, link));
	llm_spares_free(&w->llm_spares);
}
