/*
 * attempt.h - one try at a backend: its slot, its upstream connection and its clocks.
 *
 * An exchange (exchange.h) asks a pool for a backend; what that one try holds is an attempt.
 * Its life:
 *
 *   begin      a backend was picked and its slot is held: attempt_begin(), at dispatch (the
 *              slot free at once, or granted from the pool's queue)
 *   connect    an idle keep-alive connection to it is taken, or a new one opened (for an
 *              HTTP/2 backend, a new stream on one of its connections: up_h2.h):
 *              attempt_connect(); if this process is out of descriptors the attempt keeps the
 *              slot and looks again (local_wait, bounded by timeouts.connect_ms)
 *   sent       the request goes out on <up>; head_off counts the bytes of the request head
 *              written (the head itself is the owner's: an exchange's rewritten request)
 *   response   the backend's answer starts; nothing is resent from here on
 *   slot freed the whole response is in the proxy's buffers: attempt_free_slot() gives the
 *              slot back early, so a client that reads slowly holds no accelerator (be stays,
 *              for the counts)
 *   end        attempt_end(): the connection goes back to the idle list or is closed, and the
 *              slot, if still held, is given back
 *
 * A retry ends the attempt and begins another in its place, marked retried (an exchange gets
 * one); a hedge is a second attempt that runs beside the first until one answers, and the one
 * that answers first becomes the exchange's current attempt. Under disaggregation (pd.h) a
 * prefill attempt of the pd feature's own comes first, on the prefill pool, and the current
 * attempt decodes. Spillover moves the exchange to another pool between attempts.
 *
 * Ownership: the attempt belongs to its owner (an exchange holds two in its own block, the
 * current one and a hedge, so none is allocated per request); the owner registers itself on
 * the connection for its readiness events. An attempt knows no HTTP head and no exchange: a
 * connection without one (a tunnel, later L4) can use it as it is. Dispatch, retry, hedging,
 * spillover and deadlines (dispatch.h, retry.h, hedge.h, spill.h, deadline.h) decide what
 * happens to attempts; this file only keeps their bookkeeping true.
 */
#ifndef ACCELNET_PROXY_ATTEMPT_H
#define ACCELNET_PROXY_ATTEMPT_H

#include "runtime/pool.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"

#include <stddef.h>
#include <stdint.h>

struct attempt {
	struct pool_rt *pool;	   /* the pool whose slot it holds */
	struct backend *be;	   /* the backend picked; NULL: not begun, or ended */
	struct upconn *up;	   /* the connection to be, or NULL */
	uint64_t connect_ms;	   /* when its connect began (the loop's clock) */
	uint64_t sent_ns;	   /* when the request started upstream (connect included) */
	uint64_t local_wait_since; /* local_wait began (it ends after timeouts.connect_ms) */
	size_t head_off;	   /* bytes of the request head written on up */
	int retry_status;	   /* a retry: what to answer if it finds no backend (502, 504) */
	uint32_t ttft_blocks;	   /* balance: llm, an event stream: its first token's sample, */
	uint32_t ttft_missed;	   /* ... due when its first body bytes come (0 blocks: none) */
	uint64_t first_ns;	/* when its first token came: the head, or a stream's first bytes */
	unsigned retried : 1;	/* it is its exchange's retry: there is no other */
	unsigned retry_tls : 1; /* ... of an attempt whose TLS handshake failed */
	unsigned local_wait : 1; /* its connect found no free descriptor: it looks again */
	unsigned up_reused : 1;	 /* up is a kept-alive connection that served before */
	unsigned reusable : 1;	 /* the response lets up carry another request */
	unsigned slot_freed : 1; /* be's slot went back before the end (the response is in) */
	unsigned resp_whole : 1; /* its response is in whole and its owner has seen that */
};

/*
 * Begin <a> on <be>, a slot of which it now holds (picked or granted in <pool>). What was
 * held before must have been let go (attempt_end: asserted); the retry facts (retried,
 * retry_status, retry_tls) stay as the one who begins a retry set them.
 */
void attempt_begin(struct attempt *a, struct pool_rt *pool, struct backend *be);

/*
 * Take an idle connection to a->be or open one; <owner>'s <on_event> hears of its readiness
 * events. 0, the clocks started and nothing of the head sent yet; or -errno, the connection
 * failed at once (the slot is still held).
 */
int attempt_connect(struct attempt *a, struct worker *w, void *owner,
		    void (*on_event)(void *owner));

/* The whole response is in: the slot goes back now (once). a->be stays, for the counts. */
void attempt_free_slot(struct attempt *a, struct worker *w);

/* Count a response of <status> (0: aborted) against the backend that gave it, if any. */
void attempt_count_response(const struct attempt *a, int status);

/*
 * End <a>: its connection goes back to the idle list when <reuse> (the exchange on it ended
 * cleanly) and nothing unread is left in it, else it is closed; the slot, if still held, is
 * given back. Nothing is held after (be and up NULL); the clocks and retry facts stay.
 */
void attempt_end(struct attempt *a, struct worker *w, int reuse);

#endif
