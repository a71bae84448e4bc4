/*
 * up_h2.c - HTTP/2 connections to backends and their streams (see up_h2.h).
 *
 * A connection is an upstream connection of upstream.c (TCP, then TLS with ALPN h2 for
 * protocol h2) owned by a struct up_h2 that keeps its nghttp2 client session; the worker keeps
 * them in one list per backend id (w->h2_conns). nghttp2 reads the frames (mem_recv) and calls
 * back; the callbacks only write what came into the stream's waiting input (rin: the response
 * as HTTP/1.1, written by http/h2head.h's h2resp_*) and mark the stream for its owner. Owners hear
 * of their stream only from the connection's own event or timer, never from within a call they made
 * (a write, a let-go), so no owner is entered twice: what a call changes is told through a kick of
 * the connection's timer. nghttp2 is never entered from its own callbacks.
 *
 * Flow control is ours, as the client codec's (h2.c): nghttp2's automatic WINDOW_UPDATE is
 * off; a stream's window is a quarter of a buffer, and credit goes back only as its response
 * moves from rin into the upstream half's input, which the client drains: a client that reads
 * slowly holds the backend's stream back, not the proxy's memory. What a stream has not given
 * back when it closes or is let go goes back to the connection's window then (a response's
 * last DATA comes with its END_STREAM, before it moves on). A request body waits in the
 * stream's own buffer (body) until nghttp2 sends it as DATA within the backend's windows; a
 * full buffer is a full socket to the upstream half.
 *
 * A stream to an engine pool (engine_grpc.h) keeps the request head and body in body until
 * they are whole, then sends the call engine_grpc made of them; the engine's fields and DATA
 * go to the call, and its answer is pumped into rin as the upstream half drains it, so its
 * credit goes back only while no read message waits for room.
 *
 * Streams come from the connection's spares once it has had as many at once; a connection
 * that died stays, with its streams, until its last stream's attempt lets it go.
 */
#include "proxy/up_h2.h"
#include "conf/model.h"
#include "core/container.h"
#include "core/log.h"
#include "http/chunked.h"
#include "http/grpc.h"
#include "http/grpc_web.h"
#include "http/h2mem.h"
#include "http/h2head.h"
#include "http/parse.h"
#include "net/tls.h"
#include "proxy/engine_grpc.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The request as it arrives (HTTP/1.1 bytes): its head, then its body's framing. */
enum req_state {
	REQ_HEAD,    /* collecting the head in body */
	REQ_LENGTH,  /* a body of content-length: req_left bytes to come */
	REQ_CHUNKED, /* a chunked body: its framing dropped, its trailers kept */
	REQ_DONE,    /* all of it came */
};

struct up_h2;

struct up_h2s {
	struct upconn up;      /* what the attempt holds: up.h2s is this stream */
	struct up_h2 *c;       /* its connection (freed only once it has no stream) */
	struct list_node link; /* on c->streams, or c->spare */
	struct list_node tell; /* on c->told while its owner must hear of it */
	int32_t id;	       /* 0 until submitted */
	enum req_state req;
	uint64_t req_left;
	struct http_chunked ch; /* the request body's framing */
	struct buf *body;	/* the head being collected, then body bytes not yet sent */
	struct buf *trail;	/* the request's trailer section */
	struct buf *rin;	/* the response as HTTP/1.1, not yet in up.in */
	uint64_t unconsumed;	/* response DATA bytes whose credit has not gone back */
	struct h2resp rs;	/* the response, as written into rin so far (http/h2head.h) */
	/* the chunk rin ends with, while DATA may join it (join_chunk): its bytes from rin's
	 * end back to its size line (0: none), and its payload's */
	uint32_t chunk_back, chunk_len;
	int err;	       /* the stream failed (-errno): told to the reader once rin drained */
	unsigned listed : 1;   /* on c->told */
	unsigned deferred : 1; /* nghttp2 waits for request body bytes */

	unsigned resp_end : 1; /* the response is whole */
	unsigned engine : 1;   /* pools[].engine: the call below speaks the engine's API */
	struct engine_call eng;
	unsigned closed : 1;	 /* nghttp2 closed the stream */
	unsigned ended_told : 1; /* err went to the reader */
	/* gRPC-Web's text mode (routes.grpc_web, http/grpc_web.h): the request body is decoded
	 * from base64 as it comes (dec), the response's messages encoded (enc); a body that is
	 * not base64 is answered here (refused: the rest of the request is swallowed) */
	unsigned text : 1;
	unsigned refused : 1;
	struct grpc_web_dec dec;
	struct grpc_web_enc enc;
};

struct up_h2 {
	struct list_node link; /* on w->h2_conns[be->id] */
	struct worker *w;
	struct backend *be;
	struct upconn *tcp; /* the connection, owned by this */
	nghttp2_session *ss;
	struct loop_timer timer; /* kicks (owners to tell) and the idle close */
	struct list_head streams, spare, told;
	unsigned nstreams;
	uint64_t quiet_ms; /* when it last had no stream */
	struct buf *out;   /* what nghttp2 wrote that the socket did not take */
	unsigned busy;	   /* in process(): it is freed after */
	unsigned ready : 1, dead : 1, goaway : 1;
	nghttp2_mem mem; /* nghttp2's allocations: the worker's free lists (w->h2mem) */
};

/* --- streams and their owners --- */

/* Its owner must hear of it (bytes came, room came, it failed): told from the connection's
 * event or timer (tell_owners). */
static void stream_mark(struct up_h2s *s)
{
	struct up_h2 *c = s->c;
	if (!c || s->listed)
		return;
	s->listed = 1;
	list_push_back(&c->told, &s->tell);
	if (!c->busy)
		loop_timer_set(c->w->loop, &c->timer, loop_now(c->w->loop));
}

static void stream_unmark(struct up_h2s *s)
{
	if (s->listed && s->c)
		list_del(&s->c->told, &s->tell);
	s->listed = 0;
}

/* The room at the end of the stream's waiting response, *cap bytes (compacted when short);
 * NULL without a buffer. */
static char *rin_room(struct up_h2s *s, size_t *cap)
{
	if (!s->rin && !(s->rin = buf_get(&s->up.w->bufs)))
		return NULL;
	if (buf_room(s->rin) < s->rin->cap / 4)
		buf_compact(s->rin);
	*cap = buf_room(s->rin);
	return s->rin->data + s->rin->end;
}

