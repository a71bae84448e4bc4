/*
 * exchange.h - one request and its response, as the proxy's policy sees it.
 *
 * A client connection's codec (today HTTP/1: session.c) parses a request head and hands the
 * proxy an exchange. The exchange then passes the stages of stages.h in order -- route,
 * classify, forward, body, admit, relay -- and ends in exactly one of: finished (the
 * response relayed), replied (the proxy answered itself) or aborted (the connection cut).
 * What needs the client's bytes (reading the body, relaying, answering) the exchange asks of
 * its codec through struct exchange_codec_ops: the stages, admission, dispatch, retries,
 * spillover, hedging and deadlines work on the exchange alone, and an HTTP/2 stream can
 * become an exchange with a codec of its own. The relay is the codec's: today relay.c moves
 * HTTP/1 bytes between the client and an HTTP/1 upstream connection.
 *
 * The upstream side is always HTTP/1 over an upstream connection (upstream.h): the request
 * head rewritten for the backend is kept in uphead until a response starts, so a retry or a
 * hedge can resend it.
 *
 * Ownership: an exchange belongs to the connection that carries it (conn, opaque here); it
 * holds at most one backend slot and upstream connection (and, while hedging, a second). A
 * connection may carry several exchanges in the type model; HTTP/1 carries one at a time.
 * Exchanges come from a per-worker free list, never malloc'd per request once warm; while in
 * use each is on its worker's list of live exchanges, oldest first (what /debug/requests
 * shows: debugreq.h).
 *
 * Names: every exchange has one request id and one trace context (a W3C traceparent whose
 * parent-id is the proxy's own span for this hop), made in exchange_new(). A client in
 * trusted_proxies is believed: its well-formed X-Request-Id is kept and its valid traceparent
 * continued (same trace id, a new span id, its tracestate passed on). Any other client's are
 * ignored, so no client chooses the id its request is logged and forwarded under.
 */
#ifndef ACCELNET_PROXY_EXCHANGE_H
#define ACCELNET_PROXY_EXCHANGE_H

#include "core/buf.h"
#include "core/list.h"
#include "guard/limits.h"
#include "http/body.h"
#include "http/jsonview.h"
#include "http/parse.h"
#include "http/rewrite.h"
#include "http/traceparent.h"
#include "cache/fill.h"
#include "obs/accesslog.h"
#include "proxy/queue.h"
#include "proxy/runtime.h"
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

/* What an exchange asks of the codec of the connection that carries it. */
struct exchange_codec_ops {
	/* Answer the client with the proxy's own response and end the exchange; <keep>:
	 * the connection may stay open (the codec may still close it). */
	enum run (*reply)(struct exchange *x, int status, const char *detail, int keep);
	/* The response can no longer be completed: cut the connection. */
	enum run (*abort)(struct exchange *x, const char *why);
	/* The head stages are done: the head leaves the input; the body may flow. */
	enum run (*head_done)(struct exchange *x);
	/* Read the request body before admission (x->buffering). */
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
	/* Something outside changed (a slot granted, the upstream ready): run connection
	 * <conn> (x->conn: the exchange may have ended meanwhile). */
	void (*wake)(void *conn);
	/* routes.sse_heartbeat_ms came: show the waiting streaming client some life. */
	void (*heartbeat)(struct exchange *x);
	/* Is the proxy holding the request body back (its buffers full)? */
	int (*body_held)(const struct exchange *x);
	/* Answer from the cache object x->cobj (caching.h); RUN_AGAIN with x->cobj NULL when
	 * it cannot (a fill that failed): the exchange goes on to the backend. */
	enum run (*serve)(struct exchange *x);
};

struct exchange {
	struct list_node link; /* on w->live_exchanges while in use, w->free_exchanges after */
	struct worker *w;
	void *conn; /* the connection that carries it, for its codec */
	const struct exchange_codec_ops *codec;
	unsigned stage;		      /* index into the stage list (stages.h) */
	const struct http_head *head; /* the parsed request head: during the head stages only */

