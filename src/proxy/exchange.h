/*
 * exchange.h - one request and its response, as the proxy's policy sees it.
 *
 * A client connection's codec (today HTTP/1: h1.c) parses a request head and hands the
 * proxy an exchange. The exchange then passes the stages of stages.h in order -- route,
 * classify, forward, body, admit, relay -- and ends in exactly one of: finished (the
 * response relayed), replied (the proxy answered itself) or aborted (the connection cut).
 * What needs the client's bytes (reading the body, relaying, answering) the exchange asks of
 * its codec through struct exchange_codec_ops: the stages, admission, dispatch, retries,
 * spillover, hedging and deadlines work on the exchange and its attempts alone, and an
 * HTTP/2 stream can become an exchange with a codec of its own. The relay is the codec's:
 * today relay.c moves HTTP/1 bytes to and from the client, and the HTTP/1 upstream half
 * (up_h1.h), shared by any codec, writes the request upstream and reads the response, handing
 * the client side what it must pass on through the codec's operations (interim, upgrade,
 * response_head). The codec keeps its own per-exchange state (framing, pacing: pace.h).
 *
 * The upstream side is HTTP/1 over an upstream connection (upstream.h), or over a stream of
 * an HTTP/2 connection that stands for one (up_h2.h): the request
 * head rewritten for the backend is kept in uphead until a response starts, so a retry or a
 * hedge can resend it. Each try at a backend is an attempt (attempt.h: the slot, the
 * connection, the clocks); the exchange points to its current one (att) and, while hedging,
 * to the copy (hedge), both kept in its own block.
 *
 * Ownership: an exchange belongs to the connection that carries it (conn, opaque here); it
 * holds at most one backend slot and upstream connection, its current attempt's (and, while
 * hedging, a second). A connection may carry several exchanges in the type model; HTTP/1
 * carries one at a time.
 * Exchanges come from a per-worker free list, never malloc'd per request once warm; while in
 * use each is on its worker's list of live exchanges, oldest first (what /debug/requests
 * shows: debugreq.h).
 *
 * Features: the response cache, the access log, the tallies, the token limits and
 * /debug/requests keep their state in contexts of their own, laid out behind the exchange
 * in the same block, and hear of its life through the hook lists of xhooks.h (head, request
 * body, response head, response body, response done, end). The exchange walks those lists;
 * it calls no feature by name and knows none of their types.
 *
 * What it holds comes in groups, each with its owner: the client as its codec knows it
 * (peer: the codec fills it at exchange_new(), the guard adds the identity); its names (names:
 * one request id and one trace context, made in exchange_new(), a trusted client's believed:
 * reqnames.h); what is known of its request body and who asked for it (reqbody: reqbody.h);
 * the details of the proxy's own answer (answer); its attempts (attempt.h); its clocks as the
 * log reads them (log); the features' contexts (xhooks.h). docs/layout.md has the table.
 */
#ifndef ACCELNET_PROXY_EXCHANGE_H
#define ACCELNET_PROXY_EXCHANGE_H

#include "core/buf.h"
#include "core/list.h"
#include "http/body.h"
#include "http/jsonview.h"
#include "http/parse.h"
#include "http/rewrite.h"
#include "http/traceparent.h"
#include "runtime/queue.h"
#include "runtime/pool.h"
#include "proxy/attempt.h"
#include "proxy/reqbody.h"
#include "proxy/reqnames.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"

#include <stdint.h>

/* What the caller of a step does next. */
enum run {
	RUN_STAY,  /* wait for an event */
	RUN_AGAIN, /* the state changed: run again */
	RUN_GONE,  /* the connection is gone: touch nothing */
};

/* Why an upstream attempt failed. */
enum up_failure {
	UP_CONNECT,	    /* the connection could not be established */
	UP_CONNECT_TIMEOUT, /* ... within timeouts.connect_ms */
	UP_TLS,		    /* ... its TLS handshake failed (pools.tls) */
	UP_RESET,	    /* it closed or failed before the response head */
	UP_TIMEOUT,	    /* no response head within timeouts.first_byte_ms */
	UP_BAD,		    /* the response head was malformed */
	UP_INTERIM,	    /* too many interim (1xx) responses */
	UP_LOCAL,	    /* our own shortage (descriptors, buffers): not the backend's */
};

struct exchange;
struct xpace;

