/*
 * h2.c - the HTTP/2 client codec (see h2.h): the connection, its streams, and the codec
 * operations each stream's exchange uses.
 *
 * nghttp2 reads the frames (nghttp2_session_mem_recv over cl->in) and calls back; the
 * callbacks only record what came -- a stream's head written as HTTP/1.1 into its own buffer
 * (http/h2head.h), its body bytes appended to its input, its end, a reset -- and mark the
 * stream to run. The streams run after nghttp2 has returned: a stream whose head is whole
 * becomes an exchange (the head parsed by the HTTP/1 parser into the worker's scratch, its
 * target brought to its normal form, as h1.c does) and goes through stages_run(); the
 * relay moves its body upstream and its response back. Then nghttp2's frames
 * (nghttp2_session_mem_send) go to the socket, small ones gathered in cl->out and written
 * together, the unwritten rest in cl->out. nghttp2 is never entered from within a stage: what
 * a stage does to the session (a response submitted, a reset) is sent when control is back at
 * the connection (its event, or its timer, which a stream's wake sets due at once, so that
 * the streams woken in one turn run in one pass and one write). Closing the connection happens
 * there too, so a stream outlives every call chain that reaches it through its exchange.
 *
 * Request bodies: a stream's DATA is appended to its input buffer as the HTTP/1 body the
 * backend will read (as sent when the client gave content-length; without one the stream
 * waits for its end before it starts, so a whole body gets its length and is read by every
 * stage as one sent with it, and a body too long or slow for that goes chunked), where
 * x->req tracks it as it tracks an HTTP/1 client's, and up_h1_send() writes it upstream from
 * there. Flow control is ours (nghttp2's automatic WINDOW_UPDATE is off): a stream's
 * window is limits.http2_stream_window, at most half its buffer, and its credit goes back only once
 * the buffer has drained to a quarter, so a client sends no faster than the backend takes; a body
 * read before admission (limits.body_buffer_bytes) moves to a body buffer as an HTTP/1 one does.
 *
 * Responses: the final head goes through the same rules as an HTTP/1 client's (X-Request-Id,
 * response_headers: rewrite_response_fields()), field by field into the HTTP/2 field list, no
 * HTTP/1 text written and parsed back between, with its hop-by-hop fields dropped and names in
 * lower case; the names and values lie in a buffer of the connection's, held until the HEADERS
 * frames whose fields it has are gone, so nghttp2 does not copy them again (a response with no body
 * as HEADERS that end the stream, so a gRPC trailers-only answer stays one); its body stays in the
 * upstream connection's input (up->in) until nghttp2 asks for it (a chunked body's framing dropped
 * as it goes), one copy into the frame nghttp2 writes. A client whose window is closed takes
 * nothing, so up->in stays full and the backend is not read: the proxy never holds more than a
 * buffer of any response -- but one a feature keeps for the client (xhooks.h: the cache's fill,
 * bounded by cache.max_object), which leaves up->in as it comes and goes out from there
 * (read_kept), whatever the client's window. Trailers cross both ways: a request's go to the
 * backend in the chunked body's trailer section, a chunked response's trailer section (kept in
 * trail as take_body passes it) goes out as HTTP/2 trailers. The proxy's own answers are written by
 * the HTTP/1 writers (rewrite_error(), rewrite_json()) into a buffer of the stream and sent from
 * there; to a gRPC request they are trailers-only responses with the gRPC status they stand for
 * (http/grpc.h), and its grpc-timeout is its deadline. A streaming request waiting for its answer
 * (routes.sse_heartbeat_ms, sse.h) gets the proxy's own event-stream head and SSE comments as DATA
 * from <own> (early), then the backend's events, or an error event from the same writers. A stream
 * reset by the client (RST_STREAM) ends its exchange at once: its backend connection is closed (an
 * HTTP/2 backend's stream reset), the cancellation an engine understands.
 *
 * WebSocket (RFC 8441, tunnel.h): an extended CONNECT with :protocol websocket is written as
 * the HTTP/1.1 handshake (http/h2head.h) with a key the proxy makes; the backend's 101, its
 * accept checked, becomes the stream's 200, and from then the stream is a tunnel: its DATA goes
 * to the backend as the socket takes it (credit back as s->in drains), the backend's bytes go
 * out from up->in as the client's window lets them (read_tunnel), each side's end is passed on
 * once its bytes went, and its clock is timeouts.tunnel_idle_ms (tunnel_due), not the
 * exchange's deadlines.
 *
 * Deadlines: a stream's exchange keeps its own (proxy/deadline.h), and the connection's timer
 * is set to the earliest; each stream keeps its exchange's next one between the runs that
 * can move it (h2s.due), so a pass over the connection's streams touches no exchange that did
 * not run. A stream with no exchange waits on its client alone, and the timer bounds that too: a
 * header block left unfinished (nothing else may come on the connection meanwhile) closes the
 * connection after timeouts.header_ms, and a proxy's own answer the client takes none of (its
 * window shut) for timeouts.send_ms is reset, so no stream outlives every deadline.
 *
 * Defences (docs/http2.md): the counting and the policy are ours, nghttp2's own limits stay
 * behind them as a backstop. RST_STREAM (the client's, and the proxy's own for a stream the
 * client got wrong) and the frames that carry no request (SETTINGS, PING, PRIORITY, empty
 * DATA) each draw on a token bucket of the connection (limits.http2_max_resets,
 * limits.http2_max_control_frames); an empty one, or nghttp2 finding a CONTINUATION flood,
 * ends the connection with GOAWAY ENHANCE_YOUR_CALM and nothing more is read or started (not
 * even the rest of the read that emptied it: nghttp2 stops at the next frame). A
 * header list is counted as it is decoded and refused 431 past limits.http2_max_header_list
 * (an HPACK bomb decodes into nothing kept); one that decodes past H2_BOMB_TIMES the limit
 * ends the connection, since every value decoded costs a check. A stream whose response waits on a
 * shut window is a full client to timeouts.send_ms, as a full socket is over HTTP/1.1. A client
 * whose stream ids near their end gets GOAWAY (NO_ERROR). Each is counted (PM_PROCESS_H2_DEFENCES).
 *
 * Streams come from the connection's spares once it has had as many at once; the exchange
 * from the worker's free list, as every exchange does.
 */
#include "proxy/h2.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/grpc.h"
#include "http/h2mem.h"
#include "http/h2head.h"
#include "http/target.h"
#include "http/wskey.h"
#include "guard/auth.h"
#include "proxy/access.h"
#include "proxy/caching.h"
#include "proxy/deadline.h"
#include "proxy/debugreq.h"
#include "proxy/dispatch.h"
#include "proxy/forward.h"
#include "proxy/hedge.h"
#include "proxy/hit.h"
#include "proxy/llm_explain.h"
#include "proxy/pace.h"
#include "proxy/pd.h"
#include "proxy/quota.h"
#include "proxy/relay.h"
#include "proxy/route.h"
#include "proxy/sse.h"
#include "proxy/stages.h"
#include "proxy/tunnel.h"
#include "proxy/up_h1.h"
#include "runtime/proxy_metric.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
/* Interim (1xx) responses a backend may send per stream; they are not passed on. */
#define H2_INTERIM_MAX 8
/* Passes of reads, stream runs and writes in one turn, before the timer takes over. */
#define H2_PASSES 64
/* Gathering frames for one write (h2_flush): a frame this large goes on its own, and no more
 * are gathered once less room is left than a frame of the default largest size takes. */
#define H2_GATHER_MAX 4096
#define H2_FRAME_ROOM (16384 + 9)
/* Ranges of stream ids a client skipped that are kept (ids_check); past them, the oldest go. */
#define H2_GAPS 4
/* Draining: a connection with no stream left is closed after this long (GOAWAY sent). */
#define H2_DRAIN_IDLE_MS 1000
/* A client stream id past this: GOAWAY (NO_ERROR) with it as the last, so the client moves to
 * a new connection while ids remain for the streams it has open (at most 1000). */
#define H2_LAST_IDS (INT32_MAX - 2000)
/* A header list decoding past this many times limits.http2_max_header_list is no client's
 * honest mistake (an HPACK bomb: a table entry named over and over): the connection ends.
 * Below it, a long list is refused 431 and the connection goes on. */
#define H2_BOMB_TIMES 16
/* Body buffers (limits.body_buffer_bytes, BODY_BUFS_MAX a worker) one connection's streams may
 * hold at once: a client's streams share these as an HTTP/1 client's one request holds one,
 * so the bodies of one connection, held or sent slowly, never take every buffer of the worker
 * (its other streams wait for one of these, as a body waits when all are lent). */
#define H2_BODY_BUFS (BODY_BUFS_MAX / 16)

struct h2;

/* One stream: its request head until the exchange starts, its body, the proxy's own answer. */
struct h2s {
	struct list_node link; /* on h->streams, or h->spare */
	struct h2 *h;
	int32_t id;
	struct exchange *x; /* its exchange, or NULL (not started, or ended) */
	struct xpace pace;
	struct buf *head;  /* the request head as HTTP/1.1, until head done */
	struct buf *in;	   /* the request body as the backend reads it */
	struct buf *own;   /* the proxy's own answer's body, being sent */
	struct buf *trail; /* a chunked response's trailer section, as the backend sent it */
	nghttp2_rcbuf *meth, *path, *auth;
	struct h2head hh;
	struct http_chunked dech; /* a chunked response's framing, dropped as it goes */
	uint64_t unconsumed;	  /* DATA bytes taken whose credit has not gone back */
	uint64_t hlist;		  /* its header list's bytes as RFC 9113 6.5.2 counts them */
	uint64_t since_ms;	  /* its start, or the client last took of the proxy's answer */
	unsigned interims;
	unsigned headers_in : 1; /* the request head is whole */
	unsigned started : 1;	 /* ... and was looked at */
	unsigned end_stream : 1; /* the request's end came */
	unsigned chunked : 1;	 /* its body goes upstream chunked */
	unsigned submitted : 1;	 /* a response head was submitted */
	unsigned eof : 1;	 /* ... and its body has ended */
	unsigned deferred : 1;	 /* nghttp2 waits for body bytes (resume it) */
	unsigned run : 1;	 /* run it when control is back at the connection */
	unsigned cut : 1;	 /* the backend closed mid-response: reset once sent */
	unsigned flow_bad : 1;	 /* the client sent past its window: reset */
	unsigned given_up : 1;	 /* its client took none of the proxy's answer in time: reset */
	unsigned trailers : 1;	 /* request trailers went upstream: the last chunk is written */
	unsigned grpc : 1;	 /* a gRPC request: the proxy's own answers in gRPC's terms */
	unsigned early : 1; /* the proxy's own event-stream head went (sse.h): own holds comments */
	unsigned sized : 1; /* no content-length: the head ends at the start (stream_end_head) */
	unsigned hit : 1;   /* answered from the cache (hit.h): its body comes from the object */
	unsigned held : 1;  /* its response head's fields lie in h->fields until its HEADERS went */
	unsigned body_buf : 1;	   /* <in> is a body buffer (H2_BODY_BUFS) */
	unsigned ws : 1;	   /* an extended CONNECT for a WebSocket (RFC 8441) */
	unsigned tun : 1;	   /* ... whose tunnel is open: DATA is its bytes both ways */
	unsigned tun_eof : 1;	   /* ... the backend ended its side: END_STREAM once sent */
	unsigned up_shut : 1;	   /* ... the client's end was passed on to the backend */
	uint8_t protocol;	   /* its :protocol: 0 none, 1 websocket, 2 another */
	uint8_t tun_end;	   /* 1 + the enum tunnel_end the proxy reset it for, else 0 */
	uint64_t tun_ms;	   /* a tunnel's byte last moved, either way */
	char wskey[WSKEY_LEN + 1]; /* the Sec-WebSocket-Key the proxy sent for it */
	uint64_t grpc_timeout_ms;  /* its grpc-timeout (0: none), its deadline from its start */
	uint64_t buf_retry_ms;	   /* held, waiting for a body buffer: when to look again */
	int32_t window_before;	   /* its send window as a SETTINGS frame began (window_check) */
	/* its exchange's next deadline as last computed (deadline_next), never later than the
	 * one it has now unless due_stale: set whenever the exchange may have moved (the stream
	 * ran, its client's window shut). A deadline that moves on its own moves later (the
	 * client took bytes, time passed), so a kept one can only wake the connection early. */
	uint64_t due;
	unsigned due_stale : 1;
};

/* A token bucket: <per_s> tokens a second, as many at most; kept in thousandths. */
struct h2_bucket {
	uint64_t milli;
	uint64_t at_ms;
};

struct h2 {
	struct client *cl;
	nghttp2_session *ss;
	struct list_head streams, spare;
	unsigned nstreams;
	int busy;     /* in h2_run: wakes only mark their stream */
	int fatal;    /* the session failed: close */
	int draining; /* GOAWAY sent */
	int calm;     /* a defence sent GOAWAY ENHANCE_YOUR_CALM: nothing more is read */
	struct h2_bucket resets, control; /* limits.http2_max_resets, _max_control_frames */
	uint64_t quiet_ms;		  /* when the last stream ended */
	unsigned body_bufs;		  /* body buffers its streams hold (H2_BODY_BUFS) */
	int32_t peer_window;		  /* the client's SETTINGS_INITIAL_WINDOW_SIZE */
	int32_t last_id;		  /* the highest stream id a client HEADERS named */
	int32_t gaps[H2_GAPS][2];	  /* stream ids it skipped (first, last), the latest */
	unsigned ngaps;
	nghttp2_mem mem; /* nghttp2's allocations: the worker's free lists (w->h2mem) */
	/* the names and values of response heads submitted and not yet sent (h2s.held: <nheld>
	 * of them), which nghttp2 does not copy; back to the worker once none is left */
	struct buf *fields;
	unsigned nheld;
};

