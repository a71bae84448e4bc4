/*
 * relay.c - the HTTP/1 client side of an exchange's bytes (see relay.h): reading request
 * bodies, writing heads and response bytes to the client; the backend's side is up_h1.c's.
 */
#include "proxy/relay.h"
#include "runtime/llm.h"
#include "core/clock.h"
#include "http/prompt.h"
#include "net/sock.h"
#include "proxy/caching.h"
#include "proxy/debugreq.h"
#include "proxy/hit.h"
#include "proxy/llm_explain.h"
#include "proxy/dispatch.h"
#include "proxy/forward.h"
#include "proxy/hedge.h"
#include "proxy/pd.h"
#include "proxy/quota.h"
#include "proxy/splice_body.h"
#include "proxy/xhooks.h"
#include "proxy/tokroute.h"
#include "proxy/sse.h"
#include "proxy/tunnel.h"
#include "proxy/up_h1.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Interim responses (100, 103) relayed per exchange, at most; more is a hostile backend. */
#define INTERIM_MAX 8
#define INTERIM_BYTES_MAX 16384
/* iovecs of one write of kept bytes (send_kept) */
#define FEED_IOV 16

int relay_scan_body(struct exchange *x, struct buf *in)
{
	if (!in)
		return 0;
	return http_body_scan(&x->req, buf_head(in), buf_len(in),
			      x->w->conf->limits.max_body_bytes);
}

enum run relay_reply_bad_body(struct exchange *x, int bad)
{
	return exchange_reply(x, -bad,
			      bad == -413 ? "request body larger than limits.max_body_bytes"
			      : x->req.framing == HTTP_BODY_CHUNKED
				  ? "malformed chunked request body"
				  : "malformed request body",
			      0);
}

/* What relay_scan_body() says of the body bytes now in cl->in. */
static int request_scan(struct client *cl)
{
	return relay_scan_body(cl->x, cl->in);
}

/* balance: llm: the prompt's block hashes, in an array the worker lends (none: no prompt).
 * Blocks of bytes are read from the first <len> bytes of the body (hash.body_max_bytes); a
 * tokenizer reads the whole body, <all> bytes, which the strict view has read already: it
 * tokenizes only the start of a long prompt itself (proxy/tokroute.c), and a prompt cut at
 * body_max_bytes would be keyed on bytes, which no token block matches. */
static void read_prompt_blocks(struct exchange *x, const char *body, size_t len, size_t all)
{
	if (!x->reqbody.llm_blocks && !(x->reqbody.llm_blocks = llm_blocks_get(&x->w->llm_spares)))
		return; /* out of memory: balanced as a request without a prompt */
	/* the model's tokenizer's blocks, if it has one; else blocks of prompt bytes */
	long n = tokroute_blocks(x->w, &x->reqbody, body, all);
	if (n < 0)
		n = http_prompt_blocks(body, len, x->pool->conf->lb.block_bytes,
				       x->reqbody.llm_blocks, LLM_MAX_BLOCKS, NULL);
	if (n <= 0) { /* no prompt (or not one whole block): nothing to hold */
		reqbody_end(&x->reqbody, x->w);
		return;
	}
	if (!x->reqbody.llm_block_tokens) /* (token blocks: their seed holds the salt) */
		llm_scope_blocks(x->reqbody.llm_blocks, (uint32_t)n, &x->reqbody.view, body);
	x->wt.blocks = x->reqbody.llm_blocks;
	x->wt.nblocks = (uint32_t)n;
}

