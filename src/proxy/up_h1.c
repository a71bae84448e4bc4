/*
 * up_h1.c - the HTTP/1 upstream half of an exchange (see up_h1.h).
 */
#include "proxy/up_h1.h"
#include "runtime/llm.h"
#include "core/clock.h"
#include "proxy/caching.h"
#include "proxy/dispatch.h"
#include "proxy/forward.h"
#include "proxy/up_h2.h"
#include "runtime/pick.h"
#include "runtime/proxy_metric.h"
#include "proxy/xhooks.h"

#include <errno.h>
#include <sys/uio.h>

int up_h1_scan(struct exchange *x)
{
	struct attempt *a = x->att;
	struct buf *in = a->up->in;
	if (a->resp_whole)
		return 0; /* told once: nothing more belongs to this response */
	/* the new bytes go through the resp_body hooks (xhooks.h: tokens counted, the cache's
	 * fill) before the client can see them, and a response read whole through the resp_done
	 * hooks (its tokens settled, the fill completed) at once: the client's next request may
	 * come before this one ends. A body done at its head (Content-Length: 0, a HEAD's) is
	 * whole at the first scan. */
	if (in && !x->resp.done) {
		uint64_t before = x->resp.ready;
		if (http_body_scan(&x->resp, buf_head(in), buf_len(in), 0) < 0)
			return -1;
		if (x->resp.ready > before)
			xhooks_resp_body(x, buf_head(in) + before, x->resp.ready - before);
		if (x->feed.on) { /* what a feature keeps for the client leaves up->in now */
			size_t k = xhooks_keeper(x)->taken(x);
			buf_consume(in, k);
			x->resp.ready -= k; /* (not sent: x->feed.pos counts what the client got) */
		}
	}
	if (x->cut_why)
		return -1; /* a feature ends it here, before the client sees these (exchange.h) */
	if (!x->resp.done)
		return 0;
	a->resp_whole = 1;
	xhooks_resp_done(x);
	/* all in our buffers: a slow reader holds no slot; and what the backend sends after
	 * it (its end, or bytes it should not send) stays in the socket for the idle list */
	exchange_free_slot(x);
	net_conn_read_stop(&a->up->conn);
	return 0;
}

/* The backend says how many requests wait inside it (pools.load_header): remember it. */
static void note_reported_load(struct exchange *x, const struct http_head *h, uint64_t now_ms)
{
	const char *name = x->pool->conf->load_header;
	const struct http_header *f = name[0] ? http_find_header(h, name) : NULL;
	if (!f || !f->value.len || f->value.len > 9)
		return;
	unsigned depth = 0;
	for (uint32_t i = 0; i < f->value.len; i++) {
		char ch = f->value.p[i];
		if (ch < '0' || ch > '9')
			return; /* not a count: ignore it */
		depth = depth * 10 + (unsigned)(ch - '0');
	}
	backend_report_load(x->att->be, now_ms, depth);
}

/* The cache answers instead of the backend (a 304 to its revalidation, stale-if-error): the
 * upstream connection and slot go (a 304 has no body: the connection is reused). */
static enum run answer_from_cache(struct exchange *x)
{
	struct upconn *up = x->att->up;
	exchange_count_response(x, x->status);
	exchange_free_slot(x);
	unsigned said = caching_said(x);
	int reuse = (said == CS_REVAL || said == CS_REQUEST) && up->in &&
		    buf_len(up->in) == x->w->head.head_len && !(x->w->head.flags & HTTP_F_CLOSE) &&
		    x->req.done && !x->req.ready;
	if (reuse)
		buf_consume(up->in, x->w->head.head_len);
	attempt_end(x->att, x->w, reuse);
	exchange_response_started(x);
	x->resp_head = 0; /* the answer's head is the cache's */
	return x->codec->serve(x);
}

/*
 * balance: llm learns each backend's time to first token from its answers. A whole answer's
 * head comes with its first token (after it, even: the fit's base takes the decode in too,
 * alike for every miss count, so the cost per missed block still shows). An event stream's
 * head may come at once (vLLM, SGLang and TGI send it before the prefill) or with the first
 * event: its first token is its first body bytes, with the head when they came in the same
 * read (<body_too>), else at the first read after it (up_h1_read).
 */