static const struct exchange_codec_ops h2_codec;

int h2_preface(const char *p, size_t len)
{
	size_t n = len < H2_PREFACE_LEN ? len : H2_PREFACE_LEN;
	if (memcmp(p, H2_PREFACE, n))
		return -1;
	return len >= H2_PREFACE_LEN;
}

/* --- defences --- */

static void defence_count(struct h2 *h, enum h2_defence d)
{
	metrics_add(metrics_shard_self(h->cl->w->rt->metrics), PM_PROCESS_H2_DEFENCES, d, 1);
}

/* Take a token from <b> (refilled at <per_s> a second up to <per_s>): 0, or -1 when it is
 * empty. <per_s> 0: no limit. */
static int bucket_take(struct h2_bucket *b, unsigned per_s, uint64_t now)
{
	if (!per_s)
		return 0;
	uint64_t cap = (uint64_t)per_s * 1000;
	if (now > b->at_ms)
		b->milli += (now - b->at_ms) * per_s;
	b->at_ms = now;
	if (b->milli > cap)
		b->milli = cap;
	if (b->milli < 1000)
		return -1;
	b->milli -= 1000;
	return 0;
}

/* A defence ends the connection: counted, GOAWAY ENHANCE_YOUR_CALM, nothing more read or
 * started; the streams under way are cut when it closes. */
static void h2_calm(struct h2 *h, enum h2_defence d, const char *why)
{
	if (h->calm)
		return;
	h->calm = 1;
	defence_count(h, d);
	log_debug("%s: HTTP/2: %s: connection ended (GOAWAY ENHANCE_YOUR_CALM)", h->cl->ip, why);
	nghttp2_session_terminate_session(h->ss, NGHTTP2_ENHANCE_YOUR_CALM);
}

/* Was a stream reset for what its client did (a malformed stream, a window overrun)? Such
 * resets, as they are sent, draw on the same bucket as the client's own: a client that makes
 * the proxy reset its streams ("made you reset") is the rapid reset attack too. A stream
 * refused past SETTINGS_MAX_CONCURRENT_STREAMS is not counted: a client may open more before
 * it has read the proxy's SETTINGS, and a refused stream costs nothing. */
static int client_fault(uint32_t code)
{
	return code == NGHTTP2_PROTOCOL_ERROR || code == NGHTTP2_FLOW_CONTROL_ERROR ||
	       code == NGHTTP2_STREAM_CLOSED || code == NGHTTP2_FRAME_SIZE_ERROR;
}

/* A frame that carries no request (SETTINGS, PING, PRIORITY, an empty DATA): past
 * limits.http2_max_control_frames a second, the connection ends. */
static void control_frame(struct h2 *h)
{
	const struct conf_limits *lim = &h->cl->w->conf->limits;
	if (bucket_take(&h->control, lim->h2_max_control, loop_now(h->cl->w->loop)) < 0)
		h2_calm(h, H2_DEFENCE_CONTROL_FLOOD, "SETTINGS, PING or PRIORITY frames flood");
}

/* --- streams --- */

static struct h2s *stream_new(struct h2 *h, int32_t id)
{
	struct list_node *n = list_pop_front(&h->spare);
	struct h2s *s = n ? container_of(n, struct h2s, link) : malloc(sizeof(*s));
	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->h = h;
	s->id = id;
	s->since_ms = loop_now(h->cl->w->loop);
	s->due_stale = 1;
	list_push_back(&h->streams, &s->link);
	h->nstreams++;
	return s;
}

static void rcbuf_drop(nghttp2_rcbuf **r)
{
	if (*r)
		nghttp2_rcbuf_decref(*r);
	*r = NULL;
}

/* The stream's input goes back: a body buffer to the connection's count too. */
static void stream_in_drop(struct h2s *s)
{
	struct worker *w = s->h->cl->w;
	if (s->body_buf)
		s->h->body_bufs--;
	s->body_buf = 0;
	worker_buf_put(w, s->in);
	s->in = NULL;
}

/* The stream's response head is sent (or never will be): its fields' room in h->fields is
 * done with, and the buffer goes back once no head there waits. */
static void fields_unhold(struct h2s *s)
{
	struct h2 *h = s->h;
	if (!s->held)
		return;
	s->held = 0;
	if (!--h->nheld) {
		worker_buf_put(h->cl->w, h->fields);
		h->fields = NULL;
	}
}

/* Everything the stream holds goes back; it joins the spares. */
static void stream_release(struct h2s *s)
{
	struct h2 *h = s->h;
	struct worker *w = h->cl->w;
	rcbuf_drop(&s->meth);
	rcbuf_drop(&s->path);
	rcbuf_drop(&s->auth);
	worker_buf_put(w, s->head);
	stream_in_drop(s);
	worker_buf_put(w, s->own);
	worker_buf_put(w, s->trail);
	s->head = s->in = s->own = s->trail = NULL;
	fields_unhold(s); /* (a HEADERS never sent: nghttp2 reads it no more) */
	if (s->unconsumed && h->ss)
		nghttp2_session_consume_connection(h->ss, s->unconsumed);
	list_del(&h->streams, &s->link);
	list_push_front(&h->spare, &s->link);
	if (!--h->nstreams)
		h->quiet_ms = loop_now(w->loop);
}

/* <n> bytes of the tunnel moved <way>: its idle clock, the access log's bytes, the counts. */
static void tunnel_moved(struct h2s *s, enum tunnel_way way, size_t n)
{
	struct exchange *x = s->x;
	s->tun_ms = loop_now(x->w->loop);
	if (way == TUNNEL_TO_BACKEND)
		x->req.sent += n;
	else
		x->resp.sent += n;
	tunnel_count_bytes(x->w, way, n);
}

/* The exchange of a stream that closed: finished when its response went whole, else cut. */
static void stream_end_exchange(struct h2s *s, uint32_t code)
{
	struct exchange *x = s->x;
	struct worker *w = x->w;
	struct upconn *up = x->att->up;
	if (s->tun && code == NGHTTP2_NO_ERROR && s->in && buf_len(s->in) && up) {
		/* the client's last bytes came with its end, which closed the stream: they go
		 * now, as far as the backend's socket takes them (at most the stream's window) */
		ssize_t k = net_conn_write(&up->conn, buf_head(s->in), buf_len(s->in));
		if (k > 0)
			tunnel_moved(s, TUNNEL_TO_BACKEND, (size_t)k);
	}
	s->x = NULL;
	if (s->tun) { /* a tunnel's end: both sides closed, a reset, the proxy's own */
		enum tunnel_end why = s->tun_end		 ? (enum tunnel_end)(s->tun_end - 1)
				      : code == NGHTTP2_NO_ERROR ? TUNNEL_END_CLOSED
				      : w->draining		 ? TUNNEL_END_DRAIN
								 : TUNNEL_END_ERROR;
		log_debug("%s: stream %d: tunnel closed (code %u): %llu bytes to the backend, %llu "
			  "to the client",
			  s->h->cl->ip, s->id, code, (unsigned long long)x->req.sent,
			  (unsigned long long)x->resp.sent);
		tunnel_count_out(w, why);
		exchange_count_response(x, x->status);
		x->relayed = 1;
		exchange_free_slot(x);
		attempt_end(x->att, w, 0);
		exchange_free(x);
		return;
	}
	if (s->eof && code == NGHTTP2_NO_ERROR && (x->resp.done || s->hit)) {
		exchange_count_response(x, x->status);
		x->relayed = 1;
		exchange_free_slot(x);
		attempt_end(x->att, w, x->att->reusable && x->req.done && !x->req.ready);
	} else {
		log_debug("%s: stream %d ended (code %u) before its response did", s->h->cl->ip,
			  s->id, code);
		if (x->att->be)
			exchange_count_response(x, 0);
	}
	exchange_free(x);
}

/* The connection's timer fires at once: what a stage did to the session is sent from there
 * when no wake follows (an exchange's abort). */
static void h2_kick(struct h2 *h)
{
	struct worker *w = h->cl->w;
	loop_timer_set(w->loop, &h->cl->timer, loop_now(w->loop));
}

/* The stream's input moves to a body buffer (limits.body_buffer_bytes), and its window
 * grows with it. 0, -ENOSPC (it is one), -EBUSY (every body buffer is lent, or the
 * connection's H2_BODY_BUFS), -ENOMEM. */
static int stream_in_grow(struct h2s *s)
{
	struct worker *w = s->h->cl->w;
	if (s->in->cap >= w->body_bufs.size)
		return -ENOSPC;
	if (w->body_bufs.live >= BODY_BUFS_MAX || s->h->body_bufs >= H2_BODY_BUFS)
		return -EBUSY;
	struct buf *b = buf_get(&w->body_bufs);
	if (!b)
		return -ENOMEM;
	s->h->body_bufs++;
	s->body_buf = 1;
	memcpy(b->data, buf_head(s->in), buf_len(s->in));
	b->end = (uint32_t)buf_len(s->in);
	worker_buf_put(w, s->in);
	s->in = b;
	nghttp2_session_set_local_window_size(s->h->ss, NGHTTP2_FLAG_NONE, s->id,
					      (int32_t)(b->cap / 2));
	return 0;
}

/* Append p[0..n) to the stream's input, its buffer compacted or grown if need be. 0, -ENOSPC
 * (no room however it grows), -EBUSY (every body buffer lent), -ENOMEM. */
static int stream_in_put(struct h2s *s, const char *p, size_t n)
{
	struct worker *w = s->h->cl->w;
	if (!s->in && !(s->in = buf_get(&w->bufs)))
		return -ENOMEM;
	if (buf_room(s->in) < n)
		buf_compact(s->in);
	if (buf_room(s->in) < n) {
		if (buf_len(s->in) + n > w->body_bufs.size)
			return -ENOSPC;
		int err = stream_in_grow(s);
		if (err)
			return err;
	}
	memcpy(s->in->data + s->in->end, p, n);
	s->in->end += (uint32_t)n;
	return 0;
}

/* Give the client's credit back once the stream's input has drained to a quarter. */
static void stream_credit(struct h2s *s)
{
	if (!s->unconsumed || (s->in && buf_len(s->in) > s->in->cap / 4))
		return;
	nghttp2_session_consume(s->h->ss, s->id, s->unconsumed);
	s->unconsumed = 0;
}

/* Before admission: can the stream's input take no more? Past a quarter of a plain buffer it
 * moves to a body buffer (waiting for one when all are lent: the timer looks again); past a
 * quarter of that, no more credit goes back: what is in is what is read before admission. */
static int stream_in_full(struct h2s *s)
{
	if (!s->in || buf_len(s->in) < s->in->cap / 4)
		return 0;
	int err = stream_in_grow(s);
	if (err == -EBUSY)
		s->pace.buf_wait = 1;
	if (err == -ENOSPC)
		return 1;
	if (!err)
		stream_credit(s);
	return err == -ENOMEM;
}

/* --- responses --- */

static int hop_by_hop(const struct http_head *h, struct http_str n)
{
	switch (n.len) { /* (one comparison a field, not six) */
	case 2:
		return http_str_eq(n, "te") || http_conn_names(h, n);
	case 7:
		return http_str_eq(n, "upgrade") || http_conn_names(h, n);
	case 10:
		return http_str_eq(n, "connection") || http_str_eq(n, "keep-alive") ||
		       http_conn_names(h, n);
	case 16:
		return http_str_eq(n, "proxy-connection") || http_conn_names(h, n);
	case 17:
		return http_str_eq(n, "transfer-encoding") || http_conn_names(h, n);
	default:
		return h->nconn_tokens && http_conn_names(h, n);
	}
}

static ssize_t read_body(nghttp2_session *ss, int32_t id, uint8_t *out, size_t len, uint32_t *flags,
			 nghttp2_data_source *src, void *ud);

/*
 * A response head's fields gathered for nghttp2, :status first, names in lower case. With
 * <copy>, names and values are copied into <b>; with <held>, <b> is the connection's
 * h->fields, kept until that HEADERS frame has gone (on_frame_send) or its stream has, so
 * that nghttp2 takes them as they lie (NGHTTP2_NV_FLAG_NO_COPY_*) instead of copying each
 * again -- one buffer for the heads of all the streams run in a pass, not one each. Without
 * <copy> only the names are written into <b> and nghttp2 copies the fields at once.
 */
struct head_out {
	nghttp2_nv nv[HTTP_MAX_HEADERS + 1];
	size_t n;
	unsigned lines; /* fields an HTTP/1 head would have had (HTTP_MAX_HEADERS at most) */
	struct buf *b;
	uint8_t copy, held;
};

static int head_begin(struct head_out *o, struct buf *b, int copy, int held, int status)
{
	unsigned code = (unsigned)status % 1000;
	o->n = o->lines = 0;
	o->b = b;
	o->copy = (uint8_t)copy;
	o->held = (uint8_t)(copy && held);
	if (buf_room(b) < 3)
		return -1;
	char *st = b->data + b->end;
	st[0] = (char)('0' + code / 100);
	st[1] = (char)('0' + code / 10 % 10);
	st[2] = (char)('0' + code % 10);
	b->end += 3;
	o->nv[o->n++] = (nghttp2_nv){
	    (uint8_t *)":status", (uint8_t *)st, 7, 3,
	    o->held ? NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE : 0};
	return 0;
}