enum run relay_await_body(struct client *cl)
{
	struct exchange *x = cl->x;
	struct worker *w = cl->w;
	const struct conf_hash *hc = &x->pool->conf->hash;
	uint64_t want = w->conf->limits.body_buffer_bytes;
	if (x->reqbody.want_key && hc->body_max_bytes > want)
		want = hc->body_max_bytes;
	if ((x->reqbody.want_model || x->reqbody.want_view) && !want)
		want = UINT64_MAX; /* no body buffers: what the input buffer holds */
	if (client_flush(cl) < 0)  /* a "100 Continue" the client waits for */
		return exchange_abort(x, "client went away");
	for (;;) {
		int bad = request_scan(cl);
		if (bad)
			return relay_reply_bad_body(x, bad);
		if (x->req.done || x->req.ready >= want)
			break;
		if (!cl->conn.readable && !cl->read_end)
			return RUN_STAY;
		ssize_t n = client_read(cl);
		if (n == -ENOSPC) {
			int err = client_grow_in(cl);
			if (err == -ENOSPC)
				break; /* as much as we hold: the rest streams */
			if (err == -EBUSY) {
				/* every body buffer is lent: wait for one (the timer looks
				 * again), never admit a body that has not arrived */
				cl->h1->pace.buf_wait = 1;
				return RUN_STAY;
			}
			if (err < 0)
				return exchange_abort(x, "out of memory");
			continue;
		}
		if (n == -EAGAIN)
			return RUN_STAY;
		if (n <= 0)
			return exchange_abort(x, "client closed during the request body");
		x->last_ms = loop_now(w->loop);
	}
	cl->h1->pace.buffering = 0;
	return relay_body_in(x, cl->in ? buf_head(cl->in) : NULL);
}

enum run relay_body_in(struct exchange *x, const char *body)
{
	const struct conf_hash *hc = &x->pool->conf->hash;
	/* the whole body is read once by the strict view; a stage that decides on it (the model
	 * among backends, the token reservation, the cache key) takes no body the view refuses,
	 * while the hints (heartbeats, the affinity key) only go without */
	int strict = x->reqbody.want_model || x->reqbody.want_view || x->reqbody.cache_body;
	if ((strict || x->reqbody.want_key || exchange_pace(x)->sse_body) && body && x->req.done &&
	    x->req.framing == HTTP_BODY_LENGTH &&
	    reqbody_read_view(&x->reqbody, body, x->req.ready) < 0 && strict)
		return exchange_reply(x, 400, x->reqbody.view_why, 0);
	void *conn = x->conn;
	const struct exchange_codec_ops *codec = x->codec;
	enum run r = quota_note_body(x, body);
	if (!exchange_goes_on(r, conn, codec, x))
		return r; /* (a body the limits or the budget refuse: answered) */
	xhooks_req_body(x, body, x->req.ready);
	if (x->reqbody.want_key) {
		size_t have = x->req.ready < hc->body_max_bytes ? x->req.ready : hc->body_max_bytes;
		x->reqbody.want_key = 0;
		if (x->reqbody.view_read && !x->reqbody.view_ok) {
			/* not JSON: no prompt (a body too long for the view is keyed on its start,
			 * which decides nothing but the affinity) */
		} else if (x->pool->conf->balance->blocks) /* llm reads the blocks, never the key */
			read_prompt_blocks(x, body, have, x->req.ready);
		else
			x->wt.has_key =
			    http_prompt_key(body, have, 1, hc->prefix_bytes, &x->wt.key) == 1;
	}
	if (x->reqbody.want_model) { /* within what was read, or it names no model here */
		x->reqbody.want_model = 0;
		if (reqbody_note_model(&x->reqbody, body, &x->wt) < 0)
			return exchange_reply(x, 400, REQBODY_MODEL_UNREADABLE, 0);
	}
	return RUN_AGAIN;
}

/*
 * The client's side ended (conn.hup) while its whole request is served: has it left (1)?
 * Leaving closes the upstream connection at once, the cancellation an engine understands.
 * A FIN alone does not tell a client that closed its socket from one that only shut its
 * writing side and waits for the answer (HAProxy's default: such a client has not left). So
 * while no response has begun, an HTTP/1.1 client is asked once, with an interim
 * "100 Continue" that every HTTP/1.1 client reads past: a closed socket answers it with a
 * reset (the next wake-up finds it: client_reset), a half-closed one reads on and gets its
 * answer. An HTTP/1.0 client (no interims for it) and one whose response has begun (the
 * proxy's next write meets the reset anyway) are taken as gone at their FIN; so is one
 * without room for the probe. Bytes still queued before the end (a pipelined request):
 * not gone.
 */