/* What an exchange asks of the codec of the connection that carries it. */
struct exchange_codec_ops {
	/* Answer the client with the proxy's own response and end the exchange; <keep>:
	 * the connection may stay open (the codec may still close it). */
	enum run (*reply)(struct exchange *x, int status, const char *detail, int keep);
	/* The response can no longer be completed: cut the connection. */
	enum run (*abort)(struct exchange *x, const char *why);
	/* The head stages are done: the head leaves the input; the body may flow. */
	enum run (*head_done)(struct exchange *x);
	/* Read the request body before admission (the stage "body" decided so: pace.h). */
	enum run (*await_body)(struct exchange *x);
	/*
	 * Before the route (the stage "model"): the start of the request body in hand, in
	 * *body[0..*len), read without waiting from what has arrived behind the head ("100
	 * Continue" answered first when the client waits for it); *all: no more will come
	 * within <max> bytes (the body is complete, <max> bytes are in, or no more fits).
	 * Returns RUN_AGAIN with x->head valid again (the codec reads it anew: its bytes may
	 * have moved), or ends the exchange. A stage that wants more sets x->head to NULL and
	 * returns RUN_STAY; the codec runs it again when more has come.
	 */
	enum run (*peek_body)(struct exchange *x, size_t max, const char **body, size_t *len,
			      int *all);
	/* Answer with the proxy's own <status> and JSON body json[0..len) (GET /v1/models)
	 * and end the exchange, as reply does. */
	enum run (*reply_json)(struct exchange *x, int status, const char *json, size_t len);
	/* Move bytes between the client, the upstream connection and back. */
	enum run (*relay)(struct exchange *x);
	/* The transport read response bytes (or the end) for the upstream half on the upstream
	 * connection's own readiness (up_h1.h): move them on to the client as relay does, and
	 * carry the connection on from what that led to (x may end meanwhile). */
	void (*respond)(struct exchange *x);
	/* Something outside changed (a slot granted, the upstream ready): run connection
	 * <conn> (x->conn: the exchange may have ended meanwhile). */
	void (*wake)(void *conn);
	/* routes.sse_heartbeat_ms came: show the waiting streaming client some life. */
	void (*heartbeat)(struct exchange *x);
	/* Is the proxy holding the request body back (its buffers full)? */
	int (*body_held)(const struct exchange *x);
	/* The upstream half (up_h1.h) read an interim (1xx) response head <h> of <len> bytes,
	 * already taken off the upstream input (its bytes stay readable until this returns):
	 * pass it on as the client's protocol allows, or fail over when there were too many. */
	enum run (*interim)(struct exchange *x, const struct http_head *h, size_t len);
	/* ... a 101 to a handshake the route tunnels, still in the input: become a tunnel, or
	 * fail over. */
	enum run (*upgrade)(struct exchange *x, const struct http_head *h, size_t len);
	/* ... the final response head, taken off the input as an interim's, the hooks told:
	 * queue it for the client and mark the response started (exchange_response_started),
	 * or end the exchange. */
	enum run (*response_head)(struct exchange *x, const struct http_head *h, size_t len);
	/* Answer from the cache's object (caching.h); RUN_AGAIN without one when
	 * it cannot (a fill that failed): the exchange goes on to the backend. */
	enum run (*serve)(struct exchange *x);
	/* Is <x> still the exchange under way on <conn>? Compares pointers only, so it may
	 * be asked after <x> ended (exchange_goes_on()). */
	int (*live)(void *conn, const struct exchange *x);
	/* Its requests came over HTTP/2 (else HTTP/1.x, as their heads say). */
	int http2;
};

/*
 * <r> came back from a call on <x> that may have answered it (a stage's refusal through
 * exchange_reply(), a probe's answer): does <x> go on? An answer ends the exchange and still
 * returns RUN_AGAIN, so that the connection goes on to write it: the exchange's block is then
 * gone (given back to the kernel past the worker's free list: exchange.c), and the caller
 * may touch nothing of it. <conn> and <codec> are x->conn and x->codec, kept before the call.
 */
static inline int exchange_goes_on(enum run r, void *conn, const struct exchange_codec_ops *codec,
				   const struct exchange *x)
{
	return r == RUN_AGAIN && codec->live(conn, x);
}

/*
 * An exchange's clocks and what the client got, as the access log, X-Accelnet-Timing, the
 * tallies and /debug/requests read them: the request head was read, the last attempt was
 * dispatched, its connection was ready, the response head came.
 */