/* One field of the head (rewrite_field_fn): a field of the HTTP/1 hop alone is left out, a
 * configured value has its bytes outside printable ASCII as '?' and its spaces around it
 * dropped, as the HTTP/1 head it was once written as and parsed back had. 0, or -1: no
 * room, or more fields than an HTTP/1 head may have. */
static int head_put(void *ctx, enum rewrite_kind kind, const char *name, size_t nlen,
		    const char *value, size_t vlen)
{
	struct head_out *o = ctx;
	if (++o->lines > HTTP_MAX_HEADERS)
		return -1;
	if (kind == REWRITE_HOP)
		return 0;
	if (kind == REWRITE_SAFE) {
		while (vlen && value[0] == ' ')
			value++, vlen--;
		while (vlen && value[vlen - 1] == ' ')
			vlen--;
	}
	if (buf_room(o->b) < nlen + (o->copy ? vlen : 0) || o->n == HTTP_MAX_HEADERS + 1)
		return -1;
	char *lower = o->b->data + o->b->end, *v = (char *)value;
	h2head_lower(lower, name, nlen);
	o->b->end += (uint32_t)nlen;
	if (o->copy) {
		v = o->b->data + o->b->end;
		if (kind == REWRITE_SAFE)
			rewrite_safe_copy(v, value, vlen);
		else
			memcpy(v, value, vlen);
		o->b->end += (uint32_t)vlen;
	}
	uint8_t flags = h2head_unique_field(lower, nlen) ? NGHTTP2_NV_FLAG_NO_INDEX : 0;
	if (o->held)
		flags |= NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
	o->nv[o->n++] = (nghttp2_nv){(uint8_t *)lower, (uint8_t *)v, nlen, vlen, flags};
	return 0;
}

/* The field lines p[0..len) ("Name: value", each CRLF-ended: the proxy's own, as
 * caching_status_lines() writes them) into the head; none of them when they do not all fit,
 * as an HTTP/1 head leaves them out. */
static void head_put_lines(struct head_out *o, const char *p, size_t len)
{
	size_t n = o->n, end = o->b->end;
	unsigned lines = o->lines;
	for (const char *e = p + len; p < e;) {
		const char *eol = memchr(p, '\r', (size_t)(e - p));
		const char *colon = eol ? memchr(p, ':', (size_t)(eol - p)) : NULL;
		if (!colon)
			break;
		const char *v = colon + 1, *ve = eol;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		if (head_put(o, REWRITE_OWN, p, (size_t)(colon - p), v, (size_t)(ve - v)) < 0) {
			o->n = n;
			o->b->end = (uint32_t)end;
			o->lines = lines;
			return;
		}
		p = eol + 2;
	}
}

/* The fields of the HTTP/1 head <h> (an answer of the proxy's own, a cached one, an interim
 * or a 101 from the backend) but the hop-by-hop ones. 0, or -1 (no room). */
static int head_fields(struct head_out *o, const struct http_head *h)
{
	for (unsigned i = 0; i < h->nheaders; i++) {
		const struct http_header *f = &h->headers[i];
		if (!hop_by_hop(h, f->name) &&
		    head_put(o, REWRITE_RELAYED, f->name.p, f->name.len, f->value.p, f->value.len))
			return -1;
	}
	return 0;
}

/* What builds a response head's fields after its :status: the parsed head's (head_fields),
 * or the rewrite's for the client (rewrite_fields). 0, or -1: they do not fit. */
typedef int head_build_fn(struct head_out *o, const void *arg);

static int parsed_fields(struct head_out *o, const void *arg)
{
	return head_fields(o, arg);
}

/*
 * Build the stream's response head of <status> with <build> and submit it, its body from
 * read_body; <bodyless>: it has none, and the head ends the stream (a gRPC trailers-only
 * response stays one). The fields go into h->fields, held there until sent; a head that
 * does not fit what is left of it goes into a buffer of its own, which nghttp2 copies.
 * 0; -2: the head fits no buffer; -1: no memory.
 */
static int submit_built(struct h2s *s, int status, head_build_fn *build, const void *arg,
			int bodyless)
{
	struct h2 *h = s->h;
	struct worker *w = h->cl->w;
	struct head_out o;
	struct buf *own = NULL;
	if (!h->fields && !s->held)
		h->fields = buf_get(&w->bufs);
	uint32_t mark = h->fields ? h->fields->end : 0;
	int held = !s->held && h->fields && head_begin(&o, h->fields, 1, 1, status) == 0 &&
		   build(&o, arg) == 0;
	if (!held && h->fields)
		h->fields->end = mark;
	int rc = held ? 0 : !(own = buf_get(&w->bufs)) ? -1 : 0;
	if (!held && !rc && (head_begin(&o, own, 1, 0, status) < 0 || build(&o, arg) < 0))
		rc = -2;
	if (!rc) {
		nghttp2_data_provider prd = {.source = {.ptr = s}, .read_callback = read_body};
		rc = nghttp2_submit_response(h->ss, s->id, o.nv, o.n, bodyless ? NULL : &prd) ? -1
											      : 0;
	}
	worker_buf_put(w, own); /* nghttp2 copied those fields */
	if (held && !rc) {
		s->held = 1; /* until its HEADERS went (on_frame_send) */
		h->nheld++;
	} else if (held) {
		h->fields->end = mark;
	}
	if (!h->nheld) {
		worker_buf_put(w, h->fields);
		h->fields = NULL;
	}
	if (rc)
		return rc;
	s->submitted = 1;
	if (bodyless) {
		s->eof = 1;
		if (!s->end_stream) /* answered before the request ended: no more of it */
			nghttp2_submit_rst_stream(h->ss, NGHTTP2_FLAG_NONE, s->id,
						  NGHTTP2_NO_ERROR);
	}
	return 0;
}

/* Submit the response head <h> (an HTTP/1 head, already rewritten for the client). 0, or
 * -1. */
static int submit_head(struct h2s *s, const struct http_head *h, int bodyless)
{
	return submit_built(s, h->status, parsed_fields, h, bodyless) < 0 ? -1 : 0;
}

/* Bytes of a chunked response's trailer section join s->trail, to go out as HTTP/2 trailers
 * at the body's end (send_trailers); a section that does not fit a buffer is dropped whole. */
static void keep_trailer(struct h2s *s, const char *p, size_t n)
{
	struct worker *w = s->h->cl->w;
	if (!s->trail && !(s->trail = buf_get(&w->bufs)))
		return;
	if (buf_room(s->trail) < n) {
		worker_buf_put(w, s->trail);
		s->trail = NULL;
		return;
	}
	memcpy(s->trail->data + s->trail->end, p, n);
	s->trail->end += (uint32_t)n;
}

/* The trailer section kept in s->trail (field lines the chunked scanner found sound, then the
 * final CRLF) submitted as the stream's trailers, the fields h2head_trailer_ok() refuses
 * dropped, names in lower case. 0, or -1: none to send (the body ends the stream). */
static int send_trailers(struct h2s *s)
{
	struct worker *w = s->h->cl->w;
	struct buf *t = s->trail;
	struct h2head_field f[HTTP_MAX_HEADERS];
	nghttp2_nv nv[HTTP_MAX_HEADERS];
	size_t n = h2head_trailer_fields(buf_head(t), buf_len(t), f, HTTP_MAX_HEADERS);
	for (size_t i = 0; i < n; i++)
		nv[i] = (nghttp2_nv){(uint8_t *)f[i].name, (uint8_t *)f[i].value, f[i].nlen,
				     f[i].vlen, 0};
	int rc = n ? nghttp2_submit_trailer(s->h->ss, s->id, nv, n) : -1;
	worker_buf_put(w, s->trail); /* nghttp2 copied the fields */
	s->trail = NULL;
	return rc ? -1 : 0;
}

/* Up to <len> bytes of the relayed body at the front of up->in, framing dropped, into <out>.
 * Every byte it looks at leaves up->in. */
static size_t take_body(struct h2s *s, uint8_t *out, size_t len)
{
	struct exchange *x = s->x;
	struct buf *in = x->att->up ? x->att->up->in : NULL;
	size_t got = 0;
	while (got < len && in && x->resp.ready) {
		size_t k = x->resp.ready;
		int is_data = 1;
		if (x->resp.framing == HTTP_BODY_CHUNKED) {
			int trailer = http_chunked_in_trailers(&s->dech);
			ssize_t r = http_chunked_scan(&s->dech, buf_head(in),
						      k < len - got ? k : len - got, &is_data);
			if (r <= 0)
				break; /* scanned sound by up_h1_scan: never */
			k = (size_t)r;
			if (trailer)
				keep_trailer(s, buf_head(in), k);
		} else if (k > len - got) {
			k = len - got;
		}
		if (is_data) {
			memcpy(out + got, buf_head(in), k);
			got += k;
		}
		buf_consume(in, k);
		http_body_sent(&x->resp, k);
	}
	return got;
}

/* The body of an answer from the cache (hit.h): what the object holds past where the answer
 * is, waiting for a fill under way when it has caught up; a fill that fails resets it. */
static ssize_t read_hit(struct h2s *s, uint8_t *out, size_t len, uint32_t *flags)
{
	struct exchange *x = s->x;
	for (;;) {
		int end = 0;
		size_t k = hit_copy(x, (char *)out, len, &end);
		if (k)
			s->pace.client_took_ms = x->last_ms = loop_now(x->w->loop);
		if (end > 0) {
			*flags |= NGHTTP2_DATA_FLAG_EOF;
			s->eof = 1;
			if (!s->end_stream) /* answered before the request ended: no more of it */
				nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id,
							  NGHTTP2_NO_ERROR);
			return (ssize_t)k;
		}
		if (k)
			return (ssize_t)k;
		if (end < 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the fill failed: reset */
		if (!caching_wait(x, caching_ctx(x)->hit_pos)) {
			s->deferred = 1; /* the fill's notice wakes the exchange (codec_serve) */
			return NGHTTP2_ERR_DEFERRED;
		}
	}
}

/* Has the feature that keeps the body (xhooks.h) bytes the client has not had (<any>: or
 * news: the body's end, or its stop)? */
static int kept_ahead(const struct exchange *x, int any)
{
	int state;
	uint64_t kept = xhooks_keeper(x)->kept(x, &state);
	return kept > x->feed.pos || (any && state != 1);
}

/* The body of a relayed response from what a feature keeps (xhooks.h: the cache's fill), so
 * that the backend is read at its own pace whatever the client's window; should the feature
 * stop keeping, x->feed.raw: the rest comes from up->in, dechunked from where it stopped. */
static ssize_t read_kept(struct h2s *s, uint8_t *out, size_t len, uint32_t *flags)
{
	struct exchange *x = s->x;
	const struct xkeep *kp = xhooks_keeper(x);
	int state;
	uint64_t kept = kp->kept(x, &state);
	if (x->feed.pos < kept) {
		uint64_t to = kept - x->feed.pos > len ? x->feed.pos + len : kept;
		struct iovec iov[16];
		int n = kp->iov(x, x->feed.pos, to, iov, 16);
		size_t k = 0;
		for (int i = 0; i < n; i++) {
			memcpy(out + k, iov[i].iov_base, iov[i].iov_len);
			k += iov[i].iov_len;
		}
		x->feed.pos += k;
		x->resp.sent += k; /* the access log's bytes */
		s->pace.client_took_ms = x->last_ms = loop_now(x->w->loop);
		return (ssize_t)k;
	}
	if (state > 0) {
		s->deferred = 1; /* the next read of the backend resumes it (stream_resume) */
		return NGHTTP2_ERR_DEFERRED;
	}
	if (state < 0) {
		x->feed.raw = 1;
		s->dech = *kp->resume(x);
		return 0;
	}
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	s->eof = 1;
	if (!s->end_stream) /* answered before the request ended: no more of it */
		nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
	return 0;
}

/* --- WebSocket over HTTP/2 (RFC 8441): a stream's tunnel --- */

/* The backend's bytes (up->in, as they came) as the stream's DATA; its clean end as
 * END_STREAM once they went, a failure as a reset. */
static ssize_t read_tunnel(struct h2s *s, uint8_t *out, size_t len, uint32_t *flags)
{
	struct buf *in = s->x->att->up ? s->x->att->up->in : NULL;
	size_t k = in ? buf_len(in) : 0;
	if (k > len)
		k = len;
	if (k) {
		memcpy(out, buf_head(in), k);
		buf_consume(in, k);
		tunnel_moved(s, TUNNEL_TO_CLIENT, k);
		s->run = 1; /* up->in has room again: the backend may be read */
		return (ssize_t)k;
	}
	if (s->tun_eof) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		s->eof = 1;
		return 0;
	}
	if (s->cut)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	s->deferred = 1;
	return NGHTTP2_ERR_DEFERRED;
}