static void llm_note_head(struct exchange *x, const struct http_head *h, int body_too,
			  uint64_t now_ns)
{
	struct attempt *a = x->att;
	int picked = x->wt.work != 0; /* its pick put the prompt in the index (else a hedge's) */
	if (!http_is_event_stream(h) || body_too) {
		a->first_ns = now_ns;
		llm_answered(a->be->llm, x->wt.blocks, x->wt.nblocks, x->wt.missed,
			     (now_ns - a->sent_ns) / 1000, picked);
		return;
	}
	llm_cached(a->be->llm, x->wt.blocks, x->wt.nblocks, picked);
	a->ttft_blocks = x->wt.nblocks;
	a->ttft_missed = x->wt.missed;
}

/* An event stream's first body bytes came (llm_note_head): its first token's sample. */
static void llm_note_first_bytes(struct attempt *a)
{
	uint64_t now_ns = clock_now_ns();
	a->first_ns = now_ns;
	if (a->be && a->be->llm)
		llm_first_token(a->be->llm, a->ttft_blocks, a->ttft_missed,
				(now_ns - a->sent_ns) / 1000);
	a->ttft_blocks = 0;
}

/* The final head <h> came (<body_too>: with body bytes behind it): what the balancers, the
 * backend's health and the features learn from it, before the client side writes it. */
static void note_final_head(struct exchange *x, const struct http_head *h, int body_too)
{
	struct worker *w = x->w;
	struct attempt *a = x->att;
	uint64_t now_ns = clock_now_ns(), now_ms = loop_now(w->loop);
	backend_observe(x->pool, a->be, now_ms, (now_ns - a->sent_ns) / 1000, h->status);
	if (a->be->llm && h->status < 400)
		llm_note_head(x, h, body_too, now_ns);
	else if (a->be->llm && x->wt.work) /* refused: the prompt did not stay there */
		llm_unpicked(a->be->llm, x->wt.blocks, x->wt.nblocks, x->wt.missed, x->wt.ticks);
	/* no pick after a response has begun: the prompt's blocks go back to the worker */
	reqbody_end(&x->reqbody, w);
	x->wt.blocks = NULL;
	x->wt.nblocks = 0;
	note_reported_load(x, h, now_ms);
	x->last_read_ns = now_ns;
	x->log.ttfb_ns = now_ns;
	x->status = h->status;
	http_body_init(&x->resp, h->framing, h->content_length);
	xhooks_resp_head(x, h);
	a->reusable = !(h->flags & HTTP_F_CLOSE) && h->minor == 1 && h->framing != HTTP_BODY_CLOSE;
}

enum run up_h1_head(struct exchange *x)
{
	struct upconn *up = x->att->up;
	struct http_head *h = &x->w->head;
	int r = http_parse_response(buf_head(up->in), buf_len(up->in), up->in->cap, x->meth, h);
	if (r == 0)
		return buf_len(up->in) == up->in->cap ? dispatch_failed(x, UP_BAD) : RUN_STAY;
	if (r < 0)
		return dispatch_failed(x, UP_BAD);
	if (h->status == 101)
		return x->codec->upgrade(x, h, (size_t)r);
	/* an interim's or the final head's bytes leave up->in before the codec reads <h>: they
	 * stay where they are (nothing writes up->in meanwhile), and whatever the codec does
	 * next (pass it on, answer, fail over) finds the input past them */
	if (h->status < 200) {
		buf_consume(up->in, (size_t)r);
		return x->codec->interim(x, h, (size_t)r);
	}
	if (caching_response_head(x, h))
		return answer_from_cache(x);
	note_final_head(x, h, buf_len(up->in) > (size_t)r);
	buf_consume(up->in, (size_t)r);
	return x->codec->response_head(x, h, (size_t)r);
}

static const struct net_conn_read_ops up_h1_reads;

enum run up_h1_send(struct exchange *x, const char *body, size_t len, size_t *took, int *progress)
{
	struct attempt *a = x->att;
	struct upconn *up = a->up;
	/* the head with this attempt's credential line (forward.h) */
	size_t head_left = x->uphead ? forward_head_len(x, a) - a->head_off : 0;
	struct iovec iov[4];
	int n = 0;
	*took = 0;
	if (!head_left && !len)
		return RUN_STAY;
	if (head_left)
		n = forward_head_iov(x, a, iov);
	if (len)
		iov[n++] = (struct iovec){(void *)body, len};
	ssize_t sent = up->h2s ? up_h2_writev(up, iov, n) : net_conn_writev(&up->conn, iov, n);
	if (sent == -EAGAIN || sent == -EINTR) {
		up->writable = 0;
		return RUN_STAY;
	}
	if (sent < 0)
		return dispatch_failed(x, UP_RESET);
	size_t k = (size_t)sent;
	size_t from_head = k < head_left ? k : head_left;
	a->head_off += from_head;
	*took = k - from_head;
	if (head_left > from_head || *took < len)
		up->writable = 0; /* a short write: the socket buffer is full */
	*progress = 1;
	x->last_ms = loop_now(x->w->loop);
	if (!up->conn.reading && !up->read_end) /* the request has begun: its answer may come */
		net_conn_read_start(&up->conn, &up_h1_reads, x);
	return RUN_STAY;
}

