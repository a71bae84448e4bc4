/*
 * h1.c - the HTTP/1 client codec: one HTTP/1 client connection (see h1.h): reading heads, the
 * proxy's own answers, lingering, the connection's timer, and the codec operations an exchange
 * uses.
 *
 * An exchange first reads its request body (up to limits.body_buffer_bytes), then is
 * admitted to its pool (a backend slot, or the queue), then relays. Reading the body before
 * admission is what keeps a slow client from holding an accelerator. When the route depends
 * on the body's "model" (routes.match.model), the start of the body is read even before the
 * route, behind the head still in the input (codec_peek_body), and the head is parsed anew
 * from those same bytes before the head stages go on. That is why a head's target is brought
 * to its normal form (http/target.h) in the buffer itself, as soon as the head is read: every
 * later parse of those bytes sees the target that was routed.
 */
#include "proxy/h1.h"
#include "core/log.h"
#include "http/target.h"
#include "guard/auth.h"
#include "net/addr.h"
#include "net/tls.h"
#include "proxy/classify.h"
#include "proxy/access.h"
#include "proxy/deadline.h"
#include "proxy/debugreq.h"
#include "proxy/forward.h"
#include "proxy/h2.h"
#include "proxy/caching.h"
#include "proxy/hit.h"
#include "proxy/quota.h"
#include "proxy/refresh.h"
#include "proxy/relay.h"
#include "proxy/route.h"
#include "proxy/shed.h"
#include "proxy/stages.h"
#include "proxy/tunnel.h"
#include "proxy/up_h2.h"
#include "proxy/xhooks.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static size_t h1_ctx_off; /* where the codec's state lies in an exchange's block */
static uint32_t h1_bit;	  /* joined by an HTTP/1 exchange (an HTTP/2 one needs none) */

const struct xhook h1_x_hook = {
    .name = "http1",
    .ctx_size = sizeof(struct h1_x),
    .ctx_off = &h1_ctx_off,
    .bit = &h1_bit,
};

#define LINGER_MS 2000
/* Draining (a reload, or SIGTERM): a kept-alive client that has sent nothing for this long is
 * closed; one that sends a request sooner is answered, with Connection: close. Closing every
 * idle connection at once would lose the requests already on their way in. */
#define DRAIN_IDLE_MS 1000
/* Retry-After on the proxy's 503s (a full queue, no backend up, a queue wait that timed out):
 * when a slot frees cannot be known, and a second is long enough not to hammer a pool that is
 * short of capacity, short enough that a client backing off is back when a slot is. */
#define H1_RETRY_AFTER_S 1
/* A ClientHello is a few hundred bytes; one declaring more than this is refused before
 * OpenSSL buffers it (post-quantum key shares stay well under it). */
#define TLS_HELLO_MAX 16384

_Static_assert(CONF_MAX_HEADERS == HTTP_MAX_HEADERS, "limits.max_headers' bound is the parser's");

/* limits.max_requests_per_connection: is the request under way the connection's last? */
static int h1_last_request(const struct client *cl)
{
	unsigned cap = cl->w->conf->limits.max_requests_per_connection;
	return cap && cl->requests >= cap;
}

/* Queue a response made by the proxy; ends the exchange, if any. Moves to C_REPLY. A request
 * refused before it became an exchange is answered under a request id of its own, which its
 * access log line carries too. */