/* nghttp2 asks for the stream's body: the proxy's own answer, or the relayed response. */
static ssize_t read_body(nghttp2_session *ss, int32_t id, uint8_t *out, size_t len, uint32_t *flags,
			 nghttp2_data_source *src, void *ud)
{
	struct h2s *s = src->ptr;
	struct h2 *h = ud;
	struct worker *w = h->cl->w;
	(void)ss, (void)id;
	/* a frame the connection's buffer can hold whole, should the socket take part of it */
	if (len > w->bufs.size - 64)
		len = w->bufs.size - 64;
	struct exchange *x = s->x;
	if (s->own && (buf_len(s->own) || !x)) {
		size_t k = buf_len(s->own) < len ? buf_len(s->own) : len;
		memcpy(out, buf_head(s->own), k);
		buf_consume(s->own, k);
		s->since_ms = loop_now(w->loop);
		if (buf_len(s->own))
			return (ssize_t)k;
		if (x) { /* a heartbeat's comment: the backend's events follow */
			worker_buf_put(w, s->own);
			s->own = NULL;
		} else {
			*flags |= NGHTTP2_DATA_FLAG_EOF;
			s->eof = 1;
			if (!s->end_stream) /* answered before the request ended: no more of it */
				nghttp2_submit_rst_stream(h->ss, NGHTTP2_FLAG_NONE, s->id,
							  NGHTTP2_NO_ERROR);
		}
		return (ssize_t)k;
	}
	if (!x)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	if (s->hit)
		return read_hit(s, out, len, flags);
	if (s->tun)
		return read_tunnel(s, out, len, flags);
	if (x->feed.on && !x->feed.raw) {
		ssize_t r = read_kept(s, out, len, flags);
		if (!x->feed.raw)
			return r;
	}
	size_t k = take_body(s, out, len);
	if (k) {
		s->run = 1; /* up->in has room again: the backend may be read */
		s->pace.client_took_ms = x->last_ms = loop_now(w->loop);
	}
	if (x->resp.done && !x->resp.ready) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		s->eof = 1;
		if (s->trail && send_trailers(s) == 0)
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM; /* the trailers end it */
		if (!s->end_stream) /* answered before the request ended: no more of it */
			nghttp2_submit_rst_stream(h->ss, NGHTTP2_FLAG_NONE, s->id,
						  NGHTTP2_NO_ERROR);
		return (ssize_t)k;
	}
	if (!k && s->cut)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* reset: the rest never comes */
	if (!k) {
		s->deferred = 1;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)k;
}

/* More of the body is at hand for a stream nghttp2 stopped asking. */
static void stream_resume(struct h2s *s)
{
	struct exchange *x = s->x;
	const struct buf *tin = s->tun && x && x->att->up ? x->att->up->in : NULL;
	if (!s->deferred || !x ||
	    !(x->resp.ready || x->resp.done || s->cut || s->tun_eof || (tin && buf_len(tin)) ||
	      (x->feed.on && !x->feed.raw && kept_ahead(x, 1))))
		return;
	s->deferred = 0;
	nghttp2_session_resume_data(s->h->ss, s->id);
}

/* A gRPC request's answer from the proxy itself: a trailers-only response (:status 200,
 * content-type application/grpc) with the gRPC status its HTTP <status> stands for and
 * <detail> as grpc-message (http/grpc.h). 0, or -1. */
static int submit_grpc_answer(struct h2s *s, int status, const char *detail, const char *rid)
{
	char code[12], msg[256];
	int k = snprintf(code, sizeof(code), "%d", http_grpc_status(status));
	size_t m = http_grpc_message(msg, sizeof(msg), detail && detail[0] ? detail : "refused");
	nghttp2_nv nv[] = {
	    {(uint8_t *)":status", (uint8_t *)"200", 7, 3, 0},
	    {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
	    {(uint8_t *)"grpc-status", (uint8_t *)code, 11, (size_t)k, 0},
	    {(uint8_t *)"grpc-message", (uint8_t *)msg, 12, m, 0},
	    {(uint8_t *)"x-request-id", (uint8_t *)rid, 12, strlen(rid), NGHTTP2_NV_FLAG_NO_INDEX},
	};
	if (nghttp2_submit_response(s->h->ss, s->id, nv, sizeof(nv) / sizeof(nv[0]), NULL))
		return -1;
	s->submitted = 1;
	s->eof = 1;
	if (!s->end_stream) /* answered before the request ended: no more of it */
		nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
	return 0;
}

/*
 * The proxy's own answer on stream <s>: written as the HTTP/1 codec writes it (the route's
 * shape, its request id, Retry-After), then sent as HTTP/2. Ends the exchange, if any.
 */
static enum run stream_answer(struct h2s *s, int status, const char *detail, const char *json,
			      size_t jlen)
{
	struct client *cl = s->h->cl;
	struct worker *w = cl->w;
	struct exchange *x = s->x;
	char refused_id[REQUEST_ID_MAX + 1], timing[160], fields[2048];
	const char *rid = x ? x->names.reqid : refused_id;
	if (!x)
		reqnames_make_request_id(w, refused_id);
	const struct conf_route *route =
	    !x	       ? NULL
	    : x->route ? x->route
	    : x->head  ? route_match_head(w->conf, x->head, x->peer.tls ? x->peer.tls->sni : NULL)
		       : NULL;
	struct rewrite_error_info e = {
	    .status = status,
	    .detail = detail,
	    .keep_alive = 1,
	    .request_id = rid,
	    .retry_after_s = status == 503 && x && x->answer.retry_after_s ? x->answer.retry_after_s
			     : status == 503				   ? 1
			     : status == 429 && x			   ? x->answer.retry_after_s
									   : 0,
	    .challenges = route ? auth_challenges(route->auth) : 0,
	    .openai = route ? route->api == CONF_API_OPENAI : route_all_openai(w->conf),
	    .openai_type = status == 429 && x ? quota_refusal_type(x) : NULL,
	    .more_headers = forward_answer_headers(
		x, status == 429 && x ? quota_refusal_headers(x) : NULL, fields, sizeof(fields)),
	    .openai_code = x ? x->answer.code : NULL,
	    .openai_param = x ? x->answer.param : NULL,
	    .head_only = x && x->meth == HTTP_HEAD,
	};
	if (x && x->names.want_timing && debugreq_timing(x, 1, timing, sizeof(timing)) > 0)
		e.timing = timing;
	struct buf *b = buf_get(&w->bufs);
	int n = -1, r = -1;
	if (b && s->early) /* after the proxy's event-stream head: an error event ends it */
		n = rewrite_sse_error_event(b->data, b->cap, &e);
	else if (b && json)
		n = rewrite_json(b->data, b->cap, status, json, jlen, rid, 1);
	else if (b)
		n = rewrite_error(b->data, b->cap, &e);
	if (!x)
		access_log_refusal(w, cl->ip, n < 0 ? 0 : status, refused_id,
				   n > 0 ? (uint64_t)n : 0, NULL, 0);
	if (n > 0) {
		b->end = (uint32_t)n;
		r = s->early ? 0
			     : http_parse_response(b->data, (size_t)n, (size_t)n,
						   x ? x->meth : HTTP_GET, &w->head);
	}
	int grpc = s->grpc && !json && !s->submitted;
	if (grpc) { /* in gRPC's terms: its client reads no HTTP status */
		r = submit_grpc_answer(s, status, detail, rid) < 0 ? -1 : 1;
		worker_buf_put(w, b);
		b = NULL;
	}
	if (x) {
		exchange_count_response(x, status);
		x->log.status = status;
		x->log.bytes_out = n > 0 ? (uint64_t)n : 0;
		exchange_free(x);
		s->x = NULL;
	}
	if (n > 0 && s->early) { /* the event goes as DATA on the head already sent */
		worker_buf_put(w, s->own);
		s->own = b;
		b = NULL;
		r = 1;
		if (s->deferred) {
			s->deferred = 0;
			nghttp2_session_resume_data(s->h->ss, s->id);
		}
	} else if (r > 0 && !grpc) {
		buf_consume(b, (size_t)r);
		worker_buf_put(w, s->own);
		s->own = b;
		b = NULL;
		if (submit_head(s, &w->head, 0) < 0)
			r = -1;
	}
	worker_buf_put(w, b);
	if (r <= 0)
		nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id,
					  NGHTTP2_INTERNAL_ERROR);
	else if (!s->end_stream) /* the rest of the body is not wanted: read and dropped */
		stream_in_drop(s);
	log_debug("%s: stream %d: %d %s", cl->ip, s->id, status, detail);
	h2_kick(s->h);
	return RUN_AGAIN;
}

/* --- the stream's relay --- */

/* What relay_scan_body() says of the body bytes in the stream's input. */
static int request_scan(struct h2s *s)
{
	return s->ws ? 0 : relay_scan_body(s->x, s->in); /* a handshake's DATA is its tunnel's */
}

/* Client -> backend: the head, and the body bytes ready in the stream's input. */
static enum run send_upstream(struct h2s *s, int *progress)
{
	struct exchange *x = s->x;
	size_t k = 0;
	struct buf *alt = pd_decode_body(x); /* disaggregation: the decode's own body */
	if (alt && x->req.ready) {
		enum run r =
		    up_h1_send(x, buf_len(alt) ? buf_head(alt) : NULL, buf_len(alt), &k, progress);
		buf_consume(alt, k);
		int all = !buf_len(alt) && x->att->head_off == forward_head_len(x, x->att);
		k = all ? x->req.ready : k && x->req.ready > 1 ? x->req.ready - 1 : 0;
		if (k) {
			buf_consume(s->in, k);
			http_body_sent(&x->req, k);
			stream_credit(s);
		}
		return r;
	}
	enum run r =
	    up_h1_send(x, x->req.ready ? buf_head(s->in) : NULL, x->req.ready, &k, progress);
	if (k) {
		buf_consume(s->in, k);
		http_body_sent(&x->req, k);
		stream_credit(s);
	}
	return r;
}

/* One pass over both directions of the stream's exchange. */
static enum run relay_pass(struct h2s *s, int *progress)
{
	struct exchange *x = s->x;
	struct upconn *up = x->att->up;
	enum run r;
	if (up->failed)
		return dispatch_failed(x, up->tls_failed ? UP_TLS : UP_CONNECT);
	if (!up->connecting && !x->log.conn_ns && x->log.dispatch_ns)
		x->log.conn_ns = clock_now_ns();
	int bad = request_scan(s);
	if (bad && x->resp_head)
		return exchange_abort(x, "bad request body");
	if (bad)
		return relay_reply_bad_body(x, bad);
	if (!up->connecting && up->writable &&
	    (x->req.ready || (x->uphead && x->att->head_off < x->uphead->end)) &&
	    (r = send_upstream(s, progress)) != RUN_STAY)
		return r;
	if (x->att->up != up)
		return RUN_STAY;
	if (!x->resp.done && !up->connecting &&
	    (up->conn.readable || !up->conn.reading || up->read_got || up->read_end)) {
		int cut = 0;
		r = up_h1_read(x, progress, &cut);
		if (r != RUN_STAY)
			return r;
		if (cut)
			s->cut = 1;
	}
	if (x->att->up != up)
		return RUN_STAY;
	if (!x->resp_head && up->in && buf_len(up->in)) {
		r = up_h1_head(x);
		if (r == RUN_GONE || (r == RUN_AGAIN && s->x != x))
			return r;
		if (s->tun) { /* a 101: the stream is a tunnel now (codec_upgrade) */
			*progress = 1;
			return RUN_STAY;
		}
		if (r == RUN_AGAIN)
			*progress = 1;
		if (x->att->up != up)
			return RUN_STAY;
	}
	if (x->resp_head && up_h1_scan(x) < 0)
		return exchange_abort(x, "backend sent a malformed chunked body");
	stream_resume(s);
	return RUN_STAY;
}

/* The proxy ends a tunnel (a backend that failed, its idle time, a drain): RST_STREAM, its end
 * counted for <why> when the stream closes. */
static enum run tunnel_reset(struct h2s *s, enum tunnel_end why, uint32_t code, const char *what)
{
	log_debug("%s: stream %d: tunnel ended: %s", s->h->cl->ip, s->id, what);
	s->tun_end = (uint8_t)(1 + why);
	nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id, code);
	h2_kick(s->h);
	return RUN_STAY;
}

/* One pass of a stream's tunnel: the client's DATA (s->in) to the backend as it takes it, the
 * credit going back as it drains, so a backend that does not read stops the client; its
 * END_STREAM passed on as a shutdown once its bytes went. The backend read into up->in while
 * it has room, which read_tunnel() empties as the client's window lets it: a client that does
 * not read stops the backend. A buffer each way, given back when empty. */
static enum run tunnel_pass(struct h2s *s, int *progress)
{
	struct exchange *x = s->x;
	struct upconn *up = x->att->up;
	if (s->in && buf_len(s->in) && up->writable) {
		ssize_t k = net_conn_write(&up->conn, buf_head(s->in), buf_len(s->in));
		if (k == -EAGAIN || k == -EINTR) {
			up->writable = 0;
		} else if (k < 0) {
			return tunnel_reset(s, TUNNEL_END_ERROR, NGHTTP2_CONNECT_ERROR,
					    "writing to the backend failed");
		} else if (k > 0) {
			buf_consume(s->in, (size_t)k);
			if (buf_len(s->in))
				up->writable = 0; /* a short write: its socket buffer is full */
			tunnel_moved(s, TUNNEL_TO_BACKEND, (size_t)k);
			*progress = 1;
		}
	}
	if (s->in && !buf_len(s->in))
		stream_in_drop(s);
	stream_credit(s);
	if (s->end_stream && !s->in && !s->up_shut) {
		net_conn_shutdown(&up->conn);
		s->up_shut = 1;
	}
	if (!s->tun_eof && !s->cut) {
		int cut = 0;
		enum run r =
		    up_h1_read(x, progress, &cut); /* (its end is a cut: resp has no end) */
		if (r != RUN_STAY)
			return r;
		if (cut && up->read_end != 1)
			return tunnel_reset(s, TUNNEL_END_ERROR, NGHTTP2_CONNECT_ERROR,
					    "the backend's connection failed");
		if (cut)
			s->tun_eof = 1;
	}
	if (up->in && !buf_len(up->in))
		worker_buf_release(x->w, &up->in);
	stream_resume(s);
	return RUN_STAY;
}