struct exchange_log {
	uint64_t start_ns, dispatch_ns, conn_ns, ttfb_ns;
	uint64_t start_ms;  /* start_ns on the loop's clock */
	uint64_t bytes_out; /* of the proxy's own answer */
	uint32_t queue_us, head_len;
	int status;		       /* the proxy's own answer, if it gave one */
	unsigned queue_noted : 1;      /* queue_us holds its wait for a slot, which has ended */
	const struct backend *backend; /* of the last attempt */
};

/*
 * The client, as the codec that carries the exchange knows it: handed to exchange_new() and
 * kept as it was, but for the identity, which the guard stage (routes.auth) proves later. The
 * stages read it to route (SNI), classify (the tenant), limit, rewrite the head and log.
 */
struct exchange_peer {
	const char *ip;
	uint64_t key;			 /* tenant and hash key: classify_client_key() */
	unsigned trusted : 1;		 /* in trusted_proxies: its names are believed */
	unsigned over_tls : 1;		 /* the client's connection is TLS */
	const struct net_tls_facts *tls; /* its handshake's facts (exchange_tls()), or NULL */
	const struct conf_tls *tls_conf; /* its listener's tls: section, or NULL */
	const char *identity; /* the tenant routes.auth authenticated (quota.h keeps it), or NULL */
};

/* What the proxy's own answer (exchange_reply()) says beyond its status and detail, as the
 * stage that refuses the request sets it and the codec writes it (rewrite_error()). */
struct exchange_answer {
	const char *code;	/* the "code" of the proxy's next OpenAI error, or NULL */
	const char *param;	/* ... its "param" (the request's field at fault), or NULL */
	unsigned retry_after_s; /* a 429's or 503's Retry-After */
};

struct exchange {
	struct list_node link; /* on w->live_exchanges while in use, w->free_exchanges after */
	struct worker *w;
	void *conn; /* the connection that carries it, for its codec */
	const struct exchange_codec_ops *codec;
	struct xpace *pace;	      /* its pacing marks, kept by the codec (pace.h) */
	unsigned stage;		      /* index into the stage list (stages.h) */
	const struct http_head *head; /* the parsed request head: during the head stages only */

	struct exchange_peer peer;     /* the client (exchange_new(): from its codec) */
	struct reqnames names;	       /* its request id and trace context (reqnames.h) */
	struct reqbody reqbody;	       /* what is known of its body, and who asked (reqbody.h) */
	struct exchange_answer answer; /* what the proxy's own answer says beyond its status */

	enum http_method meth;
	unsigned llm_wait_over : 1; /* balance: llm: it waited max_wait_ms for its home */
	unsigned spilled : 1;	    /* moved to the route's spillover pool */
	unsigned hedged : 1;	    /* a copy went (or was tried) to a second backend */
	unsigned tunnel : 1;	    /* a WebSocket handshake its route tunnels (tunnel.h) */
	unsigned grpc_web : 1;	    /* gRPC-Web its route turns into gRPC (routes.grpc_web) */
	uint8_t protocol;	    /* what the client spoke (enum client_proto) */
	uint64_t last_ms;	    /* last progress */
	uint64_t until_ms; /* the client's own deadline (grpc-timeout), loop's clock; 0: none */
	struct waiter wt;  /* waiting in the pool's queue for a slot */
	const struct conf_route *route;
	struct pool_rt *pool;
	/* its tries at a backend (attempt.h): the current one, and while hedging a copy of the
	 * request on a second backend until one answers; both live in tries[] */
	struct attempt *att, *hedge;
	struct attempt tries[2];
	uint64_t last_read_ns; /* the previous read of a streamed response body */
	/* the rewritten request head; kept until a response starts, so a retry can resend it */
	struct buf *uphead;
	struct http_body req; /* request body: client -> codec's input -> backend */
	/* response: backend -> up->in -> client */
	unsigned resp_head : 1; /* the response head came: the response has started */
	int status;
	struct http_body resp;
	/* a resp_body hook (xhooks.h) asks that the response end before the bytes it saw reach
	 * the client (a tenant's budget spent: spend.h): why, for the log */
	const char *cut_why;
	/* the codec writes the body from what a feature keeps (xhooks_keeper()), not up->in */
	struct {
		uint64_t pos;	      /* kept bytes written to the client */
		uint64_t chunk_left;  /* ... of the chunk of our own being written (chunked) */
		unsigned on : 1;      /* the offer was taken */
		unsigned chunked : 1; /* the client's head says chunked: chunks of our own */
		unsigned raw : 1;     /* the feature stopped: the rest goes from up->in */
		unsigned ended : 1;   /* the last chunk is queued */
		unsigned done : 1;    /* the whole body is queued */
	} feed;