static enum run h1_answer(struct client *cl, int status, const char *detail, int keep,
			  const char *json, size_t jlen)
{
	struct worker *w = cl->w;
	struct exchange *x = cl->x;
	char refused_id[REQUEST_ID_MAX + 1], timing[160];
	const char *rid = x ? x->names.reqid : refused_id;
	if (!x)
		reqnames_make_request_id(w, refused_id);
	/* the route shapes the answer (routes.api, its challenges); one refused before the
	 * route stage (a body the model stage refuses, 413, 414) by the first route its head
	 * matches, model routes included: it is the route the client was asking for */
	const struct conf_route *route =
	    !x	       ? NULL
	    : x->route ? x->route
	    : x->head  ? route_match_head(w->conf, x->head, x->peer.tls ? x->peer.tls->sni : NULL)
		       : NULL;
	if (x && (!x->req.done || cl->h1->req_close || cl->h1->minor == 0))
		keep = 0;
	if (w->draining || h1_last_request(cl))
		keep = 0;
	char fields[2048]; /* the route's response_headers (forward.h) */
	struct rewrite_error_info e = {
	    .status = status,
	    .detail = detail,
	    .keep_alive = keep,
	    .request_id = rid,
	    /* every 429 and 503 of the proxy's says when to come back: a limit, when it would
	     * pass (quota.c); maintenance, as the admin API set it (stages.c); a full queue or
	     * no backend, in a second */
	    .retry_after_s = status == 503 && x && x->answer.retry_after_s ? x->answer.retry_after_s
			     : status == 503				   ? H1_RETRY_AFTER_S
			     : status == 429 && x			   ? x->answer.retry_after_s
									   : 0,
	    .challenges = route ? auth_challenges(route->auth) : 0,
	    .openai = route		 ? route->api == CONF_API_OPENAI
		      : cl->plain_on_tls ? 0
					 : route_all_openai(w->conf),
	    .openai_type = status == 429 && x ? quota_refusal_type(x) : NULL,
	    .more_headers = forward_answer_headers(
		x, status == 429 && x ? quota_refusal_headers(x) : NULL, fields, sizeof(fields)),
	    .openai_code = x ? x->answer.code : NULL,
	    .openai_param = x ? x->answer.param : NULL,
	    .head_only = x && x->meth == HTTP_HEAD,
	};
	int n = -1;
	if (client_out_buf(cl) && json) {
		n = rewrite_json(cl->out->data + cl->out->end, buf_room(cl->out), status, json,
				 jlen, rid, keep);
	} else if (client_out_buf(cl)) {
		if (x && x->names.want_timing && debugreq_timing(x, 1, timing, sizeof(timing)) > 0)
			e.timing = timing;
		n = x && cl->h1->early_head
			? rewrite_sse_error(cl->out->data + cl->out->end, buf_room(cl->out), &e)
			: rewrite_error(cl->out->data + cl->out->end, buf_room(cl->out), &e);
	}
	if (!x)
		access_log_refusal(w, cl->ip, n < 0 ? 0 : status, refused_id,
				   n > 0 ? (uint64_t)n : 0, cl->in ? buf_head(cl->in) : NULL,
				   cl->in ? buf_len(cl->in) : 0);
	if (n < 0) {
		/* the client has not read what it was sent (interim responses, heartbeats):
		 * it cannot get an answer, so it gets a closed connection */
		log_debug("%s %d %s (no room left for the answer: closing)", cl->ip, status,
			  detail);
		if (x)
			exchange_count_response(x, status);
		client_close(cl);
		return RUN_GONE;
	}
	cl->out->end += (uint32_t)n;
	log_debug("%s %d %s", cl->ip, status, detail);
	if (cl->head_len) { /* answered from the head stages */
		buf_consume(cl->in, cl->head_len);
		cl->head_len = 0;
	}
	if (x) {
		exchange_count_response(x, status);
		x->log.status = status;
		x->log.bytes_out = (uint64_t)n;
		if (x->req.ready)
			buf_consume(cl->in, x->req.ready);
		exchange_free(x);
		cl->x = NULL;
		cl->h1 = NULL;
	}
	cl->keep_alive = keep != 0;
	cl->state = C_REPLY;
	cl->phase_ms = loop_now(w->loop);
	return RUN_AGAIN;
}

static enum run h1_reply(struct client *cl, int status, const char *detail, int keep)
{
	return h1_answer(cl, status, detail, keep, NULL, 0);
}

static void h1_settle(struct client *cl);

/* --- what an exchange asks of this codec --- */

static enum run codec_reply(struct exchange *x, int status, const char *detail, int keep)
{
	if (caching_stale_on_error(x, status)) { /* stale-if-error answers in its place */
		exchange_drop_upstream(x);
		return hit_run(x->conn);
	}
	return h1_reply(x->conn, status, detail, keep);
}

static enum run codec_reply_json(struct exchange *x, int status, const char *json, size_t len)
{
	return h1_answer(x->conn, status, "", 1, json, len);
}

static enum run codec_abort(struct exchange *x, const char *why)
{
	struct client *cl = x->conn;
	log_debug("%s: exchange aborted: %s", cl->ip, why);
	if (x->att->be)
		exchange_count_response(x, 0);
	client_close(cl);
	return RUN_GONE;
}