/* A streamed response's body bytes arrived: record the time since the previous ones. */
static void note_gap(struct exchange *x)
{
	uint64_t now = clock_now_ns();
	if (x->last_read_ns)
		backend_observe_us(x->att->be, PM_BACKEND_GAP, (now - x->last_read_ns) / 1000);
	x->last_read_ns = now;
}

/* The transport's alloc: the room at the end of up->in (a buffer taken if need be). */
static int up_read_room(void *arg, char **p, size_t *len)
{
	struct exchange *x = arg;
	struct upconn *up = x->att->up;
	if (!up->in && !(up->in = buf_get(&x->w->bufs)))
		return -ENOMEM;
	if (!buf_room(up->in))
		buf_compact(up->in);
	if (!buf_room(up->in))
		return -ENOSPC; /* the client has not taken what came: the backend waits */
	*p = up->in->data + up->in->end;
	*len = buf_room(up->in);
	return 0;
}

/* The transport's read: the bytes join up->in (up_h1_read looks at them); an end is noted. */
static void up_read_took(void *arg, ssize_t n)
{
	struct exchange *x = arg;
	struct upconn *up = x->att->up;
	if (n > 0) {
		up->in->end += (uint32_t)n;
		up->read_got += (size_t)n;
	} else {
		up->read_end = n ? (int)n : 1;
	}
}

/* The transport's ready: the response's bytes came on the backend's own readiness; the
 * client side moves them on (the codec's respond). */
static void up_read_ready(void *arg)
{
	struct exchange *x = arg;
	x->codec->respond(x);
}

static const struct net_conn_read_ops up_h1_reads = {
    .alloc = up_read_room,
    .read = up_read_took,
    .ready = up_read_ready,
};

/* The transport read the backend's end (1) or a failure (-errno): before the response began,
 * a failed attempt; within it, the end of a body that ends with the connection, or a cut.
 * Apart (and cold), so the reads of a long body pay nothing for it. */
__attribute__((cold, noinline)) static enum run read_ended(struct exchange *x, int *cut)
{
	struct upconn *up = x->att->up;
	ssize_t n = up->read_end == 1 ? 0 : up->read_end;
	if (!x->resp_head)
		return dispatch_failed(x, UP_RESET);
	/* a body that ends with the connection is whole only when it ends cleanly: over TLS
	 * that is close_notify (0); a FIN or reset without one (< 0) is what anyone on the
	 * path can forge, a truncation (RFC 9112 section 9.8) */
	if (x->resp.framing != HTTP_BODY_CLOSE || (n < 0 && up->conn.ssl)) {
		(void)up_h1_scan(x); /* what arrived goes on; then the client is cut off */
		*cut = 1;
		return RUN_STAY;
	}
	(void)up_h1_scan(x); /* the tail is body too */
	x->resp.done = 1;
	x->att->reusable = 0;
	return RUN_STAY;
}

enum run up_h1_read(struct exchange *x, int *progress, int *cut)
{
	struct upconn *up = x->att->up;
	if (!up->read_end && (up->conn.readable || !up->conn.reading))
		net_conn_read_start(&up->conn, &up_h1_reads, x);
	if (up->h2s && !up->read_end)
		(void)up_h2_pull(up); /* an HTTP/2 stream's response, as HTTP/1.1 */
	if (up->read_got) {
		up->read_got = 0;
		*progress = 1;
		x->last_ms = loop_now(x->w->loop);
		if (x->resp_head && x->resp.framing != HTTP_BODY_LENGTH)
			note_gap(x);
		if (x->att->ttft_blocks && x->resp_head)
			llm_note_first_bytes(x->att);
		return RUN_STAY; /* an end read behind them is looked at once they are */
	}
	return up->read_end ? read_ended(x, cut) : RUN_STAY;
}