static enum run stream_relay(struct h2s *s)
{
	struct exchange *x = s->x;
	if (s->tun) {
		int progress = 1;
		while (progress && !s->tun_end && s->x == x) {
			progress = 0;
			if (tunnel_pass(s, &progress) != RUN_STAY)
				return RUN_GONE;
		}
		return RUN_STAY;
	}
	if (pd_waiting(x))
		return pd_run(x);
	if (x->wt.state != W_IDLE || x->att->local_wait)
		return RUN_STAY;
	for (;;) {
		int progress = 0;
		if (x->wt.state != W_IDLE || !x->att->up)
			return RUN_STAY;
		if (s->tun) /* a 101 opened it in the last pass */
			return stream_relay(s);
		if (x->hedge && hedge_run(x))
			continue;
		enum run r = relay_pass(s, &progress);
		if (r != RUN_STAY || s->x != x)
			return r;
		if (!progress)
			return RUN_STAY;
	}
}

/* --- what an exchange asks of this codec --- */

static enum run codec_serve(struct exchange *x);

static enum run codec_reply(struct exchange *x, int status, const char *detail, int keep)
{
	(void)keep;
	if (caching_stale_on_error(x, status)) { /* stale-if-error answers in its place */
		exchange_drop_upstream(x);
		return codec_serve(x);
	}
	return stream_answer(x->conn, status, detail, NULL, 0);
}

static enum run codec_reply_json(struct exchange *x, int status, const char *json, size_t len)
{
	return stream_answer(x->conn, status, "", json, len);
}

static enum run codec_abort(struct exchange *x, const char *why)
{
	struct h2s *s = x->conn;
	log_debug("%s: stream %d aborted: %s", s->h->cl->ip, s->id, why);
	if (s->tun)
		tunnel_count_out(x->w, TUNNEL_END_ERROR);
	if (x->att->be)
		exchange_count_response(x, 0);
	exchange_free(x);
	s->x = NULL;
	nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
	h2_kick(s->h);
	return RUN_GONE;
}

/* The stream's head, parsed again into the worker's scratch (other streams used it since). */
static int reread_head(struct h2s *s)
{
	struct worker *w = s->h->cl->w;
	struct http_head_reader rd = {0};
	int r = http_head_read(&rd, buf_head(s->head), buf_len(s->head),
			       w->conf->limits.max_header_bytes, &w->head);
	if (r <= 0)
		return -EPROTO;
	s->x->head = &w->head;
	return 0;
}

static enum run codec_peek_body(struct exchange *x, size_t max, const char **body, size_t *len,
				int *all)
{
	struct h2s *s = x->conn;
	uint64_t now = loop_now(x->w->loop);
	if (!x->reqbody.peeked)
		x->last_ms = s->pace.body_start_ms = s->pace.rate_mark_ms = now;
	int bad = request_scan(s);
	if (bad)
		return relay_reply_bad_body(x, bad);
	if (!x->head && reread_head(s) < 0)
		return exchange_abort(x, "request head changed while its body was read");
	*body = s->in ? buf_head(s->in) : "";
	*len = x->req.ready;
	*all = x->req.done || x->req.ready >= max || stream_in_full(s);
	return RUN_AGAIN;
}

static enum run codec_head_done(struct exchange *x)
{
	struct h2s *s = x->conn;
	x->head = NULL;
	x->last_ms = loop_now(x->w->loop);
	if (!x->reqbody.peeked)
		s->pace.body_start_ms = s->pace.rate_mark_ms = x->last_ms;
	worker_buf_put(x->w, s->head);
	s->head = NULL;
	return RUN_AGAIN;
}

static enum run codec_await_body(struct exchange *x)
{
	struct h2s *s = x->conn;
	struct worker *w = x->w;
	const struct conf_hash *hc = &x->pool->conf->hash;
	uint64_t want = w->conf->limits.body_buffer_bytes;
	if (x->reqbody.want_key && hc->body_max_bytes > want)
		want = hc->body_max_bytes;
	if ((x->reqbody.want_model || x->reqbody.want_view) && !want)
		want = UINT64_MAX;
	int bad = request_scan(s);
	if (bad)
		return relay_reply_bad_body(x, bad);
	if (!x->req.done && x->req.ready < want && !stream_in_full(s))
		return RUN_STAY; /* its DATA runs the stream again */
	s->pace.buffering = 0;
	return relay_body_in(x, s->in ? buf_head(s->in) : NULL);
}

static enum run codec_relay(struct exchange *x)
{
	return stream_relay(x->conn);
}

static void h2_process(struct h2 *h);

/* A stream has something to do: the connection runs once this turn's events are in (its
 * timer, due now), so the responses of many streams that came in one turn go out in one pass
 * and one write, not a pass over every stream and a write for each. */
static void codec_wake(void *conn)
{
	struct h2s *s = conn;
	struct loop *loop = s->h->cl->w->loop;
	s->run = 1;
	if (!s->h->busy)
		loop_timer_set(loop, &s->h->cl->timer, loop_now(loop));
}

static void codec_respond(struct exchange *x)
{
	codec_wake(x->conn);
}

/* routes.sse_heartbeat_ms (sse.h): the proxy's own event-stream head, the first time, then
 * an SSE comment as DATA; a client that has not taken the last one gets no more. */
static void codec_heartbeat(struct exchange *x)
{
	static const char comment[] = ": waiting\n\n";
	struct h2s *s = x->conn;
	struct worker *w = x->w;
	s->pace.hb_next_ms = loop_now(w->loop) + x->route->sse_heartbeat_ms;
	if (s->own || (s->submitted && !s->early))
		return;
	if (!(s->own = buf_get(&w->bufs)))
		return;
	if (!s->early) {
		int n = rewrite_sse_head(s->own->data, s->own->cap, x->names.reqid);
		if (n <= 0 ||
		    http_parse_response(s->own->data, (size_t)n, (size_t)n, x->meth, &w->head) <=
			0 ||
		    submit_head(s, &w->head, 0) < 0) {
			worker_buf_put(w, s->own);
			s->own = NULL;
			return;
		}
		s->early = 1;
	}
	memcpy(s->own->data, comment, sizeof(comment) - 1);
	s->own->start = 0;
	s->own->end = sizeof(comment) - 1;
	if (s->deferred) {
		s->deferred = 0;
		nghttp2_session_resume_data(s->h->ss, s->id);
	}
	h2_kick(s->h);
}

static int codec_body_held(const struct exchange *x)
{
	const struct h2s *s = x->conn;
	return s->in && buf_len(s->in) >= s->in->cap / 4;
}

/* The answer comes from the cache (hit.h): its head once the object has one, then its body
 * as nghttp2 asks for it (read_hit); woken again by a fill's notice. */
static enum run codec_serve(struct exchange *x)
{
	struct h2s *s = x->conn;
	struct worker *w = x->w;
	struct caching_x *cx = caching_ctx(x);
	if (!cx->hit_started) {
		enum run r = hit_await_head(x);
		if (r != RUN_AGAIN || !caching_answers(x))
			return r;
		if (s->early && !hit_continues_stream(x)) /* the proxy's event stream ends */
			return exchange_reply(x, 502, "the cached answer is no event stream", 1);
		if (!s->early) { /* (else its body goes on the proxy's event stream, no head) */
			struct buf *b = buf_get(&w->bufs);
			int n = b ? hit_head(x, b->data, b->cap, 0, 1) : -1;
			int bodyless = cx->hit_kind != HIT_FULL && cx->hit_kind != HIT_RANGE;
			int bad = n <= 0 ||
				  http_parse_response(b->data, (size_t)n, (size_t)n, x->meth,
						      &w->head) <= 0 ||
				  submit_head(s, &w->head, bodyless) < 0;
			worker_buf_put(w, b);
			if (bad)
				return exchange_abort(x, "cached head does not fit a buffer");
		}
		hit_started(x);
		s->hit = 1;
		s->pace.client_took_ms = loop_now(w->loop);
	}
	if (s->deferred) { /* a fill moved on */
		s->deferred = 0;
		nghttp2_session_resume_data(s->h->ss, s->id);
	}
	h2_kick(s->h);
	return RUN_STAY; /* the stream's close ends the exchange (stream_end_exchange) */
}

/* An interim response (103 Early Hints, 100 Continue ...) goes on as a HEADERS frame of its
 * own before the final one; not once the proxy's own event-stream head went (sse.h), and a
 * hint that finds no buffer is dropped. */
static enum run codec_interim(struct exchange *x, const struct http_head *h, size_t len)
{
	struct h2s *s = x->conn;
	struct worker *w = x->w;
	(void)len;
	if (++s->interims > H2_INTERIM_MAX)
		return dispatch_failed(x, UP_INTERIM);
	struct buf *names = s->submitted || h->status == 101 ? NULL : buf_get(&w->bufs);
	struct head_out o;
	if (!names)
		return RUN_AGAIN;
	if (head_begin(&o, names, 0, 0, h->status) == 0 && head_fields(&o, h) == 0)
		(void)nghttp2_submit_headers(s->h->ss, NGHTTP2_FLAG_NONE, s->id, NULL, o.nv, o.n,
					     NULL);
	buf_put(&w->bufs, names); /* nghttp2 copied the fields */
	h2_kick(s->h);
	return RUN_AGAIN;
}

/*
 * The backend's 101 <h> (its first <len> bytes in up->in) to an extended CONNECT: the stream's
 * 200 with the backend's fields (Sec-WebSocket-Protocol, -Extensions ...) but the hop-by-hop
 * ones, Content-Length (no 2xx to a CONNECT has one, RFC 9110 9.3.6: the client would take
 * the tunnel's bytes for a body past its length) and Sec-WebSocket-Accept, which the proxy
 * checks against the key it sent, since its client cannot; then DATA both ways (tunnel_pass,
 * read_tunnel). A 101 to anything else, or with a wrong answer, is a malformed response (502), as
 * over HTTP/1.1.
 */
static enum run codec_upgrade(struct exchange *x, const struct http_head *h, size_t len)
{
	struct h2s *s = x->conn;
	struct worker *w = x->w;
	const struct http_header *acc = http_find_only_header(h, "sec-websocket-accept");
	if (!s->ws || s->early || !tunnel_accepts(x, h) || !acc ||
	    !wskey_accept_ok(s->wskey, WSKEY_LEN, acc->value.p, acc->value.len))
		return dispatch_failed(x, UP_BAD);
	if (tunnel_count_in(w) < 0)
		return exchange_reply(x, 503, "limits.max_tunnels WebSocket tunnels are open", 0);
	nghttp2_nv keep[HTTP_MAX_HEADERS + 2];
	struct head_out o;
	struct buf *names = buf_get(&w->bufs);
	size_t n = names && head_begin(&o, names, 0, 0, h->status) == 0 && head_fields(&o, h) == 0
		       ? o.n
		       : 0,
	       k = 0;
	const nghttp2_nv *nv = o.nv;
	for (size_t i = 0; i < n; i++) {
		const char *nm = (const char *)nv[i].name;
		if ((nv[i].namelen == 20 && !memcmp(nm, "sec-websocket-accept", 20)) ||
		    (nv[i].namelen == 12 && !memcmp(nm, "x-request-id", 12)) ||
		    (nv[i].namelen == 14 && !memcmp(nm, "content-length", 14)))
			continue;
		keep[k++] = nv[i];
	}
	if (k) {
		keep[0].value = (uint8_t *)"200";
		keep[k++] = (nghttp2_nv){(uint8_t *)"x-request-id", (uint8_t *)x->names.reqid, 12,
					 strlen(x->names.reqid), NGHTTP2_NV_FLAG_NO_INDEX};
	}
	nghttp2_data_provider prd = {.source = {.ptr = s}, .read_callback = read_body};
	int rc = k ? nghttp2_submit_response(s->h->ss, s->id, keep, k, &prd) : -1;
	buf_put(&w->bufs, names); /* nghttp2 copied the fields */
	if (rc) {
		tunnel_count_out(w, TUNNEL_END_ERROR);
		return exchange_abort(x, "out of memory");
	}
	buf_consume(x->att->up->in, len);
	s->submitted = 1;
	s->tun = 1;
	s->tun_ms = loop_now(w->loop);
	x->status = 200; /* what its client got */
	x->log.ttfb_ns = clock_now_ns();
	http_body_init(&x->resp, HTTP_BODY_LENGTH, UINT64_MAX); /* no end but the backend's */
	exchange_response_started(x);
	log_debug("%s: stream %d: WebSocket tunnel open", s->h->cl->ip, s->id);
	h2_kick(s->h);
	return RUN_AGAIN;
}

/* The backend's head <h> came after the proxy began the event stream (sse.h): a 200 event
 * stream with a body continues it (its events follow the comments); anything else ends it
 * with an SSE error event. */