	unsigned relayed : 1; /* the response went out whole */
	/* the backend sent nothing within timeouts.between_bytes_ms (nor did the client take any):
	 * its connection is not handed on to finish a fill (caching.c, fill_go_on) */
	unsigned up_stalled : 1;
	struct exchange_log log;
	/* the features' contexts follow the struct, in the same block (xhooks.h) */
};

/* What the client's TLS handshake agreed -- version, cipher, SNI, the verified client
 * certificate's subject, SAN and CN (net/tls_listen.h) -- for routes, headers and logs; NULL
 * when the client came in plain. Lives as long as the exchange. */
static inline const struct net_tls_facts *exchange_tls(const struct exchange *x)
{
	return x->peer.tls;
}

/*
 * A new exchange of <w> for the request head <h>, carried by <conn> whose codec is <codec>,
 * from the client <peer> (copied); NULL without memory. A trusted peer's request id and trace
 * context are believed (else new ones are made: reqnames.h).
 */
struct exchange *exchange_new(struct worker *w, void *conn, const struct exchange_codec_ops *codec,
			      const struct http_head *h, const struct exchange_peer *peer);
/*
 * Durations as the access log, X-Accelnet-Timing and /debug/requests keep them: microseconds
 * in 32 bits, UINT32_MAX for "did not happen (yet)", so at most UINT32_MAX - 1 (71 minutes and
 * a half): a longer one shows as that, never wrapped round to a short one.
 */
static inline uint32_t exchange_us(uint64_t us)
{
	return us > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)us;
}
static inline uint32_t exchange_us_between(uint64_t from_ns, uint64_t to_ns)
{
	if (!from_ns || !to_ns)
		return UINT32_MAX;
	return exchange_us(to_ns > from_ns ? (to_ns - from_ns) / 1000 : 0);
}
/* Its wait for a slot has ended at <now_ms>, granted (at dispatch: 0 when one was free) or
 * given up (queue.timeout_ms): kept, the first time only. */
void exchange_note_queue_end(struct exchange *x, uint64_t now_ms);
/* That wait; so far while it still waits; UINT32_MAX while it has not reached a pool. */
uint32_t exchange_queue_us(const struct exchange *x, uint64_t now_ms);
/* Back to the worker's free list: the features' end hooks run first (xhooks.h, with one
 * clock read), then everything it holds (queue place, slots, upstream connections, head
 * buffer) is let go. */
void exchange_free(struct exchange *x);

/* The worker ends: free the exchanges kept for reuse. */
void exchange_drain_free(struct worker *w);

/* End its attempts: the backend slots and upstream connections let go (closed, never
 * reused). The current attempt keeps its retry facts. */
void exchange_drop_upstream(struct exchange *x);
/*
 * A feature goes on with the response under way without the exchange (proxy/refresh.h: a
 * cache fill whose client left): the current attempt's HTTP/1 connection to the backend
 * (its reads stopped, the bytes in its input with it), its pool and the slot it holds are
 * the caller's from now on (the slot to give back with admission_release); the exchange
 * holds none. 0, or -1 when there is nothing to take (no connection, an HTTP/2 backend's
 * stream, the slot given back, the connection failed or at its end).
 */
int exchange_take_upstream(struct exchange *x, struct upconn **up, struct pool_rt **pool,
			   struct backend **be);
/* End the hedged copy of the request, if any: closed, its slot given back. */
void exchange_drop_hedge(struct exchange *x);

/* The response has started: nothing to resend, no hedged copy needed any more. */
void exchange_response_started(struct exchange *x);

/*
 * The backend has given its whole response (it is in the proxy's buffers, on its way to the
 * client): its slot goes back now (attempt_free_slot), so a client that reads slowly holds no
 * accelerator, and balance: llm hears its work there is done. x->att->be stays, for the
 * counts; the upstream connection waits until the client has it all.
 */
void exchange_free_slot(struct exchange *x);
/* Count a response of <status> (0: aborted) against the backend that gave it, if any. */
static inline void exchange_count_response(const struct exchange *x, int status)
{
	attempt_count_response(x->att, status);
}

/* The proxy's own answer, or a cut connection, through the codec. */
static inline enum run exchange_reply(struct exchange *x, int status, const char *detail, int keep)
{
	return x->codec->reply(x, status, detail, keep);
}

static inline enum run exchange_abort(struct exchange *x, const char *why)
{
	return x->codec->abort(x, why);
}

#endif