/* An h2resp_* write of <n> bytes into rin_room() went (n < 0: it did not fit, or the backend
 * sent what HTTP/1.1 cannot carry). 0, or -EPROTO. Its window is a quarter of a buffer, so
 * only a huge head (or endless interim heads) gets to no room: tiny DATA frames join one
 * chunk (join_chunk). */
static int rin_wrote(struct up_h2s *s, int n)
{
	s->chunk_back = 0; /* something follows the last chunk: DATA no longer joins it */
	if (n < 0)
		return -EPROTO;
	s->rin->end += (uint32_t)n;
	return 0;
}

static void stream_fail(struct up_h2s *s, int err);

/* An engine call's response, as much as rin has room for (engine_grpc.h). */
static void eng_pump(struct up_h2s *s)
{
	if (s->eng.phase == ENG_DONE || s->err)
		return;
	size_t cap;
	if (s->rin && s->rin->start)
		buf_compact(s->rin);
	char *p = rin_room(s, &cap);
	if (!p) {
		stream_fail(s, -ENOMEM);
		return;
	}
	long n = engine_call_pump(&s->eng, p, cap);
	if (n < 0) {
		stream_fail(s, -EPROTO);
		return;
	}
	s->rin->end += (uint32_t)n;
	if (s->eng.phase == ENG_DONE)
		s->resp_end = 1;
	if (n)
		stream_mark(s);
}

/* DATA p[0..len) of a chunked response joins the chunk rin ends with, while its size line
 * is still in rin (nothing written after it, none of it pulled): a backend's tiny frames (a
 * few bytes each) would cost a size line and a CRLF each, up to six times their bytes, more
 * than rin holds of a window's worth. 0, or -1: the bytes need a chunk of their own. */
static int join_chunk(struct up_h2s *s, const char *p, size_t len)
{
	if (!s->chunk_back || !s->rin || buf_len(s->rin) < s->chunk_back)
		return -1;
	if (buf_room(s->rin) < len + 8)
		buf_compact(s->rin); /* (its distance from the end stays) */
	size_t total = s->chunk_back;
	char *chunk = s->rin->data + s->rin->end - total;
	if (h2resp_data_join(chunk, &total, s->chunk_len, p, len, total + buf_room(s->rin)) < 0)
		return -1;
	s->rin->end += (uint32_t)(total - s->chunk_back);
	s->chunk_back = (uint32_t)total;
	s->chunk_len += (uint32_t)len;
	return 0;
}

/* The stream ends in failure <err>: nghttp2 resets it if it is open, its owner is told. */
static void stream_fail(struct up_h2s *s, int err)
{
	if (!s->err)
		s->err = err;
	if (s->c && s->id && !s->closed)
		nghttp2_submit_rst_stream(s->c->ss, NGHTTP2_FLAG_NONE, s->id,
					  NGHTTP2_INTERNAL_ERROR);
	stream_mark(s);
}

static int conn_flush(struct up_h2 *c);

static void credit_back(struct up_h2s *s)
{
	if (!s->unconsumed || !s->c || !s->id || s->closed)
		return;
	if (s->engine && engine_call_holding(&s->eng))
		return; /* read messages wait for room: the engine waits too */
	if (s->rin && buf_len(s->rin) > s->rin->cap / 4)
		return;
	nghttp2_session_consume(s->c->ss, s->id, s->unconsumed);
	s->unconsumed = 0;
	if (!s->c->busy) /* the WINDOW_UPDATE goes now: the backend waits for it */
		(void)conn_flush(s->c);
}

int up_h2_pull(struct upconn *up)
{
	struct up_h2s *s = up->h2s;
	struct net_conn *nc = &up->conn;
	int moved = 0;
	for (;;) {
		if (s->engine)
			eng_pump(s);
		if (!(nc->reading && nc->rd && s->rin && buf_len(s->rin)))
			break;
		char *p;
		size_t room;
		if (nc->rd->alloc(nc->rd_arg, &p, &room) < 0) {
			/* no room: the client has not taken what came. Reading pauses, as the
			 * transport's does, so the upstream half starts it (and pulls) again */
			net_conn_read_stop(nc);
			break;
		}
		size_t k = buf_len(s->rin) < room ? buf_len(s->rin) : room;
		memcpy(p, buf_head(s->rin), k);
		buf_consume(s->rin, k);
		nc->rd->read(nc->rd_arg, (ssize_t)k);
		moved = 1;
	}
	if (s->rin && !buf_len(s->rin)) {
		buf_put(&up->w->bufs, s->rin);
		s->rin = NULL;
		s->chunk_back = 0;
	}
	credit_back(s);
	if (nc->reading && nc->rd && !s->rin && s->err && !s->ended_told) {
		/* what came went on: now its end (before a response: a reset connection) */
		s->ended_told = 1;
		nc->rd->read(nc->rd_arg, s->err);
		nc->reading = 0;
		moved = 1;
	}
	return moved;
}

/* Tell each marked stream's owner: its reader's ready when it reads, else its event. */
static void tell_owners(struct up_h2 *c)
{
	struct list_node *n;
	while ((n = list_pop_front(&c->told))) {
		struct up_h2s *s = container_of(n, struct up_h2s, tell);
		s->listed = 0;
		struct upconn *up = &s->up;
		if (!up->owner)
			continue;
		if (up->conn.reading && up->conn.rd && up->conn.rd->ready && up_h2_pull(up))
			up->conn.rd->ready(up->conn.rd_arg);
		else
			up->on_event(up->owner);
	}
}

/* --- the request, from the HTTP/1.1 bytes the upstream half writes --- */

static int hop_by_hop(const struct http_head *h, struct http_str n)
{
	return http_str_eq(n, "connection") || http_str_eq(n, "keep-alive") ||
	       http_str_eq(n, "proxy-connection") || http_str_eq(n, "transfer-encoding") ||
	       http_str_eq(n, "upgrade") || http_str_eq(n, "te") || http_str_eq(n, "host") ||
	       http_str_eq(n, "http2-settings") || http_conn_names(h, n);
}

