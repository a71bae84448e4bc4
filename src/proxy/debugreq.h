/*
 * debugreq.h - looking inside the running proxy: GET /debug/requests on the admin endpoint
 * (the exchanges in flight and the slowest recent ones, with their breakdown) and the
 * per-request X-Accelnet-Timing header.
 *
 * Each worker owns its exchanges and no other thread reads them. The admin endpoint (main
 * thread) asks instead: debugreq_ask() bumps each worker's <want> and wakes its loop; the
 * worker, in its wake hook (worker_ops.peek: debugreq_peek), copies what it has -- its
 * oldest DEBUGREQ_INFLIGHT live exchanges, how many it has, and its slowest recent ones --
 * into its own fixed snapshot and publishes it by storing <done> = want (release). The admin
 * reads a worker's snapshot only while done == want (acquire); the worker writes it again
 * only after the next ask, and only the admin thread asks. A worker that does not answer
 * within the admin's wait (a stuck loop) is listed as silent rather than waited for.
 *
 * An exchange of a balance: llm pool also shows the decision that chose its backend and what
 * happened (llm_explain.h): the candidates' estimates, the reason, predicted against
 * measured time to first token and hit blocks.
 *
 * Slowest recent: each worker keeps the DEBUGREQ_SLOW slowest exchanges (answered, relayed
 * or cut; ranked by total time on the loop's clock) of the current minute and of the one
 * before, so what is shown ended one to two minutes ago at most. The ending exchange is
 * compared with the least of them (one comparison, the usual case) and copied only when
 * slower. Nothing here allocates per request, locks, or writes memory another worker writes.
 */
#ifndef ACCELNET_PROXY_DEBUGREQ_H
#define ACCELNET_PROXY_DEBUGREQ_H

#include "core/loop.h"
#include "http/rewrite.h"
#include "http/traceparent.h"
#include "proxy/exchange.h"
#include "proxy/llm_explain.h"
#include "proxy/worker.h"
#include "proxy/xhooks.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DEBUGREQ_INFLIGHT 32 /* per worker: its oldest exchanges in flight */
#define DEBUGREQ_SLOW 8	     /* per worker and minute: its slowest ended exchanges */
#define DEBUGREQ_WINDOW_MS 60000
#define DEBUGREQ_SHOW_INFLIGHT 64 /* in the answer, all workers together: the oldest */
#define DEBUGREQ_SHOW_SLOW 16	  /* ... the slowest */
#define DEBUGREQ_PATH_MAX 127

/* One exchange as /debug/requests shows it. Strings NUL-terminated, cut to fit. */
struct debugreq_rec {
	char reqid[REQUEST_ID_MAX + 1];
	char trace_id[TRACE_ID_HEX + 1];
	char client[48];
	char method[16];
	const char *protocol;		  /* HTTP/1.0, HTTP/1.1, HTTP/2 (a literal) */
	char path[DEBUGREQ_PATH_MAX + 1]; /* "" unless the access log copied it */
	char pool[48];
	char backend[72];
	char prefill_backend[72];
	const char *state; /* a string literal (in flight), or NULL (ended) */
	int route;	   /* index into routes, -1: none yet */
	int status;	   /* ended: what the client got, 0 cut */
	unsigned worker;
	uint8_t path_cut;
	uint64_t bytes_in, bytes_out;
	/* in ms * 1000; UINT32_MAX: did not happen (yet) */
	uint32_t queue_us, connect_us, ttfb_us;
	uint32_t total_us;	     /* in flight: its age; ended: its whole time */
	uint64_t ended_ms;	     /* ended: on the worker's loop clock */
	uint64_t ago_ms;	     /* ended: how long before the snapshot */
	struct llm_explain_view llm; /* balance: llm's decision, when llm.has */
};

/* What one worker shows; cache-line aligned so that two workers' words never share a line. */
struct debugreq_worker {
	_Alignas(64) atomic_uint_fast64_t want; /* asks: written by the admin thread */
	_Alignas(64) atomic_uint_fast64_t done; /* the ask last answered: by the worker */
	struct loop *loop;			/* the worker's, to wake it */
	/* the worker's own: the slowest of this window [0] and of the one before [1] */
	uint64_t window_ms;
	unsigned nslow[2];
	uint64_t slow_key[DEBUGREQ_SLOW]; /* window 0's ranking keys (ms), and their least */
	uint64_t slow_min;
	unsigned slow_min_at;
	struct debugreq_rec slow[2][DEBUGREQ_SLOW];
	/* the snapshot: the worker's while done != want, the admin's while done == want */
	unsigned nlive, ninflight, nslowsnap;
	struct debugreq_rec inflight[DEBUGREQ_INFLIGHT];
	struct debugreq_rec slowsnap[2 * DEBUGREQ_SLOW];
};

struct debugreq_board {
	unsigned nworkers;
	struct debugreq_worker *w; /* one per worker */
};

/* A board for <nworkers> workers (their loops set by the caller); NULL without memory. */
struct debugreq_board *debugreq_board_new(unsigned nworkers);
void debugreq_board_free(struct debugreq_board *b);

/* Its end hook (xhooks.h): debugreq_note_end(). */
extern const struct xhook debugreq_hook;
/* An exchange ends: offered to the worker's slowest recent ones. */
void debugreq_note_end(const struct exchange *x);

/* Worker side: answer an ask, if one is pending (worker_ops.peek). */
void debugreq_peek(struct worker *w);

/*
 * X-Accelnet-Timing for <x>, in Server-Timing syntax (milliseconds): "queue;dur=N" (wait for
 * a slot), "connect;dur=N" (the last attempt's connection), "backend;dur=N" (connection
 * ready to response head), "ttfb;dur=N" (request head to response head), each only when it
 * happened; and with <whole> (the proxy's own answer, complete now) "total;dur=N". Returns
 * the length written into out[0..cap), or -1.
 */
int debugreq_timing(const struct exchange *x, int whole, char *out, size_t cap);

/* Admin side (one thread): ask every worker for a snapshot; have all answered? */
void debugreq_ask(struct debugreq_board *b);
int debugreq_answered(const struct debugreq_board *b);
/*
 * The /debug/requests document, from the workers that have answered (the others listed in
 * "silent"): at most DEBUGREQ_SHOW_INFLIGHT exchanges in flight, oldest first, and at most
 * DEBUGREQ_SHOW_SLOW slowest recent ones, slowest first. 0, or -ENOMEM.
 */
int debugreq_write(const struct debugreq_board *b, FILE *f);

#endif