static int client_left(struct client *cl, struct exchange *x)
{
	static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
	if (cl->hup_probed)
		return client_reset(cl);
	if (!client_gone(cl))
		return 0;
	if (x->resp_head || cl->h1->early_head || cl->h1->minor != 1 || client_out_pending(cl) ||
	    client_out_put(cl, probe, sizeof(probe) - 1) < 0)
		return 1;
	cl->hup_probed = 1;
	return 0;
}

/* An interim response (100 Continue, 103 Early Hints), head <h> of <len> bytes: pass it on
 * to 1.1 clients, a few of them (a backend sending them forever would hold the exchange),
 * rewritten like a final head, so that its hop-by-hop fields and its own X-Request-Id and
 * X-Accelnet-Timing stay behind; without room it is left out (it is only a hint). */
enum run relay_interim(struct client *cl, const struct http_head *h, size_t len)
{
	struct exchange *x = cl->x;
	cl->h1->interim_bytes += (uint32_t)len;
	if (++cl->h1->interims > INTERIM_MAX || cl->h1->interim_bytes > INTERIM_BYTES_MAX)
		return dispatch_failed(x, UP_INTERIM);
	if (cl->h1->minor == 1 && !cl->h1->early_head && client_out_buf(cl)) {
		int n = rewrite_response(cl->out->data + cl->out->end, buf_room(cl->out), h, 1,
					 NULL, NULL);
		if (n > 0)
			cl->out->end += (uint32_t)n;
	}
	return RUN_AGAIN;
}

void relay_heartbeat(struct client *cl)
{
	struct exchange *x = cl->x;
	cl->h1->pace.hb_next_ms = loop_now(cl->w->loop) + x->route->sse_heartbeat_ms;
	if (client_out_pending(cl))
		return; /* the last one is still unread: a client that does not read gets no more */
	if (!client_out_buf(cl))
		return;
	if (!cl->h1->early_head) {
		int n = rewrite_sse_head(cl->out->data + cl->out->end, buf_room(cl->out),
					 x->names.reqid);
		if (n < 0)
			return;
		cl->out->end += (uint32_t)n;
		cl->h1->early_head = 1;
	}
	int n = rewrite_sse_comment(cl->out->data + cl->out->end, buf_room(cl->out), "waiting");
	if (n > 0)
		cl->out->end += (uint32_t)n;
}

/*
 * The backend's head <h> (<len> bytes at the front of up->in) came after the proxy began the
 * event stream (sse.h): a 200 text/event-stream continues it (a chunked body as it is, a
 * Content-Length body as one chunk); anything else ends it with an SSE error event.
 */
static enum run early_stream_continue(struct client *cl, const struct http_head *h)
{
	struct exchange *x = cl->x;
	char detail[80];
	int status = sse_refusal(h, 0, detail, sizeof(detail));
	if (status)
		return exchange_reply(x, status, detail, 1);
	if (h->framing == HTTP_BODY_LENGTH) {
		cl->h1->wrap_tail = 1;
		if (h->content_length) {
			int n = rewrite_chunk_size(cl->out->data + cl->out->end, buf_room(cl->out),
						   h->content_length);
			if (n < 0)
				return exchange_abort(x, "client does not read its event stream");
			cl->out->end += (uint32_t)n;
			cl->h1->wrap_size = 1;
		}
	}
	exchange_response_started(x);
	return RUN_AGAIN;
}

/* Lines <n> bytes long at <lines> put in before the head's final CRLF in <cl>'s output: 0, or
 * -1 when there is no room (the head is left as it was). */
static int put_head_lines(struct client *cl, const char *lines, int n)
{
	struct buf *b = cl->out;
	if (n <= 0)
		return n;
	int len =
	    rewrite_head_lines(b->data + b->start, buf_len(b), b->cap - b->start, lines, (size_t)n);
	if (len < 0)
		return -1;
	b->end = b->start + (uint32_t)len;
	return 0;
}

/* Cache-Status for a relayed response. */
static int put_cache_status(struct client *cl)
{
	char lines[256];
	return put_head_lines(cl, lines, caching_status_lines(cl->x, lines, sizeof(lines)));
}