	/* the client, as the codec knows it */
	const char *client_ip;
	uint64_t client_key; /* tenant and hash key: classify_client_key() */
	unsigned client_trusted : 1;
	unsigned client_tls : 1;	 /* the client's connection is TLS */
	const struct net_tls_facts *tls; /* its handshake's facts (exchange_tls()), or NULL */
	const struct conf_tls *tls_conf; /* its listener's tls: section, or NULL */
	const char *identity; /* the tenant routes.auth authenticated (identity_buf), or NULL */
	char identity_buf[APIKEYS_TENANT_MAX + 1];
	unsigned retry_after_s;	 /* a 429's Retry-After */
	const char *limit_type;	 /* ... its OpenAI error type: "requests" or "tokens" (quota.c) */
	char limit_headers[160]; /* ... and its X-RateLimit-* lines (quota.c), or "" */
	struct limit_hold hold;	 /* what it holds of the route's limits (guard/limits.h) */
	struct usage_scan usage; /* the response's token usage, while tok_on (tally.c) */

	enum http_method meth;
	int minor; /* HTTP/1.<minor> of the request */
	char reqid[REQUEST_ID_MAX + 1];
	char traceparent[TRACEPARENT_LEN + 1]; /* sent upstream: the trace id, the proxy's span */
	unsigned pass_tracestate : 1;	       /* the client's traceparent was taken */
	unsigned want_timing : 1;	       /* a trusted client asked for X-Accelnet-Timing */
	unsigned queue_noted : 1; /* log_queue_us holds its wait for a slot, which has ended */
	unsigned req_close : 1, retried : 1, up_reused : 1;
	unsigned want_key : 1;	    /* the pool balances on the prompt key, read from the body */
	unsigned llm_wait_over : 1; /* balance: llm: it waited max_wait_ms for its home */
	unsigned want_model : 1; /* the pool's backends list models: read "model" from the body */
	unsigned model_read : 1; /* the body's "model" was looked for (wt.has_model: found) */
	unsigned peeked : 1;	 /* the body was read into before the route (stage "model") */
	unsigned want_view : 1;	 /* tokens_per_minute: the body's max_tokens must be read */
	unsigned view_read : 1;	 /* the whole body was read by the strict view (x->view) ... */
	unsigned view_ok : 1;	 /* ... and it is valid JSON (else x->view_why says why) */
	unsigned buffering : 1;	 /* reading the body before admission (await_body) */
	unsigned buf_wait : 1;	 /* ... and waiting for a body buffer to be free */
	unsigned local_wait : 1; /* its connect found no free descriptor: looks again */
	unsigned sse_body : 1;	 /* heartbeats if the body asks for a stream: not looked yet */
	unsigned spilled : 1;	 /* moved to the route's spillover pool */
	unsigned hedged : 1;	 /* a copy went (or was tried) to a second backend */
	unsigned sse_hb : 1;	 /* a streaming request on a route with heartbeats */
	unsigned early_head : 1; /* ... whose event-stream head the proxy has sent */
	unsigned wrap_tail : 1;	 /* a Content-Length body relayed as one chunk: end it */
	unsigned wrap_size : 1;	 /* ... whose chunk-size line went out */
	unsigned retry_tls : 1;	 /* the failed attempt was a TLS handshake: say so if none */
	unsigned tunnel : 1;	 /* a WebSocket handshake its route tunnels (tunnel.h) */
	int retry_status;	 /* what to answer if the retry finds no backend: 502 or 504 */
	const char *reply_code;	 /* the "code" of the proxy's next OpenAI error, or NULL */
	/* the strict view of the whole body (view_ok), read once, read by every stage */
	struct json_view view;
	const char *view_why;
	/* the body's "model", decoded (when wt.has_model; wt.model is its models_hash()) */
	char model[CONF_MODEL_MAX + 1];
	uint16_t model_len;
	unsigned interims;	/* interim (1xx) responses relayed ... */
	uint32_t interim_bytes; /* ... and their bytes */
	uint64_t body_start_ms; /* the request head was read: the body's clocks start */
	uint64_t rate_mark_ms, rate_mark_bytes; /* the current min_body_rate window began */
	uint64_t last_ms;			/* last progress */
	uint64_t local_wait_since; /* local_wait began (it ends after timeouts.connect_ms) */
	struct waiter wt;	   /* waiting in the pool's queue for a slot */
	uint64_t *llm_blocks; /* balance: llm: the prompt's blocks, lent by the worker (llm.h) */
	const struct conf_route *route;
	struct pool_rt *pool;
	struct backend *be;
	uint64_t sent_ns;      /* when the request started upstream (connect included) */
	uint64_t last_read_ns; /* the previous read of a streamed response body */
	/* hedging: a copy of the request on a second backend, until one answers */
	struct upconn *hedge;
	struct backend *hedge_be;
	size_t hedge_off; /* bytes of uphead sent on it */
	uint64_t hedge_sent_ns;
	uint64_t hb_next_ms; /* the next heartbeat */
	struct upconn *up;
	uint64_t connect_ms; /* when the current connect began */
	/* the rewritten request head; kept until a response starts, so a retry can resend it */
	struct buf *uphead;
	size_t uphead_off;
	struct http_body req; /* request body: client -> codec's input -> backend */
	/* response: backend -> up->in -> client */
	unsigned resp_head : 1, up_reusable : 1, client_keep : 1;
	unsigned slot_freed : 1;  /* the whole response is in: be's slot went back early */
	unsigned client_full : 1; /* the last write to the client left bytes unsent */
	uint64_t client_took_ms;  /* the client last took response bytes (timeouts.send_ms) */
	int status;
	struct http_body resp;