/* Answer "100 Continue" for the backend if the client waits for it (Expect is not
 * forwarded): the client sends the body now, and it flows to the backend once connected. */
static int continue_body(struct exchange *x, const struct http_head *h)
{
	struct client *cl = x->conn;
	if (!(h->flags & HTTP_F_EXPECT_CONTINUE) || x->req.done || h->minor != 1)
		return 0;
	struct buf *b = client_out_buf(cl);
	int n = b ? rewrite_continue(b->data + b->end, buf_room(b)) : -1;
	if (n < 0)
		return -ENOMEM;
	b->end += (uint32_t)n;
	return 0;
}

/* The head at the front of cl->in, parsed again into the worker's scratch (the scratch
 * served other connections, and the bytes may have moved, while the body was read). */
static int reread_head(struct client *cl)
{
	struct worker *w = cl->w;
	http_head_reader_reset(&cl->head);
	int r = http_head_read(&cl->head, buf_head(cl->in), buf_len(cl->in),
			       w->conf->limits.max_header_bytes, &w->head);
	if (r != (int)cl->head_len)
		return -EPROTO; /* the same bytes parse the same: never */
	cl->x->head = &w->head;
	return 0;
}

static enum run codec_peek_body(struct exchange *x, size_t max, const char **body, size_t *len,
				int *all)
{
	struct client *cl = x->conn;
	struct worker *w = cl->w;
	size_t hl = cl->head_len;
	int moved = !x->head, full = 0;
	if (!x->reqbody.peeked) { /* the first look */
		if (continue_body(x, x->head) < 0)
			return exchange_abort(x, "out of memory");
		cl->state = C_EXCHANGE; /* the stages run on the client's events from now */
		x->last_ms = cl->h1->pace.body_start_ms = cl->h1->pace.rate_mark_ms =
		    loop_now(w->loop);
	}
	if (client_flush(cl) < 0) /* a "100 Continue" the client waits for */
		return exchange_abort(x, "client went away");
	for (;;) {
		int bad = http_body_scan(&x->req, buf_head(cl->in) + hl, buf_len(cl->in) - hl,
					 w->conf->limits.max_body_bytes);
		if (bad)
			return h1_reply(cl, -bad,
					bad == -413
					    ? "request body larger than limits.max_body_bytes"
					    : "malformed request body",
					0);
		if (x->req.done || x->req.ready >= max || !cl->conn.readable)
			break;
		ssize_t n = client_read(cl);
		if (n == -ENOSPC) {
			int err = client_grow_in(cl);
			if (err == -ENOSPC) {
				full = 1; /* as much as we hold: the model is not within it */
				break;
			}
			if (err == -EBUSY) {
				cl->h1->pace.buf_wait = 1; /* the timer looks again */
				break;
			}
			if (err < 0)
				return exchange_abort(x, "out of memory");
			moved = 1;
			continue;
		}
		if (n == -EAGAIN)
			break;
		if (n <= 0)
			return exchange_abort(x, "client closed during the request body");
		moved = 1;
		x->last_ms = loop_now(w->loop);
	}
	if (moved && reread_head(cl) < 0)
		return exchange_abort(x, "request head changed while its body was read");
	*body = buf_head(cl->in) + hl;
	*len = x->req.ready;
	*all = x->req.done || x->req.ready >= max || full;
	return RUN_AGAIN;
}

static enum run codec_head_done(struct exchange *x)
{
	struct client *cl = x->conn;
	const struct http_head *h = x->head;
	if (!x->reqbody.peeked && continue_body(x, h) < 0) /* a peek answered it already */
		return exchange_abort(x, "out of memory");
	buf_consume(cl->in, cl->head_len);
	cl->head_len = 0;
	http_head_reader_reset(&cl->head);
	cl->state = C_EXCHANGE;
	x->head = NULL; /* its bytes are gone */
	x->last_ms = loop_now(cl->w->loop);
	if (!x->reqbody.peeked) /* else its clocks run from the peek */
		cl->h1->pace.body_start_ms = cl->h1->pace.rate_mark_ms = x->last_ms;
	return RUN_AGAIN;
}

static enum run codec_await_body(struct exchange *x)
{
	return relay_await_body(x->conn);
}