/* X-Accelnet-Llm (llm.explain). */
static int put_llm_explain(struct client *cl)
{
	char lines[1536];
	return put_head_lines(cl, lines, llm_explain_header(cl->x, lines, sizeof(lines)));
}

enum run relay_upgrade(struct client *cl, const struct http_head *h, size_t len)
{
	struct exchange *x = cl->x;
	/* not after an early event-stream head (sse.h): the client has a 200 already */
	if (cl->h1->early_head || !tunnel_accepts(x, h))
		return dispatch_failed(x, UP_BAD);
	if (!client_out_buf(cl))
		return exchange_abort(x, "out of memory");
	return tunnel_start(cl, h, len);
}

enum run relay_response_head(struct client *cl, const struct http_head *h)
{
	struct exchange *x = cl->x;
	struct worker *w = cl->w;
	if (!client_out_buf(cl))
		return exchange_abort(x, "out of memory");
	cl->h1->client_keep = !cl->h1->req_close && cl->h1->minor == 1 && !w->draining &&
			      h->framing != HTTP_BODY_CLOSE && x->req.done;
	if (cl->h1->minor != 1)
		x->att->reusable = 0; /* the request went upstream as HTTP/1.0 too */
	if (cl->h1->early_head)
		return early_stream_continue(cl, h);
	char timing[160];
	struct forward_scratch fs; /* response_headers (forward.h) */
	int n = rewrite_response_edit(
	    cl->out->data + cl->out->end, buf_room(cl->out), h, cl->h1->client_keep, x->names.reqid,
	    x->names.want_timing && debugreq_timing(x, 0, timing, sizeof(timing)) > 0 ? timing
										      : NULL,
	    forward_response(x, &fs));
	if (n < 0)
		return dispatch_failed(x, UP_BAD);
	cl->out->end += (uint32_t)n;
	/* no room left for Cache-Status (a head near the buffer's size): it goes without */
	if (caching_said(x))
		(void)put_cache_status(cl);
	(void)put_llm_explain(cl); /* likewise X-Accelnet-Llm (llm.explain) */
	if (xhooks_keeper(x)) {	   /* the body from what a feature keeps (xhooks.h) */
		x->feed.on = 1;
		x->feed.chunked = h->framing == HTTP_BODY_CHUNKED;
	} else {
		(void)splice_body_begin(cl, h);
	}
	exchange_response_started(x);
	return RUN_AGAIN;
}

/* Write a[0..alen) then b[0..blen) to <c> in one call. Bytes written, or -errno. */
static ssize_t send_gathered(struct net_conn *c, const char *a, size_t alen, const char *b,
			     size_t blen)
{
	struct iovec iov[2];
	int n = 0;
	if (alen)
		iov[n++] = (struct iovec){(void *)a, alen};
	if (blen)
		iov[n++] = (struct iovec){(void *)b, blen};
	return net_conn_writev(c, iov, n);
}

/* Client -> backend: the request head and the body bytes ready in cl->in (up_h1.h). */
static enum run send_upstream(struct client *cl, int *progress)
{
	struct exchange *x = cl->x;
	size_t k = 0;
	struct buf *alt = pd_decode_body(x); /* disaggregation: the decode's own body */
	if (alt && x->req.ready) {
		enum run r =
		    up_h1_send(x, buf_len(alt) ? buf_head(alt) : NULL, buf_len(alt), &k, progress);
		buf_consume(alt, k);
		/* the client's body counts as sent as the decode's goes, so that no retry resends
		 * a part of it: all but its last byte while the decode's is not all written */
		int all = !buf_len(alt) && x->att->head_off == forward_head_len(x, x->att);
		k = all ? x->req.ready : k && x->req.ready > 1 ? x->req.ready - 1 : 0;
		if (k) {
			buf_consume(cl->in, k);
			http_body_sent(&x->req, k);
		}
		return r;
	}
	enum run r =
	    up_h1_send(x, x->req.ready ? buf_head(cl->in) : NULL, x->req.ready, &k, progress);
	if (k) {
		buf_consume(cl->in, k);
		http_body_sent(&x->req, k);
		if (x->req.done && !x->req.ready)
			client_shrink_in(cl);
	}
	return r;
}