	/* the route's and tenant's figures (proxy/tally.c) */
	uint64_t tok_first_ns, tok_last_ns; /* the first and the last token event; 0: none */
	unsigned tok_on : 1;		    /* the response's tokens are counted (x->usage) */
	unsigned relayed : 1;		    /* the response went out whole */

	/* its clocks, for the access log, X-Accelnet-Timing and /debug/requests: the request
	 * head was read, the last attempt was dispatched, its connection was ready, the
	 * response head came */
	uint64_t log_start_ns, log_dispatch_ns, log_conn_ns, log_ttfb_ns, log_bytes_out;
	uint64_t start_ms; /* log_start_ns on the loop's clock */
	uint32_t log_queue_us, log_head_len;
	int log_status; /* the proxy's own answer, if it gave one */
	/* the access log's: this exchange is logged (access_log on, sampled in) and its
	 * method, path and User-Agent were copied */
	uint8_t log_on, log_path_cut;
	const struct backend *log_backend;
	char log_method[16], log_path[ALOG_PATH_MAX + 1], log_ua[ALOG_UA_MAX + 1];

	/* the response cache (caching.h) */
	struct cache_obj *cobj;	  /* answered from it: a hit, or a fill it waits on */
	struct cache_obj *cfill;  /* the object its response fills */
	struct cache_obj *cstale; /* the stored response it revalidates (304, stale-if-error) */
	struct cache_wait cwait;  /* waiting for cobj to fill further */
	int cinboxed; /* ... notified: on w->cache_inbox (under its lock; a word of its own: the
			 filling thread writes it) */
	unsigned cache_inval : 1;    /* an unsafe method: its target goes once answered */
	unsigned cache_body : 1;     /* an inference POST: looked up once its body is read */
	unsigned cstored : 1;	     /* its response is being stored */
	unsigned hit_started : 1;    /* the answer's head is queued */
	unsigned hit_chunked : 1;    /* ... its body chunked (the fill's length not known) */
	unsigned canon_temp : 2;     /* the body's temperature: 0 none, 1 zero, 2 other */
	unsigned swr : 1;	     /* a stale-while-revalidate hit that starts the refresh */
	unsigned hit_cond : 1;	     /* the client's conditional matches cstale: 304 once valid */
	unsigned cauthorization : 1; /* the client sent Authorization (RFC 9111 3.5) */
	uint8_t cstatus;	     /* what Cache-Status says (enum cache_said) */
	uint8_t hit_kind;	     /* how the object answers (enum hit_kind) */
	const char *cwhy;	     /* why its response was not stored, or NULL */
	uint64_t hit_pos, hit_end;   /* body bytes of the object sent, and where the answer ends */
	uint64_t hit_chunk_left;     /* of the chunk being sent (hit_chunked) */
	uint64_t hit_wait_until;     /* a wait for a fill's head ends (loop ms) */
	uint64_t canon[2];	     /* an inference body's canonical hash */
	struct cache_fill_ctx cfx;   /* its fill (cfill): rules, request time, chunked payload */
};

/* What the client's TLS handshake agreed -- version, cipher, SNI, the verified client
 * certificate's subject, SAN and CN (net/tls_listen.h) -- for routes, headers and logs; NULL
 * when the client came in plain. Lives as long as the exchange. */
static inline const struct net_tls_facts *exchange_tls(const struct exchange *x)
{
	return x->tls;
}

/*
 * A new exchange of <w> for the request head <h>, carried by <conn> whose codec is <codec>;
 * NULL without memory. <trusted>: the client is in trusted_proxies, so its request id and
 * trace context are believed (else new ones are made).
 */
struct exchange *exchange_new(struct worker *w, void *conn, const struct exchange_codec_ops *codec,
			      const struct http_head *h, int trusted);