static enum run early_stream_continue(struct h2s *s, const struct http_head *h)
{
	struct exchange *x = s->x;
	char detail[80];
	int status = sse_refusal(h, 1, detail, sizeof(detail));
	if (status)
		return exchange_reply(x, status, detail, 1);
	http_chunked_init(&s->dech);
	s->pace.client_took_ms = loop_now(x->w->loop);
	exchange_response_started(x);
	return RUN_AGAIN;
}

/* The backend's final head <h> as its client gets it (rewrite_fields' argument). */
struct client_head {
	struct exchange *x;
	const struct http_head *h;
	const char *timing;
	const struct rewrite_edit *edit;
};

/* The rewrite's fields for the client (rewrite_response_fields, the rules an HTTP/1 client's
 * head follows), then Cache-Status and X-Accelnet-Llm (llm.explain) last. */
static int client_fields(struct head_out *o, const void *arg)
{
	const struct client_head *ch = arg;
	char lines[1536];
	if (rewrite_response_fields(ch->h, 1, ch->x->names.reqid, ch->timing, ch->edit, head_put,
				    o))
		return -1;
	for (int i = 0; i < 2; i++) {
		int k = i		      ? llm_explain_header(ch->x, lines, sizeof(lines))
			: caching_said(ch->x) ? caching_status_lines(ch->x, lines, sizeof(lines))
					      : 0;
		if (k > 0)
			head_put_lines(o, lines, (size_t)k);
	}
	return 0;
}

static enum run codec_response_head(struct exchange *x, const struct http_head *h, size_t len)
{
	struct h2s *s = x->conn;
	struct worker *w = x->w;
	char timing[160];
	struct forward_scratch fs;
	(void)len;
	if (s->early)
		return early_stream_continue(s, h);
	if (s->ws && h->status >= 200 && h->status < 300) /* its client would read it as a tunnel */
		return dispatch_failed(x, UP_BAD);
	/* the rewrite's fields for the client as HTTP/2's, no HTTP/1 text between */
	struct client_head ch = {
	    .x = x,
	    .h = h,
	    .timing = x->names.want_timing && debugreq_timing(x, 0, timing, sizeof(timing)) > 0
			  ? timing
			  : NULL,
	    .edit = forward_response(x, &fs),
	};
	int rc = submit_built(s, h->status, client_fields, &ch, x->resp.done);
	if (rc == -2)
		return dispatch_failed(x, UP_BAD);
	if (rc < 0)
		return exchange_abort(x, "out of memory");
	http_chunked_init(&s->dech); /* (nghttp2 asks for the body once control is back) */
	x->feed.on = xhooks_keeper(x) != NULL;	    /* the body from what a feature keeps */
	s->pace.client_took_ms = loop_now(w->loop); /* timeouts.send_ms counts from here */
	exchange_response_started(x);
	return RUN_AGAIN;
}

static int codec_live(void *conn, const struct exchange *x)
{
	return ((struct h2s *)conn)->x == x;
}

static const struct exchange_codec_ops h2_codec = {
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
    .http2 = 1,
};

/* --- a stream's start --- */

/* The request line is written once the pseudo-header fields are all in. */
static void head_line(struct h2s *s)
{
	struct worker *w = s->h->cl->w;
	if (s->hh.line || s->hh.err)
		return;
	if (!s->head && !(s->head = buf_get(&w->bufs))) {
		s->hh.err = -503;
		return;
	}
	nghttp2_vec m = s->meth ? nghttp2_rcbuf_get_buf(s->meth) : (nghttp2_vec){0};
	nghttp2_vec p = s->path ? nghttp2_rcbuf_get_buf(s->path) : (nghttp2_vec){0};
	nghttp2_vec a = s->auth ? nghttp2_rcbuf_get_buf(s->auth) : (nghttp2_vec){0};
	int connect = m.len == 7 && !memcmp(m.base, "CONNECT", 7);
	s->ws = connect && s->protocol == 1; /* RFC 8441: written as the HTTP/1.1 handshake */
	if (s->ws)
		m = (nghttp2_vec){(uint8_t *)"GET", 3};
	(void)h2head_begin(&s->hh, s->head->data, s->head->cap, (const char *)m.base, m.len,
			   (const char *)p.base, p.len, s->auth ? (const char *)a.base : NULL,
			   a.len);
	if (s->ws && !s->hh.err)
		s->hh.err =
		    wskey_new(s->wskey) < 0 ? -503 : h2head_websocket(&s->hh, s->wskey, WSKEY_LEN);
	else if (connect) /* a plain CONNECT (no forward proxy), or another :protocol */
		s->hh.err = s->protocol ? -501 : -405;
	rcbuf_drop(&s->meth);
	rcbuf_drop(&s->path);
	rcbuf_drop(&s->auth);
}

/*
 * A request body that came without content-length (RFC 9113 allows it; gRPC and some clients
 * do it): its head is ended when the stream starts, so that a body whole by then is framed by
 * its length, as a client that gave content-length frames it, and every stage reads it (the
 * model, balance: llm's prompt, a token reservation: a chunked body is read by none). A body
 * still coming then, one with trailers, or one longer than what is read before admission (a
 * quarter of a body buffer: stream_in_full) goes chunked, the bytes in hand its first chunk.
 * That length is the rule whatever the timing: a client whose window let it send more before
 * the stream last ran (a read that held the whole body and its end) is framed the same.
 */
static void stream_end_head(struct h2s *s)
{
	const struct worker *w = s->h->cl->w;
	size_t n = s->in ? buf_len(s->in) : 0;
	size_t most = (w->body_bufs.size > w->bufs.size ? w->body_bufs.size : w->bufs.size) / 4;
	s->sized = 0;
	if (s->end_stream && n <= most) {
		(void)h2head_end_sized(&s->hh, n); /* (an error is kept in hh.err) */
		return;
	}
	if (h2head_end(&s->hh, 0) <= 0)
		return;
	s->chunked = 1;
	if (!n)
		return;
	char line[24];
	int k = snprintf(line, sizeof(line), "%zx\r\n", n);
	size_t last = s->end_stream ? 5 : 0;	      /* its end came: the last chunk too */
	if (buf_room(s->in) < (size_t)k + 2 + last) { /* (the window is at most half the buffer) */
		s->flow_bad = 1;
		nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id,
					  NGHTTP2_REFUSED_STREAM);
		return;
	}
	memmove(s->in->data + s->in->start + k, buf_head(s->in), n);
	memcpy(s->in->data + s->in->start, line, (size_t)k);
	memcpy(s->in->data + s->in->end + k, "\r\n0\r\n\r\n", 2 + last);
	s->in->end += (uint32_t)(k + 2 + last);
}

/* The head is whole: it becomes an exchange, which runs its stages. */
static void stream_start(struct h2s *s)
{
	struct client *cl = s->h->cl;
	struct worker *w = cl->w;
	const struct conf *conf = w->conf;
	if (s->sized)
		stream_end_head(s);
	s->started = 1;
	if (s->hh.err) {
		stream_answer(s, -s->hh.err,
			      s->hh.err == -405
				  ? "CONNECT is not proxied (only an extended CONNECT "
				    "with :protocol websocket, RFC 8441)"
			      : s->hh.err == -501 ? "no :protocol but websocket is tunnelled"
						  : "request head not acceptable",
			      NULL, 0);
		return;
	}
	s->head->end = (uint32_t)s->hh.len;
	struct http_head_reader rd = {0};
	int r = http_head_read(&rd, buf_head(s->head), buf_len(s->head),
			       conf->limits.max_header_bytes, &w->head);
	if (r <= 0) {
		stream_answer(s, r < 0 ? -r : 400, "malformed request", NULL, 0);
		return;
	}
	const char *why = NULL;
	int unused = http_target_normalize_head(
	    buf_head(s->head), &w->head,
	    conf->limits.path == CONF_PATH_REFUSE ? HTTP_TARGET_REFUSE : HTTP_TARGET_NORMALIZE,
	    &why);
	if (unused < 0) {
		stream_answer(s, 400, why, NULL, 0);
		return;
	}
	buf_consume(s->head, (size_t)unused);
	const struct http_head *h = &w->head;
	const struct exchange_peer peer = {
	    .ip = cl->ip,
	    .key = cl->key,
	    .trusted = cl->trusted,
	    .over_tls = cl->tls,
	    .tls = cl->tls_facts,
	    .tls_conf = cl->tls_conf,
	};
	struct exchange *x = exchange_new(w, s, &h2_codec, h, &peer);
	if (!x) {
		nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id,
					  NGHTTP2_INTERNAL_ERROR);
		return;
	}
	s->x = x;
	s->pace = (struct xpace){0};
	x->pace = &s->pace;
	if (s->grpc && s->grpc_timeout_ms) /* the client's own deadline, from its start */
		x->until_ms = s->since_ms + s->grpc_timeout_ms;
	cl->requests++;
	if (conf->limits.max_uri_bytes && h->path.len > conf->limits.max_uri_bytes) {
		exchange_reply(x, 414, "request target longer than limits.max_uri_bytes", 0);
		return;
	}
	if (h->nheaders > conf->limits.max_headers) {
		exchange_reply(x, 431, "more header fields than limits.max_headers", 0);
		return;
	}
	if (h->framing == HTTP_BODY_LENGTH && conf->limits.max_body_bytes &&
	    h->content_length > conf->limits.max_body_bytes) {
		exchange_reply(x, 413, "request body larger than limits.max_body_bytes", 0);
		return;
	}
	(void)stages_run(x, codec_live);
}

/* A body without content-length is waited for before the stream starts (stream_end_head),
 * as a body is read before admission (stream_in_full: into a body buffer, up to a quarter
 * of it), until it ends, fills that, leaves the client no window to send more in, or
 * timeouts.header_ms has passed since the stream began. One whose window closed while no body
 * buffer could be had (every one lent, or the connection's H2_BODY_BUFS) waits for one, as a
 * body read before admission does (the timer looks again: stream_due), so that the framing
 * of a connection's bodies does not depend on how many it sends at once. */
static int stream_holds(struct h2s *s)
{
	const struct worker *w = s->h->cl->w;
	if (!s->sized || s->end_stream || s->flow_bad ||
	    loop_now(w->loop) >= s->since_ms + w->conf->timeouts.header_ms)
		return 0;
	s->pace.buf_wait = 0;
	if (stream_in_full(s))
		return 0;
	if (s->pace.buf_wait)
		s->buf_retry_ms = loop_now(w->loop) + BODY_BUF_WAIT_MS;
	return nghttp2_session_get_stream_local_window_size(s->h->ss, s->id) > 0 ||
	       s->pace.buf_wait;
}

static void stream_run(struct h2s *s)
{
	s->run = 0;
	s->due_stale = 1;
	if (!s->x) {
		if (s->headers_in && !s->started && !stream_holds(s))
			stream_start(s);
		return;
	}
	struct exchange *x = s->x;
	enum run r = stages_run(x, codec_live);
	while (r == RUN_AGAIN && s->x == x)
		r = stages_run(x, codec_live);
	if (s->x == x)
		stream_resume(s);
}

/* --- nghttp2's callbacks: they record, the streams run later --- */

static struct h2s *stream_of(struct h2 *h, int32_t id)
{
	return nghttp2_session_get_stream_user_data(h->ss, id);
}

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
	struct h2 *h = ud;
	(void)ss;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_HEADERS) {
		struct h2s *t = stream_of(h, f->hd.stream_id);
		if (t && t->sized) /* trailers come: they go upstream behind a chunked body */
			stream_end_head(t);
		return 0;
	}
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (h->calm)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	struct h2s *s = stream_new(h, f->hd.stream_id);
	if (!s)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	nghttp2_session_set_stream_user_data(h->ss, f->hd.stream_id, s);
	if (f->hd.stream_id > H2_LAST_IDS && !h->draining) {
		/* its stream ids run out: it is told to open a new connection before they do */
		h->draining = 1;
		defence_count(h, H2_DEFENCE_STREAM_IDS);
		nghttp2_submit_goaway(h->ss, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR,
				      NULL, 0);
	}
	return 0;
}

static void request_trailer(struct h2s *s, const char *n, size_t nlen, const char *v, size_t vlen);