/* Write queued heads and ready response bytes to the client. */
static enum run send_client(struct client *cl, int *progress)
{
	struct exchange *x = cl->x;
	struct upconn *up = x->att->up;
	size_t head_left = client_out_pending(cl);
	if (!head_left && !x->resp.ready)
		return RUN_STAY;
	ssize_t sent = send_gathered(&cl->conn, head_left ? buf_head(cl->out) : NULL, head_left,
				     x->resp.ready ? buf_head(up->in) : NULL, x->resp.ready);
	if (sent == -EAGAIN || sent == -EINTR) {
		cl->writable = 0;
		if (!cl->h1->pace.client_full) {
			cl->h1->pace.client_full =
			    1; /* timeouts.send_ms runs from the last bytes it took */
			if (!cl->h1->pace.client_took_ms)
				cl->h1->pace.client_took_ms = loop_now(cl->w->loop);
		}
		return RUN_STAY;
	}
	if (sent < 0)
		return exchange_abort(x, "client went away");
	size_t k = (size_t)sent;
	size_t from_head = k < head_left ? k : head_left;
	if (from_head)
		buf_consume(cl->out, from_head);
	k -= from_head;
	if (k) {
		buf_consume(up->in, k);
		http_body_sent(&x->resp, k);
	}
	cl->h1->pace.client_full = client_out_pending(cl) || x->resp.ready;
	if (cl->h1->pace.client_full)
		cl->writable = 0; /* a short write: the socket buffer is full */
	cl->h1->pace.client_took_ms = loop_now(cl->w->loop);
	worker_buf_release(cl->w, &cl->out);
	*progress = 1;
	if (x->resp_head) /* heartbeats do not hold off first_byte_ms */
		x->last_ms = cl->h1->pace.client_took_ms;
	return RUN_STAY;
}

/* The client's socket is full: timeouts.send_ms runs from the last bytes it took. */
static void client_full(struct client *cl)
{
	cl->writable = 0;
	if (!cl->h1->pace.client_full) {
		cl->h1->pace.client_full = 1;
		if (!cl->h1->pace.client_took_ms)
			cl->h1->pace.client_took_ms = loop_now(cl->w->loop);
	}
}

/* Queue a chunk's size line for <n> bytes in cl->out. 0, or -1 without room. */
static int put_chunk_size(struct client *cl, uint64_t n)
{
	char line[24];
	int k = snprintf(line, sizeof(line), "%" PRIx64 "\r\n", n);
	return client_out_put(cl, line, (size_t)k);
}

/*
 * The response body from what a feature keeps (xhooks.h: the cache's fill), gathered with
 * queued heads in one writev; a chunked response in chunks of our own (its trailers are not
 * kept). The backend is read meanwhile whatever the client takes. Should the feature stop
 * keeping, the client gets what it kept, then the bytes left in up->in (x->feed.raw): a
 * chunked body goes on inside the chunk the feature stopped in, announced by a size line of
 * our own for what is left of it, then byte for byte.
 */