static ssize_t body_read(nghttp2_session *ss, int32_t id, uint8_t *out, size_t len, uint32_t *flags,
			 nghttp2_data_source *src, void *ud);

/* The head is whole in s->body (<hlen> bytes): submitted as the stream's HEADERS, a body to
 * follow as DATA. 0, or -errno. */
static int submit_head(struct up_h2s *s, size_t hlen)
{
	struct up_h2 *c = s->c;
	struct worker *w = s->up.w;
	struct http_head h;
	int r = http_parse_request(buf_head(s->body), hlen, hlen, &h);
	if (r <= 0)
		return -EPROTO;
	struct buf *names = buf_get(&w->bufs);
	if (!names)
		return -ENOMEM;
	nghttp2_nv nv[HTTP_MAX_HEADERS + 5];
	size_t n = 0;
	const struct http_header *host = http_find_header(&h, "host");
	const char *scheme = s->up.be->tls ? "https" : "http";
	const char *auth = host ? host->value.p : s->up.be->conf->ep.address;
	size_t alen = host ? host->value.len : strlen(auth);
	nv[n++] = (nghttp2_nv){(uint8_t *)":method", (uint8_t *)h.method.p, 7, h.method.len, 0};
	nv[n++] = (nghttp2_nv){(uint8_t *)":scheme", (uint8_t *)scheme, 7, strlen(scheme), 0};
	nv[n++] = (nghttp2_nv){(uint8_t *)":authority", (uint8_t *)auth, 10, alen, 0};
	nv[n++] = (nghttp2_nv){(uint8_t *)":path", (uint8_t *)h.path.p, 5, h.path.len, 0};
	int grpc = 0;
	size_t rest = 0;
	const struct http_header *ct = http_find_only_header(&h, "content-type");
	enum http_grpc_web web = s->up.grpc_web && ct
				     ? http_grpc_web_kind(ct->value.p, ct->value.len, &rest)
				     : HTTP_GRPC_WEB_NONE;
	s->text = web == HTTP_GRPC_WEB_TEXT;
	for (unsigned i = 0; i < h.nheaders && n < HTTP_MAX_HEADERS + 4; i++) {
		const struct http_header *f = &h.headers[i];
		if (hop_by_hop(&h, f->name) || buf_room(names) < f->name.len)
			continue;
		if (s->text && http_str_eq(f->name, "content-length"))
			continue; /* the base64's: the messages it decodes to are shorter */
		char *lower = names->data + names->end;
		h2head_lower(lower, f->name.p, f->name.len);
		names->end += f->name.len;
		int ctype = f->name.len == 12 && !memcmp(lower, "content-type", 12);
		if (ctype && f->value.len >= 16 && !strncmp(f->value.p, "application/grpc", 16))
			grpc = 1;
		if (ctype && f == ct && web && buf_room(names) >= f->value.len) {
			/* gRPC-Web: application/grpc, and the rest of it, to the gRPC server */
			char *v = names->data + names->end;
			size_t vlen = 16 + f->value.len - rest;
			memcpy(v, "application/grpc", 16);
			memcpy(v + 16, f->value.p + rest, f->value.len - rest);
			names->end += vlen;
			s->rs.grpc_web = 1; /* its answer is translated back (h2resp) */
			s->rs.grpc_web_text = s->text;
			nv[n++] = (nghttp2_nv){(uint8_t *)lower, (uint8_t *)v, 12, vlen, 0};
			grpc = 1;
			continue;
		}
		nv[n++] =
		    (nghttp2_nv){(uint8_t *)lower, (uint8_t *)f->value.p, f->name.len, f->value.len,
				 h2head_unique_field(lower, f->name.len) ? NGHTTP2_NV_FLAG_NO_INDEX
									 : NGHTTP2_NV_FLAG_NONE};
	}
	if (grpc) /* gRPC servers want it: the client's own was hop-by-hop */
		nv[n++] = (nghttp2_nv){(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0};
	int body = h.framing == HTTP_BODY_CHUNKED ||
		   (h.framing == HTTP_BODY_LENGTH && h.content_length > 0);
	s->req = h.framing == HTTP_BODY_CHUNKED ? REQ_CHUNKED : body ? REQ_LENGTH : REQ_DONE;
	s->req_left = h.framing == HTTP_BODY_LENGTH ? h.content_length : 0;
	http_chunked_init(&s->ch);
	nghttp2_data_provider prd = {.source = {.ptr = s}, .read_callback = body_read};
	int32_t id = nghttp2_submit_request(c->ss, NULL, nv, n, body ? &prd : NULL, s);
	buf_put(&w->bufs, names); /* nghttp2 copied the fields */
	if (id < 0)
		return id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE ? -ECONNRESET : -ENOMEM;
	s->id = id;
	buf_consume(s->body, hlen);
	return 0;
}

/* An engine pool's request is whole in s->body (head and payload): the engine's call is
 * submitted in its place, or our own answer waits in rin. 0, or -errno. */
static int engine_submit(struct up_h2s *s)
{
	struct worker *w = s->up.w;
	/* the message in a buffer of the common size while it fits (a prompt's ids take at most
	 * a few bytes each), else in a body buffer */
	int small = buf_len(s->body) < w->bufs.size / 4, r;
	struct buf *msg = NULL;
	do {
		worker_buf_put(w, msg);
		if (!(msg = buf_get(small ? &w->bufs : &w->body_bufs)))
			return -ENOMEM;
		r = engine_call_begin(&s->eng, w, &s->up.be->pool->engine, buf_head(s->body),
				      buf_len(s->body), msg);
	} while (r == -ENOSPC && small-- > 0);
	worker_buf_put(w, s->body);
	s->body = msg;
	if (r == -ENOSPC) {
		engine_call_refuse(&s->eng, w, 413,
				   "the engine's request is larger than limits.body_buffer_bytes");
		r = 0;
	}
	if (r < 0)
		return r;
	if (r == 0) { /* answered here: no call */
		buf_consume(s->body, buf_len(s->body));
		eng_pump(s);
		return 0;
	}
	const char *scheme = s->up.be->tls ? "https" : "http";
	const char *auth = s->up.be->conf->ep.address;
	const char *path = engine_pb_path(s->eng.vllm ? ENGINE_VLLM : ENGINE_SGLANG);
	nghttp2_nv nv[] = {
	    {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
	    {(uint8_t *)":scheme", (uint8_t *)scheme, 7, strlen(scheme), 0},
	    {(uint8_t *)":authority", (uint8_t *)auth, 10, strlen(auth), 0},
	    {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
	    {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
	    {(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0},
	};
	nghttp2_data_provider prd = {.source = {.ptr = s}, .read_callback = body_read};
	int32_t id =
	    nghttp2_submit_request(s->c->ss, NULL, nv, sizeof(nv) / sizeof(nv[0]), &prd, s);
	if (id < 0)
		return id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE ? -ECONNRESET : -ENOMEM;
	s->id = id;
	return 0;
}

/* An engine pool's request outgrew a buffer of the common size: into a body buffer (it is
 * read whole). 0, or -ENOSPC (it is one already, or none can be had). */
static int grow_body(struct up_h2s *s)
{
	struct worker *w = s->up.w;
	if (s->body->cap != w->bufs.size)
		return -ENOSPC;
	struct buf *big = buf_get(&w->body_bufs);
	if (!big || big->cap < buf_len(s->body)) {
		worker_buf_put(w, big);
		return -ENOSPC;
	}
	memcpy(big->data, buf_head(s->body), buf_len(s->body));
	big->start = 0;
	big->end = (uint32_t)buf_len(s->body);
	buf_put(&w->bufs, s->body);
	s->body = big;
	return 0;
}

/* An engine pool's request head is whole in s->body (<hlen> bytes): kept there, its body to
 * follow it, until engine_submit(). 0, or -EPROTO. */
static int engine_head(struct up_h2s *s, size_t hlen)
{
	struct http_head h;
	if (http_parse_request(buf_head(s->body), hlen, hlen, &h) <= 0)
		return -EPROTO;
	int body = h.framing == HTTP_BODY_CHUNKED ||
		   (h.framing == HTTP_BODY_LENGTH && h.content_length > 0);
	s->req = h.framing == HTTP_BODY_CHUNKED ? REQ_CHUNKED : body ? REQ_LENGTH : REQ_DONE;
	s->req_left = h.framing == HTTP_BODY_LENGTH ? h.content_length : 0;
	http_chunked_init(&s->ch);
	return s->req == REQ_DONE ? engine_submit(s) : 0;
}

/* A gRPC-Web text request's body is not base64 (s->dec.why): the backend's stream is reset
 * and the client answered here, in gRPC's terms (trailers-only: grpc-status 3,
 * INVALID_ARGUMENT, and why), unless the backend's answer has begun (then it is cut); what
 * is left of the request is swallowed. */
static void refuse_text(struct up_h2s *s)
{
	struct up_h2 *c = s->c;
	char code[8], msg[160];
	size_t cap;
	s->req = REQ_DONE;
	if (s->rs.status || s->rs.head_in || (s->rin && buf_len(s->rin))) {
		stream_fail(s, -EPROTO);
		return;
	}
	s->refused = 1;
	if (c && s->id && !s->closed) {
		nghttp2_session_set_stream_user_data(c->ss, s->id, NULL);
		nghttp2_submit_rst_stream(c->ss, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
		if (s->unconsumed) /* the connection's credit (on_stream_close) */
			nghttp2_session_consume_connection(c->ss, s->unconsumed);
		s->unconsumed = 0;
		s->closed = 1;
	}
	int k = snprintf(code, sizeof(code), "%d", 3);
	size_t m = http_grpc_message(msg, sizeof(msg), s->dec.why);
	struct {
		const char *name, *value;
		size_t vlen;
	} f[] = {{":status", "200", 3},
		 {"content-type", "application/grpc", 16},
		 {"grpc-status", code, (size_t)k},
		 {"grpc-message", msg, m}};
	for (size_t i = 0; i <= sizeof(f) / sizeof(f[0]); i++) {
		char *p = rin_room(s, &cap);
		int n = !p ? -1
			: i < sizeof(f) / sizeof(f[0])
			    ? h2resp_field(&s->rs, p, cap, f[i].name, strlen(f[i].name), f[i].value,
					   f[i].vlen)
			    : h2resp_head_end(&s->rs, p, cap, 1);
		if (rin_wrote(s, n) < 0) {
			stream_fail(s, -EPROTO);
			return;
		}
	}
	s->resp_end = 1;
	stream_mark(s);
}

/* Payload bytes q[0..k) into s->body's room[0..room): copied, or decoded from base64 for a
 * gRPC-Web text request. How many of them were taken; -1 when they are not base64. */
static long put_body(struct up_h2s *s, const char *q, size_t k, size_t room)
{
	char *at = s->body->data + s->body->end;
	if (!s->text) {
		k = k < room ? k : room;
		memcpy(at, q, k);
		s->body->end += (uint32_t)k;
		return (long)k;
	}
	size_t used;
	long n = grpc_web_decode(&s->dec, q, k, &used, at, room);
	if (n < 0)
		return -1;
	s->body->end += (uint32_t)n;
	return (long)used;
}

/* Body bytes p[0..len) of the request: the payload into s->body as room allows (a chunked
 * body's framing dropped, its trailer section kept). How many of them were taken. */
static size_t take_body(struct up_h2s *s, const char *p, size_t len)
{
	/* a text body's room: a quantum's 3 bytes and what the characters scanned decode to */
	size_t least = s->text ? 16 : 1;
	size_t took = 0;
	while (took < len && s->req != REQ_DONE) {
		size_t room = buf_room(s->body);
		if (room < least) {
			buf_compact(s->body);
			if ((room = buf_room(s->body)) < least)
				break;
		}
		const char *q = p + took;
		size_t k = len - took;
		if (s->req == REQ_LENGTH) {
			k = k < s->req_left ? k : (size_t)s->req_left;
			long n = put_body(s, q, k, room);
			if (n < 0)
				goto refuse;
			if (!n && k)
				break; /* (never: room holds a quantum) */
			k = (size_t)n;
			s->req_left -= k;
			if (!s->req_left)
				s->req = REQ_DONE;
		} else {
			/* what is scanned is taken whole: a text body's characters, with the
			 * three a quantum may hold, decode to less than room */
			size_t most = s->text ? room - 8 : room;
			int is_data, trailer = http_chunked_in_trailers(&s->ch);
			ssize_t r = http_chunked_scan(&s->ch, q, k < most ? k : most, &is_data);
			if (r <= 0)
				break; /* written sound by the client side: never */
			k = (size_t)r;
			if (is_data && put_body(s, q, k, room) < 0)
				goto refuse;
			if (!is_data && trailer) {
				struct worker *w = s->up.w;
				if (!s->trail)
					s->trail = buf_get(&w->bufs);
				if (s->trail && buf_room(s->trail) >= k) {
					memcpy(s->trail->data + s->trail->end, q, k);
					s->trail->end += (uint32_t)k;
				}
			}
			if (http_chunked_done(&s->ch))
				s->req = REQ_DONE;
		}
		took += k;
	}
	if (s->text && s->req == REQ_DONE && grpc_web_decode_end(&s->dec) < 0)
		goto refuse;
	return took;
refuse:
	refuse_text(s);
	return len;
}

ssize_t up_h2_writev(struct upconn *up, const struct iovec *iov, int n)
{
	struct up_h2s *s = up->h2s;
	struct up_h2 *c = s->c;
	if (s->err || !c)
		return s->err ? s->err : -ECONNRESET;
	if (s->refused) { /* answered here (refuse_text): the rest goes nowhere */
		size_t all = 0;
		for (int i = 0; i < n; i++)
			all += iov[i].iov_len;
		return (ssize_t)all;
	}
	if (!s->body && !(s->body = buf_get(&up->w->bufs)))
		return -ENOMEM;
	size_t took = 0;
	for (int i = 0; i < n; i++) {
		const char *p = iov[i].iov_base;
		size_t len = iov[i].iov_len, k = 0;
		while (k < len && s->req == REQ_HEAD) {
			/* the head, whole, into s->body; then submitted */
			if (!buf_room(s->body))
				return -E2BIG;
			size_t m = len - k < buf_room(s->body) ? len - k : buf_room(s->body);
			memcpy(s->body->data + s->body->end, p + k, m);
			s->body->end += (uint32_t)m;
			const char *end =
			    memmem(buf_head(s->body), buf_len(s->body), "\r\n\r\n", 4);
			if (!end) {
				k += m;
				continue;
			}
			size_t hlen = (size_t)(end + 4 - buf_head(s->body));
			size_t extra = buf_len(s->body) - hlen; /* body bytes taken with it */
			s->body->end -= (uint32_t)extra;
			k += m - extra;
			int err = s->engine ? engine_head(s, hlen) : submit_head(s, hlen);
			if (err)
				return err;
		}
		if (k < len && s->req != REQ_HEAD && s->engine && s->eng.w) {
			k = len; /* answered already (or called): the rest is not the engine's */
		} else if (k < len && s->req != REQ_HEAD) {
			enum req_state was = s->req;
			k += take_body(s, p + k, len - k);
			if (s->engine && k < len && !buf_room(s->body) && grow_body(s) == 0)
				k += take_body(s, p + k, len - k);
			if (s->engine && k < len && !buf_room(s->body)) {
				/* past limits.body_buffer_bytes: refused here */
				s->req = REQ_DONE;
				buf_consume(s->body, buf_len(s->body));
				engine_call_refuse(&s->eng, up->w, 413,
						   "the request is larger than "
						   "limits.body_buffer_bytes");
				eng_pump(s);
				k = len;
			} else if (s->engine && was != REQ_DONE && s->req == REQ_DONE) {
				int err = engine_submit(s);
				if (err)
					return err;
			}
		}
		took += k;
		if (k < len)
			break;
	}
	if (s->deferred && s->id && (buf_len(s->body) || s->req == REQ_DONE)) {
		s->deferred = 0;
		nghttp2_session_resume_data(c->ss, s->id);
	}
	(void)conn_flush(c);
	if (!took) {
		up->writable = 0;
		return -EAGAIN;
	}
	return (ssize_t)took;
}

/* nghttp2 asks for request body bytes to send as DATA. */
static ssize_t body_read(nghttp2_session *ss, int32_t id, uint8_t *out, size_t len, uint32_t *flags,
			 nghttp2_data_source *src, void *ud)
{
	struct up_h2s *s = src->ptr;
	struct up_h2 *c = ud;
	(void)ss, (void)id;
	if (len > c->w->bufs.size - 64) /* a frame c->out can hold whole */
		len = c->w->bufs.size - 64;
	size_t k = buf_len(s->body) < len ? buf_len(s->body) : len;
	if (k) {
		memcpy(out, buf_head(s->body), k);
		buf_consume(s->body, k);
		if (!s->up.writable) { /* room again: the upstream half may write more */
			s->up.writable = 1;
			stream_mark(s);
		}
	}
	if (s->req == REQ_DONE && (!s->body || !buf_len(s->body))) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (s->engine) { /* (a body buffer, maybe: not held for the whole answer) */
			worker_buf_put(c->w, s->body);
			s->body = NULL;
		}
		if (s->trail) {
			struct h2head_field f[HTTP_MAX_HEADERS];
			nghttp2_nv nv[HTTP_MAX_HEADERS];
			size_t n = h2head_trailer_fields(buf_head(s->trail), buf_len(s->trail), f,
							 HTTP_MAX_HEADERS);
			for (size_t i = 0; i < n; i++)
				nv[i] = (nghttp2_nv){(uint8_t *)f[i].name, (uint8_t *)f[i].value,
						     f[i].nlen, f[i].vlen, 0};
			if (n && nghttp2_submit_trailer(c->ss, s->id, nv, n) == 0)
				*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
			buf_put(&c->w->bufs, s->trail);
			s->trail = NULL;
		}
		return (ssize_t)k;
	}
	if (!k) {
		s->deferred = 1;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)k;
}

/* --- the response, written as HTTP/1.1 into rin --- */

static struct up_h2s *stream_of(struct up_h2 *c, int32_t id)
{
	return nghttp2_session_get_stream_user_data(c->ss, id);
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *f, nghttp2_rcbuf *name,
		     nghttp2_rcbuf *value, uint8_t flags, void *ud)
{
	struct up_h2 *c = ud;
	(void)ss, (void)flags;
	struct up_h2s *s = f->hd.type == NGHTTP2_HEADERS ? stream_of(c, f->hd.stream_id) : NULL;
	if (!s || s->err)
		return 0;
	nghttp2_vec n = nghttp2_rcbuf_get_buf(name), v = nghttp2_rcbuf_get_buf(value);
	if (s->engine) {
		engine_call_header(&s->eng, (const char *)n.base, n.len, (const char *)v.base,
				   v.len);
		return 0;
	}
	size_t cap;
	char *p = rin_room(s, &cap);
	if (!p || rin_wrote(s, h2resp_field(&s->rs, p, cap, (const char *)n.base, n.len,
					    (const char *)v.base, v.len)) < 0)
		stream_fail(s, -EPROTO);
	return 0;
}

/* Body bytes p[0..len) into rin: joined to the chunk it ends with, or a chunk (or as they
 * are, with a content-length) of their own. 0, or -1 (no room). */
static int rin_data(struct up_h2s *s, const char *data, size_t len)
{
	if (len && join_chunk(s, data, len) == 0)
		return 0;
	size_t cap;
	char *p = rin_room(s, &cap);
	int k = p ? h2resp_data_begin(&s->rs, p, cap, len) : -1;
	if (k < 0 || cap - (size_t)k < len)
		return -1;
	memcpy(p + k, data, len);
	s->rin->end += (uint32_t)((size_t)k + len);
	p = rin_room(s, &cap);
	if (!p || rin_wrote(s, h2resp_data_end(&s->rs, p, cap, len)) < 0)
		return -1;
	if (k && len) { /* a chunk: the next DATA may join it */
		s->chunk_back = (uint32_t)((size_t)k + len + 2);
		s->chunk_len = (uint32_t)len;
	}
	return 0;
}

/* gRPC-Web text: a response's DATA is encoded this many bytes at a time, into a buffer on
 * the stack of this size */
#define GRPC_WEB_PIECE 1536
#define GRPC_WEB_PIECE_OUT 3328
_Static_assert(GRPC_WEB_ENCODE_ROOM(GRPC_WEB_PIECE) <= GRPC_WEB_PIECE_OUT, "its room");

/* A response head's end: its framing, as HTTP/1.1 writes it. */
static void head_end(struct up_h2s *s, int end_stream)
{
	size_t cap;
	char *p = rin_room(s, &cap);
	if (!p || rin_wrote(s, h2resp_head_end(&s->rs, p, cap, end_stream)) < 0)
		stream_fail(s, -EPROTO);
}

/* The response's end (END_STREAM): a chunked body's last chunk and the end of its trailers. */
static void resp_end(struct up_h2s *s)
{
	size_t cap;
	s->resp_end = 1;
	if (s->rs.web_text_body && !s->err) { /* the last bytes' quantum, padded */
		char b64[GRPC_WEB_FLUSH_ROOM];
		size_t n = grpc_web_encode_flush(&s->enc, b64);
		if (n && rin_data(s, b64, n) < 0)
			stream_fail(s, -EPROTO);
	}
	char *p = s->err ? NULL : rin_room(s, &cap);
	if (p && rin_wrote(s, h2resp_end(&s->rs, p, cap)) < 0)
		stream_fail(s, -EPROTO);
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
	struct up_h2 *c = ud;
	(void)ss;
	if (f->hd.type == NGHTTP2_GOAWAY) {
		c->goaway = 1; /* no new streams here; nghttp2 ends those it did not take */
		return 0;
	}
	struct up_h2s *s = f->hd.stream_id ? stream_of(c, f->hd.stream_id) : NULL;
	if (!s || s->err)
		return 0;
	int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
	if (s->engine) {
		s->rs.head_in = 1; /* (its DATA is taken from here on) */
		if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && end) {
			engine_call_end(&s->eng);
			eng_pump(s);
		}
		stream_mark(s);
		return 0;
	}
	if (f->hd.type == NGHTTP2_HEADERS && !s->rs.head_in)
		head_end(s, end);
	if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && end && s->rs.head_in &&
	    !s->err)
		resp_end(s);
	stream_mark(s);
	return 0;
}

static int on_data(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
		   void *ud)
{
	struct up_h2 *c = ud;
	(void)flags;
	struct up_h2s *s = stream_of(c, id);
	if (!s || s->err || !s->rs.head_in) {
		nghttp2_session_consume(ss, id, len);
		return 0;
	}
	s->unconsumed += len;
	if (s->engine) {
		if (engine_call_data(&s->eng, data, len) < 0)
			stream_fail(s, -EPROTO);
		else
			eng_pump(s);
		return 0; /* (on_frame_recv marks it: its pull gives the credit back) */
	}
	if (!s->rs.web_text_body) {
		if (rin_data(s, (const char *)data, len) < 0)
			stream_fail(s, -EPROTO);
		return 0;
	}
	/* a gRPC-Web text client's: base64, a piece at a time (grpc_web.h) */
	char b64[GRPC_WEB_PIECE_OUT];
	for (size_t at = 0; at < len; at += GRPC_WEB_PIECE) {
		size_t k = len - at < GRPC_WEB_PIECE ? len - at : GRPC_WEB_PIECE;
		size_t n = grpc_web_encode(&s->enc, data + at, k, b64);
		if (n && rin_data(s, b64, n) < 0) { /* (none: its bytes wait for a quantum) */
			stream_fail(s, -EPROTO);
			return 0;
		}
	}
	return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code, void *ud)
{
	struct up_h2 *c = ud;
	(void)ss;
	struct up_h2s *s = stream_of(c, id);
	if (!s)
		return 0;
	s->closed = 1;
	/* the connection's credit for what came and was not given back yet: no WINDOW_UPDATE
	 * of the stream's goes any more, and without this the connection's window shrinks by
	 * that much for good (a response's last DATA, read with its END_STREAM, every time) */
	if (s->unconsumed)
		nghttp2_session_consume_connection(c->ss, s->unconsumed);
	s->unconsumed = 0;
	nghttp2_session_set_stream_user_data(c->ss, id, NULL);
	if (!s->resp_end && !(s->engine && s->eng.end_in) && !s->err) /* reset, refused, cut */
		s->err = code == NGHTTP2_REFUSED_STREAM ? -ECONNREFUSED : -ECONNRESET;
	stream_mark(s);
	return 0;
}

/* --- the connection --- */

static void conn_free(struct up_h2 *c)
{
	struct list_node *n;
	while ((n = list_pop_front(&c->spare)))
		free(container_of(n, struct up_h2s, link));
	loop_timer_stop(c->w->loop, &c->timer);
	list_del(&c->w->h2_conns[c->be->id], &c->link);
	if (c->ss)
		nghttp2_session_del(c->ss);
	if (c->tcp)
		upconn_close(c->tcp);
	buf_put(&c->w->bufs, c->out);
	free(c);
}

/* The connection failed (-errno): every stream fails with it (before its response: a
 * refused or reset connection, which the attempt retries; within: a cut), and detaches. */
static void conn_fail(struct up_h2 *c, int err, int tls)
{
	if (c->dead)
		return;
	c->dead = 1;
	struct list_node *n;
	for (n = list_first(&c->streams); n; n = list_next(&c->streams, n)) {
		struct up_h2s *s = container_of(n, struct up_h2s, link);
		if (s->up.connecting) {
			s->up.connecting = 0;
			s->up.failed = err;
			s->up.tls_failed = (unsigned)tls;
		}
		if (!s->resp_end && !s->err)
			s->err = err;
		stream_mark(s);
	}
	log_debug("h2 backend %s: connection failed: %s", c->be->conf->ep.address, strerror(-err));
}

/* Write what nghttp2 has while the socket takes it. 0, or -errno (the connection failed). */
static int conn_flush(struct up_h2 *c)
{
	struct upconn *t = c->tcp;
	if (c->dead || t->connecting || t->failed)
		return 0;
	for (;;) {
		if (c->out && buf_len(c->out)) {
			ssize_t k = net_conn_write(&t->conn, buf_head(c->out), buf_len(c->out));
			if (k == -EAGAIN || k == -EINTR) {
				t->writable = 0;
				return 0;
			}
			if (k < 0)
				goto fail;
			buf_consume(c->out, (size_t)k);
			if (buf_len(c->out))
				continue;
		}
		const uint8_t *p;
		ssize_t n = nghttp2_session_mem_send(c->ss, &p);
		if (n < 0) {
			conn_fail(c, -EPROTO, 0);
			return -EPROTO;
		}
		if (!n)
			return 0;
		ssize_t k = net_conn_write(&t->conn, p, (size_t)n);
		if (k == -EAGAIN || k == -EINTR)
			k = 0;
		else if (k < 0)
			goto fail;
		if (k < n) {
			t->writable = 0;
			if (!c->out && !(c->out = buf_get(&c->w->bufs)))
				goto fail;
			buf_compact(c->out);
			if (buf_room(c->out) < (size_t)(n - k))
				goto fail; /* a frame larger than a buffer: never (body_read) */
			memcpy(c->out->data + c->out->end, p + k, (size_t)(n - k));
			c->out->end += (uint32_t)(n - k);
			return 0;
		}
	}
fail:
	conn_fail(c, -ECONNRESET, 0);
	return -ECONNRESET;
}

/* Feed what the backend sent to nghttp2 until the socket is empty. */
static void conn_read(struct up_h2 *c)
{
	struct upconn *t = c->tcp;
	char b[16384];
	while (!c->dead && (t->readable || t->hup || t->conn.ssl)) {
		ssize_t n = net_conn_read(&t->conn, b, sizeof(b));
		if (n == -EAGAIN || n == -EINTR) {
			t->readable = 0;
			return;
		}
		if (n <= 0) {
			conn_fail(c, n ? (int)n : -ECONNRESET, 0);
			return;
		}
		ssize_t r = nghttp2_session_mem_recv(c->ss, (const uint8_t *)b, (size_t)n);
		if (r < 0) {
			log_debug("h2 backend %s: %s", c->be->conf->ep.address,
				  nghttp2_strerror((int)r));
			conn_fail(c, -EPROTO, 0);
			return;
		}
	}
}

/* The connection's event or timer: connect, read, write, tell the owners; then it may go. */
static void conn_process(struct up_h2 *c)
{
	struct upconn *t = c->tcp;
	struct worker *w = c->w;
	c->busy++;
	if (!c->dead && t->failed)
		conn_fail(c, t->failed, t->tls_failed);
	if (!c->dead && !c->ready && !t->connecting) {
		c->ready = 1;
		if (t->conn.ssl && !net_tls_alpn_is(&t->conn, "h2")) {
			log_warn("h2 backend %s: its TLS handshake did not agree on h2 (ALPN)",
				 c->be->conf->ep.address);
			conn_fail(c, -EPROTO, 1);
		}
		struct list_node *n;
		for (n = list_first(&c->streams); !c->dead && n; n = list_next(&c->streams, n)) {
			struct up_h2s *s = container_of(n, struct up_h2s, link);
			s->up.connecting = 0;
			s->up.writable = 1;
			stream_mark(s);
		}
	}
	if (!c->dead && c->ready) {
		conn_read(c);
		(void)conn_flush(c);
		if (!c->dead && !nghttp2_session_want_read(c->ss) &&
		    !nghttp2_session_want_write(c->ss))
			conn_fail(c, -ECONNRESET, 0);
	}
	tell_owners(c);
	if (!c->dead && c->ready)
		(void)conn_flush(c); /* what the owners asked meanwhile (a reset, a body) */
	c->busy--;
	if (c->busy)
		return;
	if (c->dead || (c->goaway && !c->nstreams)) {
		if (!c->nstreams) {
			conn_free(c);
			return;
		}
	}
	uint64_t now = loop_now(w->loop);
	if (!c->nstreams) {
		uint64_t due = c->quiet_ms + w->conf->timeouts.idle_ms;
		if (due <= now || w->draining) {
			conn_free(c);
			return;
		}
		loop_timer_set(w->loop, &c->timer, due);
	} else if (c->told.count) {
		loop_timer_set(w->loop, &c->timer, now);
	} else {
		loop_timer_stop(w->loop, &c->timer);
	}
}

static void conn_on_event(void *owner)
{
	conn_process(owner);
}

static void conn_on_timer(struct loop_timer *t)
{
	conn_process(container_of(t, struct up_h2, timer));
}

/* A new connection to <be>: connecting, its SETTINGS queued. NULL with *err. */
static struct up_h2 *conn_open(struct worker *w, struct backend *be, int *err)
{
	struct up_h2 *c = calloc(1, sizeof(*c));
	nghttp2_session_callbacks *cb = NULL;
	nghttp2_option *opt = NULL;
	if (!c || nghttp2_session_callbacks_new(&cb) || nghttp2_option_new(&opt)) {
		*err = -ENOMEM;
		goto fail;
	}
	nghttp2_session_callbacks_set_on_header_callback2(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	nghttp2_option_set_max_send_header_block_length(opt, w->bufs.size);
	nghttp2_option_set_peer_max_concurrent_streams(opt, 100);
	h2mem_init(&c->mem, &w->h2mem); /* a request takes no trip through malloc */
	if (nghttp2_session_client_new3(&c->ss, cb, c, opt, &c->mem)) {
		*err = -ENOMEM;
		goto fail;
	}
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	cb = NULL;
	opt = NULL;
	c->w = w;
	c->be = be;
	c->timer.fn = conn_on_timer;
	list_init(&c->streams);
	list_init(&c->spare);
	list_init(&c->told);
	c->quiet_ms = loop_now(w->loop);
	/* a stream's window is a quarter of a buffer: rin holds it with its framing */
	const nghttp2_settings_entry iv[] = {
	    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, w->bufs.size / 4},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, w->bufs.size / 2},
	};
	if (nghttp2_submit_settings(c->ss, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) ||
	    nghttp2_session_set_local_window_size(c->ss, NGHTTP2_FLAG_NONE, 0, 1 << 24)) {
		*err = -ENOMEM;
		goto fail;
	}
	if (!(c->tcp = upconn_open(w, be, err)))
		goto fail;
	upconn_own(c->tcp, c, conn_on_event);
	list_push_back(&w->h2_conns[be->id], &c->link);
	return c;
fail:
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	if (c && c->ss)
		nghttp2_session_del(c->ss);
	free(c);
	return NULL;
}

/* The connection a new stream to <be> goes on: the least busy that takes new streams, a new
 * one while it is full and there are fewer than http2_connections; NULL with *err. */
static struct up_h2 *conn_pick(struct worker *w, struct backend *be, int *err)
{
	struct up_h2 *best = NULL;
	unsigned open = 0, gen = atomic_load_explicit(&be->gen, memory_order_relaxed);
	struct list_node *n;
	for (n = list_first(&w->h2_conns[be->id]); n; n = list_next(&w->h2_conns[be->id], n)) {
		struct up_h2 *c = container_of(n, struct up_h2, link);
		if (c->tcp && c->tcp->gen != gen)
			c->goaway = 1; /* made to an address discovery has since replaced */
		if (c->dead || c->goaway)
			continue;
		open++;
		if (!best || c->nstreams < best->nstreams)
			best = c;
	}
	unsigned most = best ? nghttp2_session_get_remote_settings(
				   best->ss, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
			     : 0;
	if (best && (best->nstreams < most || open >= be->conf->http2_connections))
		return best;
	return conn_open(w, be, err);
}

struct upconn *up_h2_get(struct worker *w, struct backend *be, int *err)
{
	struct up_h2 *c = conn_pick(w, be, err);
	if (!c)
		return NULL;
	struct list_node *n = list_pop_front(&c->spare);
	struct up_h2s *s = n ? container_of(n, struct up_h2s, link) : malloc(sizeof(*s));
	if (!s) {
		*err = -ENOMEM;
		return NULL;
	}
	memset(s, 0, sizeof(*s));
	s->c = c;
	s->up.w = w;
	s->up.be = be;
	s->up.h2s = s;
	s->engine = be->pool && be->pool->engine.api != CONF_ENGINE_OPENAI && be->pool->engine.tm;
	s->up.gen = c->tcp->gen;
	s->up.served = c->ready; /* on a connection that is up: as a kept-alive one */
	net_conn_init(&s->up.conn, -1);
	s->up.connecting = !c->ready;
	s->up.writable = c->ready;
	list_push_back(&c->streams, &s->link);
	c->nstreams++;
	if (!c->told.count) /* not idle any more; a kick still due stays */
		loop_timer_stop(w->loop, &c->timer);
	return &s->up;
}

void up_h2_put(struct upconn *up)
{
	struct up_h2s *s = up->h2s;
	struct up_h2 *c = s->c;
	struct worker *w = up->w;
	stream_unmark(s);
	buf_put(&w->bufs, up->in);
	worker_buf_put(w, s->body);
	if (s->engine)
		engine_call_free(&s->eng);
	buf_put(&w->bufs, s->trail);
	buf_put(&w->bufs, s->rin);
	free(up->tls_error);
	if (!c) {
		free(s);
		return;
	}
	if (s->id && !s->closed) {
		nghttp2_session_set_stream_user_data(c->ss, s->id, NULL);
		if (!c->dead) {
			nghttp2_submit_rst_stream(c->ss, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
			if (s->unconsumed) /* the connection's credit (on_stream_close) */
				nghttp2_session_consume_connection(c->ss, s->unconsumed);
		}
	}
	list_del(&c->streams, &s->link);
	list_push_front(&c->spare, &s->link);
	if (!c->busy)
		(void)conn_flush(c);
	if (!--c->nstreams) {
		c->quiet_ms = loop_now(w->loop);
		if (!c->busy && (w->draining || c->dead || c->goaway)) {
			conn_free(c); /* its last stream: it goes */
			return;
		}
		if (!c->busy) /* the timer looks at it: idle until timeouts.idle_ms */
			loop_timer_set(w->loop, &c->timer, c->quiet_ms + w->conf->timeouts.idle_ms);
	}
}

void up_h2_close_idle(struct worker *w)
{
	for (size_t i = 0; i < w->rt->nbackends; i++) {
		struct list_node *n, *next;
		for (n = list_first(&w->h2_conns[i]); n; n = next) {
			next = list_next(&w->h2_conns[i], n);
			struct up_h2 *c = container_of(n, struct up_h2, link);
			if (!c->nstreams && !c->busy)
				conn_free(c);
			else
				c->goaway = 1;
		}
	}
}