static int on_header(nghttp2_session *ss, const nghttp2_frame *f, nghttp2_rcbuf *name,
		     nghttp2_rcbuf *value, uint8_t flags, void *ud)
{
	struct h2 *h = ud;
	(void)ss, (void)flags;
	if (f->hd.type != NGHTTP2_HEADERS ||
	    (f->headers.cat != NGHTTP2_HCAT_REQUEST && f->headers.cat != NGHTTP2_HCAT_HEADERS))
		return 0;
	struct h2s *s = stream_of(h, f->hd.stream_id);
	if (!s)
		return 0;
	nghttp2_vec n = nghttp2_rcbuf_get_buf(name), v = nghttp2_rcbuf_get_buf(value);
	s->hlist += n.len + v.len + 32;
	if (s->hlist > H2_BOMB_TIMES * (uint64_t)h->cl->w->conf->limits.h2_max_header_list) {
		/* (nghttp2 checks each value it decodes: 431 per stream and going on let one
		 * connection keep a worker busy; parsing stops here) */
		h2_calm(h, H2_DEFENCE_HEADER_LIST, "a header list far past the limit (HPACK bomb)");
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	if (f->headers.cat == NGHTTP2_HCAT_HEADERS) {
		request_trailer(s, (const char *)n.base, n.len, (const char *)v.base, v.len);
		return 0;
	}
	if (s->hlist > h->cl->w->conf->limits.h2_max_header_list) {
		/* a long list, or a small block that decodes huge (an HPACK bomb): 431, the rest
		 * of the list decoded by nghttp2 (its table must stay right) and dropped */
		if (s->hh.err != -431) {
			s->hh.err = -431;
			defence_count(h, H2_DEFENCE_HEADER_LIST);
		}
		return 0;
	}
	if (n.len && n.base[0] == ':') {
		nghttp2_rcbuf **keep = n.len == 7 && !memcmp(n.base, ":method", 7)	  ? &s->meth
				       : n.len == 5 && !memcmp(n.base, ":path", 5)	  ? &s->path
				       : n.len == 10 && !memcmp(n.base, ":authority", 10) ? &s->auth
											  : NULL;
		if (keep && !*keep) {
			nghttp2_rcbuf_incref(value);
			*keep = value;
		}
		if (n.len == 9 && !memcmp(n.base, ":protocol", 9)) /* (nghttp2: CONNECT's alone) */
			s->protocol = v.len == 9 && !memcmp(v.base, "websocket", 9) ? 1 : 2;
		return 0;
	}
	head_line(s);
	if (n.len == 12 && !memcmp(n.base, "content-type", 12))
		s->grpc = (unsigned)http_grpc_is((const char *)v.base, v.len);
	if (n.len == 12 && !memcmp(n.base, "grpc-timeout", 12) &&
	    http_grpc_timeout_ms((const char *)v.base, v.len, &s->grpc_timeout_ms) < 0)
		s->grpc_timeout_ms = 0; /* malformed: none */
	if (!s->hh.err)
		(void)h2head_field(&s->hh, (const char *)n.base, n.len, (const char *)v.base,
				   v.len);
	return 0;
}

/* Is the stream's request body still going upstream chunked (not answered, not reset)? */
static int stream_chunking(const struct h2s *s)
{
	return s->chunked && (s->x || !s->started) && !s->flow_bad;
}

/* One field of the request's trailers: into the chunked body's trailer section, behind its
 * last chunk, when the body goes chunked and the field may cross (h2head_trailer_ok());
 * else dropped (a body of declared length has no room for trailers over HTTP/1.1). The list
 * counts against limits.http2_max_header_list with the head's; past it, the rest is dropped.
 * No room in the stream's input resets the stream, as DATA past its window does. */
static void request_trailer(struct h2s *s, const char *n, size_t nlen, const char *v, size_t vlen)
{
	char line[512];
	if (!stream_chunking(s) || s->end_stream || !h2head_trailer_ok(n, nlen) ||
	    s->hlist > s->h->cl->w->conf->limits.h2_max_header_list)
		return;
	int k = h2head_trailer_line(line, sizeof(line), n, nlen, v, vlen);
	struct buf *big = NULL;
	if (k < 0 && nlen + vlen + 4 > sizeof(line)) {
		/* a long one: written in a buffer of its own */
		if (!(big = buf_get(&s->h->cl->w->bufs)))
			return;
		k = h2head_trailer_line(big->data, big->cap, n, nlen, v, vlen);
	}
	int err = 0;
	if (k > 0 && !s->trailers)
		err = stream_in_put(s, "0\r\n", 3);
	if (k > 0 && !err) {
		s->trailers = 1;
		err = stream_in_put(s, big ? big->data : line, (size_t)k);
	}
	worker_buf_put(s->h->cl->w, big);
	if (err) {
		s->flow_bad = 1;
		nghttp2_submit_rst_stream(s->h->ss, NGHTTP2_FLAG_NONE, s->id,
					  NGHTTP2_REFUSED_STREAM);
	}
}

/* The request's end: a chunked body's last chunk (already written when trailers came), and
 * the end of its trailer section. */
static void stream_end_request(struct h2s *s)
{
	s->end_stream = 1;
	s->run = 1;
	if (stream_chunking(s) &&
	    stream_in_put(s, s->trailers ? "\r\n" : "0\r\n\r\n", s->trailers ? 2 : 5) < 0)
		s->flow_bad = 1;
}

/* RFC 9113 5.1.1: a stream id lower than one the client already used names a stream that the
 * first use of the higher one closed; a HEADERS that opens it is a connection error
 * (PROTOCOL_ERROR). libnghttp2 ignores a HEADERS on a stream it does not know below its last
 * (it cannot tell one the client never opened from one that closed, whose trailers may cross
 * the proxy's RST_STREAM). Clients open their ids in order, so the ids one skipped are kept as
 * ranges (the latest H2_GAPS), and a HEADERS that names one ends the connection. */
static void ids_check(struct h2 *h, int32_t id)
{
	if (!(id & 1))
		return; /* nghttp2 refuses an even one itself */
	if (id > h->last_id) {
		if ((int64_t)id > (int64_t)h->last_id + 2) {
			int32_t *g = h->gaps[h->ngaps++ % H2_GAPS];
			g[0] = h->last_id + 2;
			g[1] = id - 2;
		}
		h->last_id = id;
		return;
	}
	unsigned n = h->ngaps < H2_GAPS ? h->ngaps : H2_GAPS;
	for (unsigned i = 0; i < n; i++)
		if (id >= h->gaps[i][0] && id <= h->gaps[i][1]) {
			nghttp2_session_terminate_session(h->ss, NGHTTP2_PROTOCOL_ERROR);
			return;
		}
}

/* RFC 9113 6.9.2: a new SETTINGS_INITIAL_WINDOW_SIZE that takes a stream's send window past
 * 2^31-1 is a connection error (FLOW_CONTROL_ERROR); libnghttp2 resets that stream alone and
 * leaves its window as it was. So each stream's window is noted as a SETTINGS frame begins,
 * and one that the new size should have moved but did not ends the connection. */
static int on_begin_frame(nghttp2_session *ss, const nghttp2_frame_hd *hd, void *ud)
{
	struct h2 *h = ud;
	if (h->calm) /* a defence ended the connection: the rest of this read is not parsed */
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	if (hd->type == NGHTTP2_HEADERS)
		ids_check(h, hd->stream_id);
	if (hd->type != NGHTTP2_SETTINGS || (hd->flags & NGHTTP2_FLAG_ACK))
		return 0;
	for (struct list_node *n = list_first(&h->streams); n; n = list_next(&h->streams, n)) {
		struct h2s *s = container_of(n, struct h2s, link);
		s->window_before = nghttp2_session_get_stream_remote_window_size(ss, s->id);
	}
	return 0;
}

static void window_check(struct h2 *h, const nghttp2_settings *f)
{
	int32_t size = h->peer_window;
	for (size_t i = 0; i < f->niv; i++)
		if (f->iv[i].settings_id == NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE &&
		    f->iv[i].value <= INT32_MAX)
			size = (int32_t)f->iv[i].value;
	int64_t delta = (int64_t)size - h->peer_window;
	h->peer_window = size;
	if (delta <= 0)
		return;
	for (struct list_node *n = list_first(&h->streams); n; n = list_next(&h->streams, n)) {
		struct h2s *s = container_of(n, struct h2s, link);
		int32_t now = nghttp2_session_get_stream_remote_window_size(h->ss, s->id);
		if (now >= 0 && now == s->window_before && now + delta > INT32_MAX) {
			nghttp2_session_terminate_session(h->ss, NGHTTP2_FLOW_CONTROL_ERROR);
			return;
		}
	}
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
	struct h2 *h = ud;
	(void)ss;
	int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
	const struct conf_limits *lim = &h->cl->w->conf->limits;
	switch (f->hd.type) {
	case NGHTTP2_RST_STREAM:
		if (bucket_take(&h->resets, lim->h2_max_resets, loop_now(h->cl->w->loop)) < 0)
			h2_calm(h, H2_DEFENCE_RAPID_RESET, "streams reset too fast (rapid reset)");
		break;
	case NGHTTP2_SETTINGS:
		if (!(f->hd.flags & NGHTTP2_FLAG_ACK))
			window_check(h, &f->settings);
		/* fall through */
	case NGHTTP2_PING:
		if (!(f->hd.flags & NGHTTP2_FLAG_ACK))
			control_frame(h);
		break;
	case NGHTTP2_PRIORITY:
		control_frame(h);
		break;
	case NGHTTP2_DATA:
		if (!f->hd.length && !end)
			control_frame(h);
		break;
	}
	struct h2s *s = f->hd.stream_id ? stream_of(h, f->hd.stream_id) : NULL;
	if (!s)
		return 0;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
		head_line(s);
		s->headers_in = 1;
		s->run = 1;
		if (end)
			s->end_stream = 1;
		if (!end && !s->hh.has_cl && !s->grpc && !s->hh.err && s->hh.line && !s->ws) {
			s->sized = 1; /* its framing is decided at its start (stream_end_head) */
			return 0;
		}
		int n = h2head_end(&s->hh, end || s->ws); /* (a handshake has no body) */
		s->chunked = n > 0 && !end && !s->hh.has_cl && !s->ws;
		return 0;
	}
	if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && end)
		stream_end_request(s);
	return 0;
}

static int on_data(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
		   void *ud)
{
	struct h2 *h = ud;
	(void)flags;
	struct h2s *s = stream_of(h, id);
	if (!s || (s->started && !s->x) || s->flow_bad) {
		nghttp2_session_consume(ss, id, len); /* answered already: dropped */
		return 0;
	}
	char line[24];
	int k = s->chunked ? snprintf(line, sizeof(line), "%zx\r\n", len) : 0;
	int err = 0;
	if (len && (k > 0 ? (err = stream_in_put(s, line, (size_t)k)) : 0) == 0 &&
	    (err = stream_in_put(s, (const char *)data, len)) == 0 && s->chunked)
		err = stream_in_put(s, "\r\n", 2);
	if (err) {
		/* past the window given, or no buffer for it: this stream ends */
		s->flow_bad = 1;
		nghttp2_session_consume(ss, id, len);
		nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, id,
					  err == -ENOSPC ? NGHTTP2_FLOW_CONTROL_ERROR
							 : NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	s->unconsumed += len;
	s->run = 1;
	return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code, void *ud)
{
	struct h2 *h = ud;
	struct h2s *s = stream_of(h, id);
	(void)ss;
	if (!s)
		return 0;
	nghttp2_session_set_stream_user_data(h->ss, id, NULL);
	if (s->x)
		stream_end_exchange(s, code);
	stream_release(s);
	return 0;
}

/* A stream reset for what its client did draws on the client's own reset limit. */
static int on_frame_send(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
	struct h2 *h = ud;
	(void)ss;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.nvlen) { /* a head whose fields it held */
		struct h2s *s = stream_of(h, f->hd.stream_id);
		const char *st = (const char *)f->headers.nva[0].value;
		if (s && s->held && st >= h->fields->data && st < h->fields->data + h->fields->cap)
			fields_unhold(s);
	}
	if (f->hd.type == NGHTTP2_RST_STREAM && client_fault(f->rst_stream.error_code) &&
	    bucket_take(&h->resets, h->cl->w->conf->limits.h2_max_resets,
			loop_now(h->cl->w->loop)) < 0)
		h2_calm(h, H2_DEFENCE_RAPID_RESET,
			"streams the client made the proxy reset, too fast");
	return 0;
}

/* --- the connection --- */

/* Feed what the client sent to nghttp2, reading until the socket is empty. -1: close. */
static int h2_read(struct h2 *h)
{
	struct client *cl = h->cl;
	for (;;) {
		if (cl->in && buf_len(cl->in) && !h->calm) {
			ssize_t r = nghttp2_session_mem_recv(
			    h->ss, (const uint8_t *)buf_head(cl->in), buf_len(cl->in));
			if (r == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS)
				h2_calm(h, H2_DEFENCE_CONTINUATION_FLOOD, "CONTINUATION flood");
			else if (r == NGHTTP2_ERR_FLOODED)
				h2_calm(h, H2_DEFENCE_CONTROL_FLOOD, "acknowledgements not read");
			else if (r < 0 && !h->calm) {
				log_debug("%s: HTTP/2: %s", cl->ip, nghttp2_strerror((int)r));
				return -1;
			}
			buf_consume(cl->in, r < 0 ? buf_len(cl->in) : (size_t)r);
		}
		if (h->calm) {
			if (cl->in)
				buf_consume(cl->in, buf_len(cl->in));
			return 0;
		}
		ssize_t n = client_read_idle(cl);
		if (n == -EAGAIN)
			return 0;
		if (n <= 0 && n != -ENOSPC)
			return -1; /* the client closed: its streams are cut */
	}
}

/* Write cl->out, gathered frames or the rest of one, while the socket takes it. 1: all of it
 * went (cl->out given back), 0: the socket is full, -1: close. */
static int out_write(struct client *cl)
{
	if (client_flush(cl) < 0)
		return -1;
	if (client_out_pending(cl))
		return 0;
	worker_buf_release(cl->w, &cl->out);
	return 1;
}

/* Write what nghttp2 has for the client while the socket takes it. nghttp2 hands out one frame
 * at a time; small ones (many streams' HEADERS and short DATA in one pass) are gathered in
 * cl->out while it has room for a whole frame behind them (H2_FRAME_ROOM) and written
 * together, one write for the lot; a large one that comes first (or any, when no buffer is
 * to be had) is written from nghttp2's own buffer, not copied. -1: close. */