static enum run send_kept(struct client *cl, int *progress)
{
	struct exchange *x = cl->x;
	const struct xkeep *kp = xhooks_keeper(x);
	for (;;) {
		int state;
		uint64_t kept = kp->kept(x, &state), to = kept;
		if (x->feed.chunked && !x->feed.chunk_left && x->feed.pos < kept) {
			if (put_chunk_size(cl, kept - x->feed.pos) < 0)
				return exchange_abort(x, "out of memory");
			x->feed.chunk_left = kept - x->feed.pos;
		}
		if (x->feed.chunked)
			to = x->feed.pos + x->feed.chunk_left;
		size_t pending = client_out_pending(cl);
		if (!pending && x->feed.pos >= to) {
			if (x->feed.pos < kept || state > 0)
				return RUN_STAY; /* more is coming */
			if (state < 0) {	 /* stopped: the rest from up->in */
				uint64_t left =
				    x->feed.chunked ? http_chunked_pending(kp->resume(x)) : 0;
				if (left && put_chunk_size(cl, left) < 0)
					return exchange_abort(x, "out of memory");
				x->feed.raw = 1;
				return RUN_STAY;
			}
			if (x->feed.chunked && !x->feed.ended) {
				if (client_out_put(cl, "0\r\n\r\n", 5) < 0)
					return exchange_abort(x, "out of memory");
				x->feed.ended = 1;
				continue;
			}
			x->feed.done = 1;
			return RUN_STAY;
		}
		if (!cl->writable)
			return RUN_STAY;
		struct iovec iov[FEED_IOV];
		int n = 0;
		if (pending)
			iov[n++] = (struct iovec){buf_head(cl->out), pending};
		if (x->feed.pos < to)
			n += kp->iov(x, x->feed.pos, to, iov + n, FEED_IOV - n);
		size_t offered = 0;
		for (int i = 0; i < n; i++)
			offered += iov[i].iov_len;
		ssize_t sent = net_conn_writev(&cl->conn, iov, n);
		if (sent == -EAGAIN || sent == -EINTR) {
			client_full(cl);
			return RUN_STAY;
		}
		if (sent < 0)
			return exchange_abort(x, "client went away");
		size_t k = (size_t)sent, from_out = k < pending ? k : pending;
		if (from_out)
			buf_consume(cl->out, from_out);
		k -= from_out;
		x->feed.pos += k;
		x->resp.sent += k; /* the access log's bytes */
		if (x->feed.chunked && k) {
			x->feed.chunk_left -= k;
			if (!x->feed.chunk_left && client_out_put(cl, "\r\n", 2) < 0)
				return exchange_abort(x, "out of memory");
		}
		cl->h1->pace.client_full = 0;
		cl->h1->pace.client_took_ms = x->last_ms = loop_now(cl->w->loop);
		*progress = 1;
		if ((size_t)sent < offered) {
			client_full(cl); /* a short write: the socket buffer is full */
			cl->h1->pace.client_took_ms = x->last_ms;
			return RUN_STAY;
		}
		worker_buf_release(cl->w, &cl->out);
	}
}

/* Backend -> proxy: one read of the response (up_h1.h); a backend that closed mid-response
 * leaves the client with what arrived, then cut off. */
static enum run read_upstream(struct client *cl, int *progress)
{
	struct exchange *x = cl->x;
	int cut = 0, dummy = 0;
	enum run r = up_h1_read(x, progress, &cut);
	if (r != RUN_STAY || !cut)
		return r;
	if (cl->writable && !x->cut_why && send_client(cl, &dummy) == RUN_GONE)
		return RUN_GONE;
	return exchange_abort(x, x->cut_why ? x->cut_why : "backend closed mid-response");
}

/* Client -> proxy: one read of the request body. */
static enum run read_client(struct client *cl, int *progress)
{
	struct exchange *x = cl->x;
	ssize_t n = client_read(cl);
	if (n == 0 || (n < 0 && n != -EAGAIN && n != -ENOSPC))
		return exchange_abort(x, "client closed during the request body");
	if (n > 0) {
		*progress = 1;
		x->last_ms = loop_now(cl->w->loop);
	}
	return RUN_STAY;
}