/* A fresh request id (32 lower-case hex digits) into out[0..32], for an exchange or for a
 * request refused before it became one. */
void exchange_make_request_id(struct worker *w, char *out);
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
/* Back to the worker's free list: everything it holds (queue place, slots, upstream
 * connections, head buffer) let go first. */
void exchange_free(struct exchange *x);

/* The worker ends: free the exchanges kept for reuse. */
void exchange_drain_free(struct worker *w);

/* Let go of the backend slots and upstream connections (closed, never reused). */
void exchange_drop_upstream(struct exchange *x);
/* Close the hedged copy of the request, if any, and give its slot back. */
void exchange_drop_hedge(struct exchange *x);

/* The response has started: nothing to resend, no hedged copy needed any more. */
void exchange_response_started(struct exchange *x);

/*
 * The backend has given its whole response (it is in the proxy's buffers, on its way to the
 * client): its slot goes back now, so a client that reads slowly holds no accelerator.
 * x->be stays, for the counts; the upstream connection waits until the client has it all.
 */
void exchange_free_slot(struct exchange *x);
/* Count a response of <status> (0: aborted) against the backend that gave it, if any. */
void exchange_count_response(const struct exchange *x, int status);

/* The proxy's own answer, or a cut connection, through the codec. */
static inline enum run exchange_reply(struct exchange *x, int status, const char *detail, int keep)
{
	return x->codec->reply(x, status, detail, keep);
}

/*
 * Read the whole body body[0..len) once with the strict view (jsonview.h) into x->view, unless
 * it was read already. 0 when it is valid JSON; -EINVAL when it is not (x->view_why says why:
 * a stage that reads the body then answers 400, never reads it another way).
 */
int exchange_read_view(struct exchange *x, const char *body, size_t len);

/*
 * Note the "model" of the body <body> as the view found it (x->model_read): the name in
 * x->model and its hash in x->wt when it names one; none when the view was not read (a body
 * too long to hold, chunked) or is not valid. -EINVAL when the body names a model the proxy
 * cannot hold (a NUL in it, longer than CONF_MODEL_MAX bytes): the backend reads that name,
 * so it must not be taken for none (the caller refuses the request), else 0.
 */
int exchange_note_model(struct exchange *x, const char *body);
#define EXCHANGE_MODEL_UNREADABLE "a \"model\" with a NUL, or longer than 255 bytes"

static inline enum run exchange_abort(struct exchange *x, const char *why)
{
	return x->codec->abort(x, why);
}

/* The upstream connection of <x> had an event: run the connection that carries it. */
void exchange_on_upstream(void *x);

/*
 * The access log's hook (access.c): exchange_new() keeps the method, path and User-Agent of
 * the head and starts the clock; exchange_free() pushes one record into the worker's ring,
 * unless the route is not logged, sampling leaves it out or the ring is full (counted).
 * Nothing when the access log is off.
 */
void access_note_head(struct exchange *x, const struct http_head *h);
void access_log_exchange(struct exchange *x, uint64_t now_ns);
/*
 * A request refused before it became an exchange (a malformed head, one too large, one not
 * received in time): one line with what is known -- <status>, the client, the request id it
 * was answered with, the <bytes_out> of that answer, and from the <len> bytes of <head> read
 * so far the method and target when the request line shows them. Called only on that path;
 * sampled like the others.
 */
void access_log_refusal(struct worker *w, const char *client_ip, int status, const char *reqid,
			uint64_t bytes_out, const char *head, size_t len);

/* The response cache's hook (caching.c): exchange_free() lets go of what the exchange holds
 * of the cache (a fill not complete fails) and counts what the cache did for it. */
void caching_end(struct exchange *x);

/* /debug/requests' hook (debugreq.c): exchange_free() offers the ending exchange to the
 * worker's slowest recent ones. */
void debugreq_note_end(const struct exchange *x);

/*
 * The route's, tenant's and tokens' figures (tally.c): the codec calls tally_response_head()
 * with the response head <h> once it is in (x->resp framed) and tally_body() with the response body
 * bytes (framing and all) as they go to the client; exchange_free() calls tally_exchange().
 * exchange_free() reads the clock once for its hooks: <now_ns> is clock_now_ns() then.
 */
void tally_response_head(struct exchange *x, const struct http_head *h);
void tally_body(struct exchange *x, const char *p, size_t len);
void tally_exchange(struct exchange *x, uint64_t now_ns);

#endif