static enum run codec_relay(struct exchange *x)
{
	return relay_run(x->conn);
}

static void codec_wake(void *conn)
{
	h1_run(conn);
}

/* Straight to the relay (the exchange is at its last stage while the upstream half reads);
 * then on as h1_run would go on from the stage's answer. */
static void codec_respond(struct exchange *x)
{
	struct client *cl = x->conn;
	enum run r = relay_run(cl);
	if (r == RUN_AGAIN)
		h1_run(cl);
	else if (r == RUN_STAY)
		h1_settle(cl);
}

static void codec_heartbeat(struct exchange *x)
{
	relay_heartbeat(x->conn);
}

static int codec_body_held(const struct exchange *x)
{
	const struct client *cl = x->conn;
	return cl->in && buf_len(cl->in) >= cl->in->cap;
}

static enum run codec_serve(struct exchange *x)
{
	return hit_run(x->conn);
}

static enum run codec_interim(struct exchange *x, const struct http_head *h, size_t len)
{
	return relay_interim(x->conn, h, len);
}

static enum run codec_upgrade(struct exchange *x, const struct http_head *h, size_t len)
{
	return relay_upgrade(x->conn, h, len);
}

static enum run codec_response_head(struct exchange *x, const struct http_head *h, size_t len)
{
	(void)len;
	return relay_response_head(x->conn, h);
}

static int codec_live(void *conn, const struct exchange *x)
{
	return ((struct client *)conn)->x == x;
}

static const struct exchange_codec_ops h1_codec = {
    .reply = codec_reply,
    .abort = codec_abort,
    .head_done = codec_head_done,
    .await_body = codec_await_body,
    .peek_body = codec_peek_body,
    .reply_json = codec_reply_json,
    .relay = codec_relay,
    .respond = codec_respond,
    .wake = codec_wake,
    .heartbeat = codec_heartbeat,
    .body_held = codec_body_held,
    .serve = codec_serve,
    .interim = codec_interim,
    .upgrade = codec_upgrade,
    .response_head = codec_response_head,
    .live = codec_live,
};

/* --- the states --- */

/* A complete request head of <head_len> bytes is at the front of cl->in, parsed in w->head;
 * <dropped> more were read for it (head_settle). */
static enum run exchange_start(struct client *cl, size_t head_len, size_t dropped)
{
	struct worker *w = cl->w;
	const struct http_head *h = &w->head;
	const struct exchange_peer peer = {
	    .ip = cl->ip,
	    .key = cl->key,
	    .trusted = cl->trusted,
	    .over_tls = cl->tls,
	    .tls = cl->tls_facts,
	    .tls_conf = cl->tls_conf,
	};
	struct exchange *x = exchange_new(w, cl, &h1_codec, h, &peer);
	if (!x) {
		client_close(cl);
		return RUN_GONE;
	}
	cl->x = x;
	cl->h1 = xhooks_join(x, &h1_x_hook);
	*cl->h1 = (struct h1_x){.minor = h->minor, .req_close = (h->flags & HTTP_F_CLOSE) != 0};
	x->pace = &cl->h1->pace;
	x->log.head_len += (uint32_t)dropped; /* the bytes the client sent */
	cl->head_len = (uint32_t)head_len;
	cl->requests++;
	if (w->conf->limits.max_uri_bytes && h->path.len > w->conf->limits.max_uri_bytes)
		return h1_reply(cl, 414, "request target longer than limits.max_uri_bytes", 0);
	if (h->nheaders > w->conf->limits.max_headers)
		return h1_reply(cl, 431, "more header fields than limits.max_headers", 0);
	if (h1_last_request(cl))
		cl->h1->req_close =
		    1; /* its answer says Connection: close, and the connection ends */
	if (h->framing == HTTP_BODY_LENGTH && w->conf->limits.max_body_bytes &&
	    h->content_length > w->conf->limits.max_body_bytes)
		return h1_reply(cl, 413, "request body larger than limits.max_body_bytes", 0);
	return stages_run(x, codec_live);
}

/* The head just parsed into w->head, its target brought to its normal form in the buffer
 * (http/target.h, limits.path) before anything reads it: the bytes it no longer needs leave
 * the front of cl->in, so the head parses again to the same (reread_head). */