/* One pass over both directions. RUN_STAY with *progress when something moved. */
static enum run relay_pass(struct client *cl, int *progress)
{
	struct exchange *x = cl->x;
	struct upconn *up = x->att->up;
	enum run r;
	if (up->failed)
		return dispatch_failed(x, up->tls_failed		    ? UP_TLS
					  : sock_error_is_local(up->failed) ? UP_LOCAL
									    : UP_CONNECT);
	if (!up->connecting && !x->log.conn_ns && x->log.dispatch_ns)
		x->log.conn_ns = clock_now_ns(); /* the access log's connect time */
	if (!up->connecting && up->writable &&
	    (x->req.ready || (x->uphead && x->att->head_off < x->uphead->end)) &&
	    (r = send_upstream(cl, progress)) != RUN_STAY)
		return r;
	if (x->att->up != up)
		return RUN_STAY; /* failed over (retried, spilled, promoted): look again */
	if (!x->req.done && (cl->conn.readable || cl->read_end) &&
	    (r = read_client(cl, progress)) != RUN_STAY)
		return r;
	if (x->req.done && cl->conn.hup && (!cl->hup_checked || cl->hup_probed) &&
	    client_left(cl, x))
		return exchange_abort(x, "client closed the connection");
	int bad = request_scan(cl);
	if (bad && x->resp_head)
		return exchange_abort(x, "bad request body");
	if (bad)
		return relay_reply_bad_body(x, bad);
	if (!x->resp.done && !up->connecting && !splice_body_on(x) &&
	    (up->conn.readable || !up->conn.reading || up->read_got || up->read_end) &&
	    (r = read_upstream(cl, progress)) != RUN_STAY)
		return r;
	if (x->att->up != up)
		return RUN_STAY;
	if (!x->resp_head && up->in && buf_len(up->in)) {
		r = up_h1_head(x);
		if (r == RUN_GONE || (r == RUN_AGAIN && (cl->x != x || cl->state == C_TUNNEL)))
			return r; /* gone, the exchange ended (answered, failed over), a tunnel */
		if (r == RUN_AGAIN)
			*progress = 1;
		if (x->att->up != up)
			return RUN_STAY;
	}
	/* a response in whole gives its slot back here (up_h1.h), before the client takes it */
	if (x->resp_head && up_h1_scan(x) < 0)
		return exchange_abort(x, x->cut_why ? x->cut_why
						    : "backend sent a malformed chunked body");
	if (x->feed.on && !x->feed.raw && x->resp_head && (r = send_kept(cl, progress)) != RUN_STAY)
		return r;
	if ((!x->feed.on || x->feed.raw) && cl->writable &&
	    (client_out_pending(cl) || x->resp.ready) &&
	    (r = send_client(cl, progress)) != RUN_STAY)
		return r;
	if (splice_body_on(x) && (r = splice_body_move(cl, progress)) != RUN_STAY)
		return r;
	if (cl->h1->wrap_tail && x->resp.done && !x->resp.ready) {
		/* the one chunk of a Content-Length body ends; then the last chunk */
		const char *tail = rewrite_chunk_tail(cl->h1->wrap_size);
		if (client_out_put(cl, tail, strlen(tail)) < 0)
			return exchange_abort(x, "out of memory");
		cl->h1->wrap_tail = 0;
		*progress = 1;
	}
	return RUN_STAY;
}

enum run relay_run(struct client *cl)
{
	struct exchange *x = cl->x;
	if (caching_answers(x) && !x->att->up)
		return hit_run(cl); /* the cache answers (client_finish ends it) */
	/* its prefill goes on (pd.h): only notice a client that gave up (as when queued: a
	 * half-closed client has not) */
	if (pd_waiting(x)) {
		if (cl->conn.hup && (!cl->hup_checked || cl->hup_probed) && client_left(cl, x))
			return exchange_abort(x, "client closed the connection during the prefill");
		if (client_flush(cl) < 0) /* the probe client_left put */
			return exchange_abort(x, "client went away");
		return pd_run(x); /* RUN_AGAIN: dispatched (or answered), look again */
	}
	if (x->wt.state != W_IDLE || x->att->local_wait) {
		/* waiting for a slot or a descriptor: only notice a client that gave up */
		if (cl->conn.hup && (!cl->hup_checked || cl->hup_probed) && client_left(cl, x))
			return exchange_abort(x, "client closed the connection while queued");
		if (client_flush(cl) < 0) /* heartbeats */
			return exchange_abort(x, "client went away");
		return RUN_STAY;
	}
	for (;;) {
		int progress = 0;
		if (x->wt.state != W_IDLE || !x->att->up)
			return RUN_STAY; /* failed over into a queue: a grant resumes it */
		if (x->hedge && hedge_run(x))
			continue; /* the copy answered first: carry on with it */
		enum run r = relay_pass(cl, &progress);
		if (r != RUN_STAY)
			return r;
		if (x->resp_head && x->resp.done && !client_out_pending(cl) && !x->resp.ready &&
		    !splice_body_held(x) && (!x->feed.on || x->feed.raw || x->feed.done))
			return client_finish(cl);
		if (!progress)
			return RUN_STAY;
	}
}