static int h2_flush(struct h2 *h)
{
	struct client *cl = h->cl;
	int r = client_out_pending(cl) ? out_write(cl) : 1;
	while (r == 1 && cl->writable) {
		const uint8_t *p;
		ssize_t n = nghttp2_session_mem_send(h->ss, &p);
		if (n < 0)
			return -1;
		if (!n)
			break;
		if (!cl->out && (n >= H2_GATHER_MAX || !client_out_buf(cl))) {
			ssize_t k = net_conn_write(&cl->conn, p, (size_t)n);
			if (k == -EAGAIN || k == -EINTR)
				k = 0;
			else if (k < 0)
				return -1;
			if (k < n) {
				cl->writable = 0;
				if (client_out_put(cl, (const char *)p + k, (size_t)(n - k)) < 0)
					return -1;
			}
			continue;
		}
		if (cl->out && buf_room(cl->out) < (size_t)n && (r = out_write(cl)) < 0)
			return -1;
		if (client_out_put(cl, (const char *)p, (size_t)n) < 0)
			return -1; /* no room even so: a header block past a buffer behind a full
				      socket */
		if (buf_room(cl->out) < H2_FRAME_ROOM)
			r = out_write(cl);
	}
	if (r == 1 && client_out_pending(cl))
		r = out_write(cl);
	if (r >= 0 && !client_out_pending(cl))
		worker_buf_release(cl->w, &cl->out); /* an idle connection holds no buffer */
	return r < 0 ? -1 : 0;
}

static int any_to_run(struct h2 *h)
{
	for (struct list_node *n = list_first(&h->streams); n; n = list_next(&h->streams, n))
		if (container_of(n, struct h2s, link)->run &&
		    (container_of(n, struct h2s, link)->x || !h->calm))
			return 1;
	return 0;
}

static void run_streams(struct h2 *h)
{
	struct list_node *n = list_first(&h->streams);
	for (; n; n = list_next(&h->streams, n)) {
		struct h2s *s = container_of(n, struct h2s, link);
		if (s->flow_bad && s->x) {
			codec_abort(s->x, "the client sent past its flow-control window");
			continue;
		}
		if (s->run && (s->x || !h->calm))
			stream_run(s);
	}
}

/* After a flush: a stream whose response bytes wait while its client's window (the stream's
 * or the connection's) is shut has a full client to timeouts.send_ms, as an HTTP/1 client
 * whose socket is full has: a zero-window client holds its backend no longer than that. */
static void streams_mark_full(struct h2 *h)
{
	int conn_shut = nghttp2_session_get_remote_window_size(h->ss) <= 0;
	for (struct list_node *n = list_first(&h->streams); n; n = list_next(&h->streams, n)) {
		struct h2s *s = container_of(n, struct h2s, link);
		struct exchange *x = s->x;
		if (!x)
			continue;
		/* the window is looked up (a hash lookup in nghttp2) only where bytes wait (ready,
		 * or kept in the cache object ahead of the client); no response head submitted,
		 * none wait (and the exchange is not touched) */
		unsigned full =
		    s->submitted && x->resp_head &&
		    (x->resp.ready || (x->feed.on && !x->feed.raw && kept_ahead(x, 0))) &&
		    (conn_shut || nghttp2_session_get_stream_remote_window_size(h->ss, s->id) <= 0);
		if (full != s->pace.client_full)
			s->due_stale = 1; /* send_deadline() starts, or stops */
		s->pace.client_full = full;
	}
}

/* A stream with no exchange waits on its client alone: for the rest of its header block
 * (timeouts.header_ms from its start: no other frame may come meanwhile, RFC 9113 6.10), or to
 * take the proxy's own answer through its window (timeouts.send_ms, else between_bytes_ms,
 * since it last took some). When that wait ends, or UINT64_MAX. */
static uint64_t stream_due(const struct h2s *s, const struct conf_timeouts *t)
{
	if (s->x || s->given_up)
		return UINT64_MAX;
	if (s->sized && !s->started && s->pace.buf_wait && /* (a held body: stream_holds) */
	    s->buf_retry_ms < s->since_ms + t->header_ms)
		return s->buf_retry_ms;
	if (!s->headers_in || (s->sized && !s->started))
		return s->since_ms + t->header_ms;
	if (s->submitted && !s->eof)
		return s->since_ms + (t->send_ms ? t->send_ms : t->between_bytes_ms);
	return UINT64_MAX;
}

/* The next deadline of the stream's exchange <s->x>: the one kept, or computed afresh when
 * it may have moved or has come (s->due). A stream marked to run has not moved yet: what
 * woke it (its backend's bytes, a slot) moves it when it runs, which marks the due stale. */
static uint64_t stream_exchange_due(struct h2s *s, uint64_t now)
{
	if (s->due_stale || s->due <= now) {
		s->due = deadline_next(s->x, now);
		s->due_stale = 0;
	}
	return s->due;
}

/* A tunnel's clock: timeouts.tunnel_idle_ms, or its drain's end; nothing once it is reset. */
static uint64_t tunnel_stream_due(const struct h2s *s)
{
	enum tunnel_end why;
	return s->tun_end || !s->x ? UINT64_MAX : tunnel_due(s->h->cl->w, s->tun_ms, &why);
}

static uint64_t h2_deadline(struct h2 *h)
{
	struct client *cl = h->cl;
	const struct conf_timeouts *t = &cl->w->conf->timeouts;
	uint64_t now = loop_now(cl->w->loop), due = UINT64_MAX;
	for (struct list_node *n = list_first(&h->streams); n; n = list_next(&h->streams, n)) {
		struct h2s *s = container_of(n, struct h2s, link);
		uint64_t d = s->tun ? tunnel_stream_due(s)
			     : s->x ? stream_exchange_due(s, now)
				    : stream_due(s, t);
		if (d < due)
			due = d;
	}
	if (!h->nstreams) {
		uint64_t idle = h->quiet_ms + (h->draining ? H2_DRAIN_IDLE_MS : t->idle_ms);
		if (idle < due)
			due = idle;
	}
	if (client_out_pending(cl)) {
		uint64_t d = cl->phase_ms + t->between_bytes_ms;
		if (d < due)
			due = d;
	}
	return due;
}

static void h2_free(struct client *cl)
{
	struct h2 *h = cl->h2;
	struct list_node *n;
	if (!h)
		return;
	while ((n = list_first(&h->streams))) {
		struct h2s *s = container_of(n, struct h2s, link);
		if (s->x)
			stream_end_exchange(s, NGHTTP2_CANCEL);
		stream_release(s);
	}
	nghttp2_session_del(h->ss);
	h->ss = NULL;
	worker_buf_put(cl->w, h->fields); /* (none: its streams' release gave it back) */
	while ((n = list_pop_front(&h->spare)))
		free(container_of(n, struct h2s, link));
	free(h);
	cl->h2 = NULL;
}

/* Run the connection: reads, streams, writes, until it waits; then its reads and timer. */
static void h2_process(struct h2 *h)
{
	struct client *cl = h->cl;
	int bad = 0, pass;
	h->busy = 1;
	for (pass = 0; pass < H2_PASSES; pass++) {
		if (h2_read(h) < 0) {
			bad = 1;
			break;
		}
		run_streams(h);
		if (h2_flush(h) < 0) {
			bad = 1;
			break;
		}
		streams_mark_full(h);
		if (!any_to_run(h) && !(cl->in && buf_len(cl->in)))
			break;
	}
	h->busy = 0;
	if (!bad && !client_out_pending(cl) && !nghttp2_session_want_read(h->ss) &&
	    !nghttp2_session_want_write(h->ss))
		bad = 1; /* both sides are done (GOAWAY) */
	if (h->calm && client_out_pending(cl))
		bad = 1; /* a defence's GOAWAY is not waited for past what the socket took */
	if (bad) {
		client_close(cl);
		return;
	}
	if (!client_out_pending(cl))
		cl->phase_ms = loop_now(cl->w->loop);
	net_conn_read_stop(&cl->conn);
	uint64_t due = h2_deadline(h);
	if (pass == H2_PASSES)
		due = loop_now(cl->w->loop); /* more to do: after the other connections' turn */
	loop_timer_set(cl->w->loop, &cl->timer, due);
}

void h2_run(struct client *cl)
{
	h2_process(cl->h2);
}

void h2_on_timer(struct client *cl)
{
	struct h2 *h = cl->h2;
	struct worker *w = cl->w;
	uint64_t now = loop_now(w->loop);
	const struct conf_timeouts *t = &w->conf->timeouts;
	if (client_out_pending(cl) && now >= cl->phase_ms + t->between_bytes_ms) {
		client_close(cl); /* the client takes nothing of what it was sent */
		return;
	}
	if (!h->nstreams && now >= h->quiet_ms + (h->draining ? H2_DRAIN_IDLE_MS : t->idle_ms)) {
		client_close(cl);
		return;
	}
	for (struct list_node *n = list_first(&h->streams); n; n = list_next(&h->streams, n)) {
		struct h2s *s = container_of(n, struct h2s, link);
		struct exchange *x = s->x;
		enum tunnel_end why;
		if (s->tun) {
			if (tunnel_stream_due(s) <= now) {
				(void)tunnel_due(w, s->tun_ms, &why);
				tunnel_reset(s, why, NGHTTP2_CANCEL,
					     why == TUNNEL_END_IDLE ? "idle" : "draining");
			}
			continue;
		}
		if (x && s->pace.client_full && t->send_ms &&
		    now >= s->pace.client_took_ms + t->send_ms)
			defence_count(h, H2_DEFENCE_SLOW_READER); /* deadline_fire() cuts it */
		/* (a body waiting for a body buffer looks again each time: deadline_next() puts
		 * that BODY_BUF_WAIT_MS from now, always ahead; a kept due in the future is no
		 * later than the exchange's own, so that one has not come either) */
		if (x && (stream_exchange_due(s, now) <= now || s->pace.buf_wait)) {
			s->due_stale = 1;
			if (deadline_fire(x, now) != RUN_GONE && s->x == x)
				s->run = 1;
		}
		if (!x && stream_due(s, t) <= now && s->sized && !s->started) {
			s->run = 1; /* a body buffer may be free now; or its time is up: chunked */
		} else if (!x && stream_due(s, t) <= now) {
			if (!s->headers_in) { /* nothing else may come on the connection meanwhile
					       */
				log_debug("%s: HTTP/2: a header block not finished in time",
					  cl->ip);
				client_close(cl);
				return;
			}
			s->given_up = 1;
			defence_count(h, H2_DEFENCE_SLOW_READER);
			nghttp2_submit_rst_stream(h->ss, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
		}
	}
	h2_process(h);
}

void h2_drain(struct client *cl)
{
	struct h2 *h = cl->h2;
	if (h->draining)
		return;
	h->draining = 1;
	nghttp2_submit_goaway(h->ss, NGHTTP2_FLAG_NONE,
			      nghttp2_session_get_last_proc_stream_id(h->ss), NGHTTP2_NO_ERROR,
			      NULL, 0);
	if (!h->nstreams)
		h->quiet_ms = loop_now(cl->w->loop);
	h2_process(h);
}

void h2_take(struct client *cl)
{
	struct worker *w = cl->w;
	const struct conf_limits *lim = &w->conf->limits;
	struct h2 *h = calloc(1, sizeof(*h));
	nghttp2_session_callbacks *cb = NULL;
	nghttp2_option *opt = NULL;
	if (!h || nghttp2_session_callbacks_new(&cb) || nghttp2_option_new(&opt))
		goto fail;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback2(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	nghttp2_option_set_max_send_header_block_length(opt, w->bufs.size);
	/* nghttp2's own reset limit stays behind ours (limits.http2_max_resets), a backstop */
	if (lim->h2_max_resets)
		nghttp2_option_set_stream_reset_rate_limit(opt, 4ull * lim->h2_max_resets + 1000,
							   4ull * lim->h2_max_resets + 33);
	h2mem_init(&h->mem, &w->h2mem); /* a request takes no trip through malloc */
	if (nghttp2_session_server_new3(&h->ss, cb, h, opt, &h->mem))
		goto fail;
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	cb = NULL;
	opt = NULL;
	h->cl = cl;
	list_init(&h->streams);
	list_init(&h->spare);
	h->quiet_ms = loop_now(w->loop);
	h->peer_window = NGHTTP2_INITIAL_WINDOW_SIZE;
	h->last_id = -1; /* the first id, 1, skips none */
	h->resets = (struct h2_bucket){(uint64_t)lim->h2_max_resets * 1000, h->quiet_ms};
	h->control = (struct h2_bucket){(uint64_t)lim->h2_max_control * 1000, h->quiet_ms};
	/* a stream's window is at most half a buffer: its input holds what it sends */
	uint32_t window = lim->h2_stream_window < w->bufs.size / 2 ? (uint32_t)lim->h2_stream_window
								   : w->bufs.size / 2;
	const nghttp2_settings_entry iv[] = {
	    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, lim->h2_max_streams},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)lim->h2_max_header_list},
	    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	    {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1}, /* WebSocket (RFC 8441) */
	};
	if (nghttp2_submit_settings(h->ss, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) ||
	    nghttp2_session_set_local_window_size(h->ss, NGHTTP2_FLAG_NONE, 0,
						  (int32_t)lim->h2_conn_window))
		goto fail;
	cl->h2 = h;
	cl->codec_free = h2_free;
	cl->state = C_H2;
	h2_process(h);
	return;
fail:
	if (h && h->ss)
		nghttp2_session_del(h->ss);
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	free(h);
	client_close(cl);
}