static enum run head_settle(struct client *cl)
{
	struct worker *w = cl->w;
	const char *why = NULL;
	int unused = http_target_normalize_head(
	    buf_head(cl->in), &w->head,
	    w->conf->limits.path == CONF_PATH_REFUSE ? HTTP_TARGET_REFUSE : HTTP_TARGET_NORMALIZE,
	    &why);
	if (unused < 0)
		return h1_reply(cl, 400, why, 0);
	buf_consume(cl->in, (size_t)unused);
	return exchange_start(cl, w->head.head_len, (size_t)unused);
}

/* One step of the TLS handshake; the head timeout runs from the accept. A client that
 * speaks plain HTTP to the TLS listener is told so, as nginx does: 400 in plain text, then
 * closed (lingering: its request is read and dropped, so the answer is not lost to a RST). */
static enum run run_handshake(struct client *cl)
{
	if (!cl->hello_checked) {
		int plain = net_tls_sniff_plain_http(&cl->conn);
		if (plain == -EAGAIN) {
			cl->conn.readable = 0;
			return RUN_STAY;
		}
		if (plain) {
			net_tls_listener_detach(&cl->conn);
			cl->plain_on_tls = 1;
			return h1_reply(cl, 400, "plain HTTP request was sent to an HTTPS port", 0);
		}
		int big = net_tls_hello_oversized(&cl->conn, TLS_HELLO_MAX);
		if (big == -EAGAIN) {
			cl->conn.readable = 0;
			return RUN_STAY;
		}
		if (big) {
			log_debug("%s: ClientHello declared over %d bytes: refused", cl->ip,
				  TLS_HELLO_MAX);
			client_close(cl);
			return RUN_GONE;
		}
		cl->hello_checked = 1;
	}
	int rc = net_tls_handshake(&cl->conn);
	if (rc == -EAGAIN) {
		if (cl->conn.want_read)
			cl->conn.readable = 0;
		if (cl->conn.want_write)
			cl->writable = 0;
		return RUN_STAY;
	}
	if (rc < 0) {
		char why[160];
		net_tls_error_text(&cl->conn, why, sizeof(why));
		log_debug("%s: TLS handshake failed: %s", cl->ip, why);
		client_close(cl);
		return RUN_GONE;
	}
	if (!(cl->tls_facts = malloc(sizeof(*cl->tls_facts))) ||
	    net_tls_facts_get(&cl->conn, cl->tls_facts) < 0) {
		log_debug("%s: %s: closed", cl->ip,
			  cl->tls_facts ? "client certificate's subject or SAN too long"
					: "out of memory");
		client_close(cl);
		return RUN_GONE;
	}
	cl->state = C_HEAD;
	cl->conn.readable = 1; /* the request may have come with the client's last flight */
	return RUN_AGAIN;
}

static enum run run_head(struct client *cl)
{
	struct worker *w = cl->w;
	size_t max_head = w->conf->limits.max_header_bytes;
	for (;;) {
		size_t len = cl->in ? buf_len(cl->in) : 0;
		if (len) {
			/* HTTP/2: the connection's first bytes are the preface, after ALPN "h2"
			 * over TLS, or with prior knowledge (h2c) on a plain listener; what
			 * chose h2 by ALPN and sends no preface is closed */
			int alpn_h2 = cl->tls && cl->tls_facts && cl->tls_facts->alpn_h2;
			int pre = cl->http2 && (!cl->tls || alpn_h2) && !cl->requests
				      ? h2_preface(buf_head(cl->in), len)
				      : -1;
			if (pre > 0) {
				h2_take(cl);
				return RUN_GONE;
			}
			if (pre < 0 && alpn_h2) {
				client_close(cl);
				return RUN_GONE;
			}
			int r = pre ? http_head_read(&cl->head, buf_head(cl->in), len, max_head,
						     &w->head)
				    : 0;
			if (r > 0)
				return head_settle(cl);
			if (r < 0)
				return h1_reply(cl, -r, "malformed request", 0);
		}
		ssize_t n = client_read_idle(cl);
		if (n == -EAGAIN)
			return RUN_STAY;
		if (n <= 0) {
			client_close(cl);
			return RUN_GONE;
		}
		if (!len)
			cl->phase_ms = loop_now(w->loop); /* the header timeout starts now */
	}
}

static enum run run_reply(struct client *cl)
{
	if (client_flush(cl) < 0) {
		client_close(cl);
		return RUN_GONE;
	}
	if (client_out_pending(cl))
		return RUN_STAY;
	worker_buf_release(cl->w, &cl->out);
	cl->phase_ms = loop_now(cl->w->loop);
	http_head_reader_reset(&cl->head);
	if (cl->keep_alive) {
		cl->state = C_HEAD;
		return RUN_AGAIN;
	}
	net_conn_shutdown(&cl->conn);
	cl->state = C_LINGER;
	return RUN_AGAIN;
}

/* Read and drop until the client closes, so that our last response is not lost to a RST. */
static enum run run_linger(struct client *cl)
{
	while (cl->conn.readable || cl->read_end) {
		if (cl->in)
			cl->in->start = cl->in->end = 0;
		ssize_t n = client_read(cl);
		if (n == -EAGAIN)
			return RUN_STAY;
		if (n <= 0) {
			client_close(cl);
			return RUN_GONE;
		}
	}
	return RUN_STAY;
}

/* --- driver, timer, lifecycle --- */

static void h1_arm_timer(struct client *cl)
{
	const struct conf_timeouts *t = &cl->w->conf->timeouts;
	uint64_t deadline;
	switch (cl->state) {
	case C_HANDSHAKE:
		deadline = cl->phase_ms + t->header_ms;
		break;
	case C_HEAD:
		if ((cl->in && buf_len(cl->in)) || !cl->served)
			deadline = cl->phase_ms + t->header_ms;
		else
			deadline = cl->phase_ms + t->idle_ms;
		if (cl->w->draining && (!cl->in || !buf_len(cl->in))) {
			uint64_t from =
			    cl->phase_ms > cl->w->drain_ms ? cl->phase_ms : cl->w->drain_ms;
			if (from + DRAIN_IDLE_MS < deadline)
				deadline = from + DRAIN_IDLE_MS;
		}
		break;
	case C_EXCHANGE:
		deadline = deadline_next(cl->x, loop_now(cl->w->loop));
		break;
	case C_REPLY: /* the proxy's own answer: small, so a client not taking it is not reading */
		deadline = cl->phase_ms + (t->send_ms && t->send_ms < t->between_bytes_ms
					       ? t->send_ms
					       : t->between_bytes_ms);
		break;
	case C_TUNNEL:
		deadline = tunnel_deadline(cl);
		break;
	default:
		deadline = cl->phase_ms + LINGER_MS;
		break;
	}
	/* A deadline put off (every request moves it: the head's, the first byte's, idle again)
	 * leaves the timer where it is; it fires at the earlier time and h1_on_timer() arms it
	 * again for due_ms. So the timer heap is touched only when a deadline comes nearer,
	 * not two or three times a request. */
	cl->due_ms = deadline;
	if (!loop_timer_armed(&cl->timer) || deadline < cl->timer.deadline_ms)
		loop_timer_set(cl->w->loop, &cl->timer, deadline);
}

/* The connection waits for its next event: reads and the timer as its state wants. Between
 * events the transport reads a tunnel's bytes and a lingering client's; a head is read as its
 * state runs (its first bytes start timeouts.header_ms), and while a request is served or
 * answered its next one (or its end) stays in the socket. */
static void h1_settle(struct client *cl)
{
	if (cl->state != C_TUNNEL && cl->state != C_LINGER)
		net_conn_read_stop(&cl->conn);
	h1_arm_timer(cl);
}

void h1_run(struct client *cl)
{
	for (;;) {
		enum run r;
		switch (cl->state) {
		case C_HANDSHAKE:
			r = run_handshake(cl);
			break;
		case C_HEAD:
			r = run_head(cl);
			break;
		case C_EXCHANGE:
			r = stages_run(cl->x, codec_live);
			break;
		case C_REPLY:
			r = run_reply(cl);
			break;
		case C_TUNNEL:
			r = tunnel_run(cl);
			break;
		case C_H2:
			h2_run(cl); /* it waits, or ends, on its own */
			return;
		default:
			r = run_linger(cl);
			break;
		}
		if (r == RUN_GONE)
			return;
		if (r == RUN_STAY)
			break;
	}
	h1_settle(cl);
}

static void h1_on_timer(struct loop_timer *t)
{
	struct client *cl = container_of(t, struct client, timer);
	enum run r;
	if (cl->state != C_H2 && loop_now(cl->w->loop) < cl->due_ms) {
		loop_timer_set(cl->w->loop, &cl->timer, cl->due_ms); /* put off (h1_arm_timer) */
		return;
	}
	switch (cl->state) {
	case C_HEAD:
		if (cl->in && buf_len(cl->in)) {
			r = h1_reply(cl, 408, "request head not received in time", 0);
			break;
		}
		if (cl->w->draining && client_pending(cl)) {
			cl->conn.readable = 1; /* a request arrived as it was to close: answer it */
			h1_run(cl);
			return;
		}
		client_close(cl);
		return;
	case C_EXCHANGE:
		r = deadline_fire(cl->x, loop_now(cl->w->loop));
		break;
	case C_TUNNEL:
		r = tunnel_on_timer(cl);
		break;
	case C_H2:
		h2_on_timer(cl);
		return;
	default:
		client_close(cl);
		return;
	}
	if (r != RUN_GONE)
		h1_run(cl);
}

static void h1_on_io(struct loop_io *io, unsigned events)
{
	struct client *cl = container_of(io, struct client, io);
	if (events & LOOP_WRITE)
		cl->writable = 1;
	/* the transport records the rest, and reads where the state reads (h1_run) */
	(void)net_conn_ready(&cl->conn, events);
	h1_run(cl);
}

void h1_accept(struct worker *w, const struct listener *l, int fd,
	       const struct sockaddr_storage *peer)
{
	const struct conf *conf = w->conf;
	struct client *cl = calloc(1, sizeof(*cl));
	if (!cl) {
		close(fd);
		return;
	}
	cl->io.fd = fd;
	cl->io.fn = h1_on_io;
	net_conn_init(&cl->conn, fd);
	cl->timer.fn = h1_on_timer;
	cl->w = w;
	cl->state = C_HEAD;
	cl->phase_ms = loop_now(w->loop);
	net_addr_host((const struct sockaddr *)peer, cl->ip, sizeof(cl->ip));
	cl->key = classify_client_key((const struct sockaddr *)peer);
	cl->trusted = net_cidr_match(conf->trusted_proxies, conf->ntrusted_proxies,
				     (const struct sockaddr *)peer);
	cl->http2 = conf->listens[l->index].http2 != 0;
	if (shed_check(w, l, cl->key, cl->ip, &cl->ip_slot)) {
		close(fd);
		free(cl);
		return;
	}
	struct net_tls_listener *tls =
	    w->sh->tls ? atomic_load_explicit(&w->sh->tls[l->index], memory_order_acquire) : NULL;
	if (tls) {
		cl->tls = 1;
		cl->tls_conf = conf->listens[l->index].tls;
		cl->state = C_HANDSHAKE;
	}
	if ((tls && net_tls_listener_attach(tls, &cl->conn, cl->http2) < 0) ||
	    loop_io_add(w->loop, &cl->io) < 0) {
		if (cl->ip_slot)
			atomic_fetch_sub_explicit(cl->ip_slot, 1, memory_order_relaxed);
		net_conn_close(&cl->conn);
		free(cl);
		return;
	}
	list_push_front(&w->clients, &cl->link);
	w->nclients++;
	h1_arm_timer(cl);
}

void h1_close_idle(struct worker *w, int all)
{
	upconn_close_idle(w);
	up_h2_close_idle(w);
	struct list_node *n = list_first(&w->clients), *next;
	for (; n; n = next) {
		next = list_next(&w->clients, n);
		struct client *cl = container_of(n, struct client, link);
		if (all) {
			tunnel_free(cl);
			client_close(cl);
		} else if (cl->state == C_HEAD && (!cl->in || !buf_len(cl->in))) {
			h1_arm_timer(cl); /* closed DRAIN_IDLE_MS from now, or answered */
		} else if (cl->state == C_TUNNEL) {
			h1_arm_timer(cl); /* closed timeouts.tunnel_drain_ms from now */
		} else if (cl->state == C_H2) {
			h2_drain(cl); /* GOAWAY; closed once its streams are done */
		}
	}
	if (all) {
		refresh_drop_all(w);
		exchange_drain_free(w); /* the worker ends */
	}
}
