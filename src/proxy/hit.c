/*
 * hit.c - answering a client from a cache object (see hit.h).
 */
#include "proxy/hit.h"
#include "core/dec.h"
#include "proxy/caching.h"
#include "proxy/forward.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#define HIT_IOV 16

/* Append p[0..n) to the head being built at out[*len..cap). */
static void put(char *out, size_t cap, size_t *len, const char *p, size_t n)
{
	if (*len + n <= cap)
		memcpy(out + *len, p, n);
	*len += n;
}

/* Is the stored field line p[0..n) one a 304 leaves out (representation metadata other
 * than Content-Location, RFC 9110 15.4.5)? */
static int not_in_304(const char *p, size_t n)
{
	return n > 8 && strncasecmp(p, "content-", 8) == 0 &&
	       !(n > 16 && strncasecmp(p, "content-location", 16) == 0);
}

int hit_head(struct exchange *x, char *out, size_t cap, int chunked, int keep)
{
	struct caching_x *cx = caching_ctx(x);
	const struct cache_obj *o = cx->cobj;
	size_t len = 0;
	const char *fields = memchr(o->head, '\n', o->head_len);
	size_t flen = fields ? o->head_len - (size_t)(fields + 1 - o->head) : 0;
	fields = fields ? fields + 1 : o->head + o->head_len;
	uint64_t full = cache_obj_state(o) == CACHE_COMPLETE ? cache_obj_body_len(o) : o->total;
	char line[128];
	int n = 0;
	switch (cx->hit_kind) {
	case HIT_304:
		put(out, cap, &len, "HTTP/1.1 304 Not Modified\r\n", 27);
		for (const char *p = fields, *end = fields + flen; p < end;) {
			const char *eol = memchr(p, '\n', (size_t)(end - p));
			size_t k = eol ? (size_t)(eol + 1 - p) : (size_t)(end - p);
			if (!not_in_304(p, k))
				put(out, cap, &len, p, k);
			p += k;
		}
		break;
	case HIT_416:
		n = snprintf(line, sizeof(line),
			     "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%" PRIu64
			     "\r\nContent-Length: 0\r\n",
			     full);
		put(out, cap, &len, line, (size_t)n);
		break;
	case HIT_RANGE:
		n = snprintf(line, sizeof(line),
			     "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %" PRIu64
			     "-%" PRIu64 "/%" PRIu64 "\r\nContent-Length: %" PRIu64 "\r\n",
			     cx->hit_pos, cx->hit_end - 1, full, cx->hit_end - cx->hit_pos);
		put(out, cap, &len, line, (size_t)n);
		put(out, cap, &len, fields, flen);
		break;
	default:
		put(out, cap, &len, o->head, o->head_len);
		if (o->status == 204 || o->status == 304)
			break;
		if (full != UINT64_MAX) {
			memcpy(line, "Content-Length: ", 16);
			n = 16 + (int)dec_u64(line + 16, full);
			memcpy(line + n, "\r\n", 2);
			put(out, cap, &len, line, (size_t)n + 2);
		} else if (cx->hit_kind == HIT_FULL && chunked) {
			put(out, cap, &len, "Transfer-Encoding: chunked\r\n", 28);
			cx->hit_chunked = 1;
		}
		break;
	}
	struct forward_scratch fs; /* response_headers (forward.h), on hits too */
	const struct rewrite_edit *fe = len <= cap ? forward_response(x, &fs) : NULL;
	if (fe) {
		const char *eol = memchr(out, '\n', len);
		size_t s0 = eol ? (size_t)(eol + 1 - out) : len;
		n = rewrite_edit_fields(out + s0, len - s0, cap - s0, fe);
		len = n < 0 ? cap + 1 : s0 + (size_t)n;
	}
	if (len <= cap) {
		n = caching_hit_lines(x, out + len, cap - len);
		len = n < 0 ? cap + 1 : len + (size_t)n;
	}
	put(out, cap, &len, "X-Request-Id: ", 14);
	put(out, cap, &len, x->names.reqid, strlen(x->names.reqid));
	if (keep)
		put(out, cap, &len, "\r\n\r\n", 4);
	else
		put(out, cap, &len, "\r\nConnection: close\r\n\r\n", 23);
	if (len > cap)
		return -1;
	return (int)len;
}

/* Queue the answer's head in cl->out. 0, or -1 when it does not fit. */
static int queue_head(struct client *cl, int keep)
{
	struct buf *b = client_out_buf(cl);
	int n = b ? hit_head(cl->x, b->data + b->end, buf_room(b), cl->h1->minor == 1, keep) : -1;
	if (n < 0)
		return -1;
	b->end += (uint32_t)n;
	cl->x->log.bytes_out += (uint64_t)n; /* (HTTP/2 counts no head bytes: h2.c) */
	return 0;
}

/* The fill under a coalesced wait is of no use (failed, not storable, another variant, or
 * its head late): the exchange goes on to the backend. */
static enum run give_up(struct exchange *x, const char *why)
{
	caching_give_up(x, why);
	return RUN_AGAIN;
}

enum run hit_await_head(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	struct cache_obj *o = cx->cobj;
	for (;;) {
		enum cache_fill_state st = cache_obj_state(o);
		int head = atomic_load_explicit(&o->has_head, memory_order_acquire);
		if (st == CACHE_FAILED || st == CACHE_PASS || (st == CACHE_COMPLETE && !head))
			return give_up(x, st == CACHE_PASS ? "not storable" : "fill failed");
		if (head)
			break;
		if (loop_now(x->w->loop) >= cx->hit_wait_until)
			return give_up(x, "fill too slow (routes.cache.wait_ms)");
		if (!caching_wait(x, UINT64_MAX))
			return RUN_STAY;
	}
	if (cx->cstatus == CS_COLLAPSED && !caching_vary_ok(x))
		return give_up(x, "another variant");
	if (cx->hit_end == UINT64_MAX && o->total != UINT64_MAX)
		cx->hit_end = o->total;
	return RUN_AGAIN;
}

void hit_started(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	cx->hit_started = 1;
	x->resp_head = 1;
	x->status = cx->hit_kind == HIT_304	? 304
		    : cx->hit_kind == HIT_416	? 416
		    : cx->hit_kind == HIT_RANGE ? 206
						: cx->cobj->status;
	x->log.status = x->status;
	x->log.ttfb_ns = x->log.start_ns; /* nothing waited on a backend */
}

size_t hit_copy(struct exchange *x, char *out, size_t len, int *end)
{
	struct caching_x *cx = caching_ctx(x);
	const struct cache_obj *o = cx->cobj;
	int body = cx->hit_kind == HIT_FULL || cx->hit_kind == HIT_RANGE;
	/* the state first: a fill that has ended has all its bytes, but bytes read before its
	 * end may be fewer than it ended with */
	enum cache_fill_state st = cache_obj_state(o);
	uint64_t avail = cache_obj_body_len(o);
	uint64_t to = body ? (cx->hit_end < avail ? cx->hit_end : avail) : cx->hit_pos;
	if (to > cx->hit_pos + len)
		to = cx->hit_pos + len;
	struct iovec iov[HIT_IOV];
	int n = cache_obj_iov(o, cx->hit_pos, to, iov, HIT_IOV);
	size_t got = 0;
	for (int i = 0; i < n; i++) {
		memcpy(out + got, iov[i].iov_base, iov[i].iov_len);
		got += iov[i].iov_len;
	}
	cx->hit_pos += got;
	x->log.bytes_out += got;
	*end = !body || cx->hit_pos >= cx->hit_end || (st == CACHE_COMPLETE && cx->hit_pos >= avail)
		   ? 1
	       : st != CACHE_FILLING && cx->hit_pos >= avail ? -1
							     : 0;
	return got;
}

int hit_continues_stream(struct exchange *x)
{
	struct worker *w = x->w;
	struct caching_x *cx = caching_ctx(x);
	struct buf *b = buf_get(&w->bufs);
	int n = b ? hit_head(x, b->data, b->cap, 0, 1) : -1;
	int ok = n > 0 && cx->hit_kind == HIT_FULL &&
		 http_parse_response(b->data, (size_t)n, (size_t)n, x->meth, &w->head) > 0 &&
		 w->head.status == 200 && http_is_event_stream(&w->head);
	worker_buf_put(w, b);
	return ok;
}

enum run hit_run(struct client *cl)
{
	struct exchange *x = cl->x;
	struct caching_x *cx = caching_ctx(x);
	struct worker *w = cl->w;
	if (!cx->hit_started) {
		enum run r = hit_await_head(x);
		if (r != RUN_AGAIN || !cx->cobj)
			return r;
		cl->h1->client_keep =
		    !cl->h1->req_close && cl->h1->minor == 1 && !w->draining && x->req.done;
		if (queue_head(cl, cl->h1->client_keep) < 0)
			return exchange_abort(x, "cached head does not fit the output buffer");
		hit_started(x);
	}
	struct cache_obj *o = cx->cobj;
	int body = cx->hit_kind == HIT_FULL || cx->hit_kind == HIT_RANGE;
	for (;;) {
		/* the state first: a fill that has ended has all its bytes, but bytes read
		 * before its end may be fewer than it ended with */
		enum cache_fill_state st = cache_obj_state(o);
		uint64_t avail = cache_obj_body_len(o);
		uint64_t to = body ? (cx->hit_end < avail ? cx->hit_end : avail) : cx->hit_pos;
		if (cx->hit_chunked && !cx->hit_chunk_left && cx->hit_pos < to) {
			char size[24];
			int n = snprintf(size, sizeof(size), "%" PRIx64 "\r\n", to - cx->hit_pos);
			if (client_out_put(cl, size, (size_t)n) < 0)
				return exchange_abort(x, "out of memory");
			cx->hit_chunk_left = to - cx->hit_pos;
		}
		if (cx->hit_chunked)
			to = cx->hit_pos + cx->hit_chunk_left;
		size_t pending = client_out_pending(cl);
		if (!pending && cx->hit_pos >= to) {
			int whole = !body || cx->hit_pos >= cx->hit_end ||
				    (st == CACHE_COMPLETE && cx->hit_pos >= avail);
			if (whole && cx->hit_chunked) {
				cx->hit_chunked = 0; /* the last chunk, then the end */
				if (client_out_put(cl, "0\r\n\r\n", 5) < 0)
					return exchange_abort(x, "out of memory");
				continue;
			}
			if (whole) {
				x->relayed = 1;
				return client_finish(cl);
			}
			if (st != CACHE_FILLING)
				return exchange_abort(x, "the cache fill it was reading failed");
			if (!caching_wait(x, cx->hit_pos))
				return RUN_STAY;
			continue;
		}
		if (!cl->writable)
			return RUN_STAY;
		struct iovec iov[HIT_IOV];
		int n = 0;
		if (pending)
			iov[n++] = (struct iovec){buf_head(cl->out), pending};
		n += cache_obj_iov(o, cx->hit_pos, to, iov + n, HIT_IOV - n);
		size_t offered = 0;
		for (int i = 0; i < n; i++)
			offered += iov[i].iov_len;
		ssize_t sent = net_conn_writev(&cl->conn, iov, n);
		if (sent == -EAGAIN || sent == -EINTR) {
			cl->writable = 0;
			if (!cl->h1->pace.client_full) {
				cl->h1->pace.client_full = 1;
				if (!cl->h1->pace.client_took_ms)
					cl->h1->pace.client_took_ms = loop_now(w->loop);
			}
			return RUN_STAY;
		}
		if (sent < 0)
			return exchange_abort(x, "client went away");
		size_t k = (size_t)sent, from_out = k < pending ? k : pending;
		if (from_out)
			buf_consume(cl->out, from_out);
		k -= from_out;
		cx->hit_pos += k;
		x->log.bytes_out += k;
		if (cx->hit_chunked) {
			cx->hit_chunk_left -= k;
			if (!cx->hit_chunk_left && k && client_out_put(cl, "\r\n", 2) < 0)
				return exchange_abort(x, "out of memory");
		}
		cl->h1->pace.client_full = 0;
		cl->h1->pace.client_took_ms = x->last_ms = loop_now(w->loop);
		if ((size_t)sent < offered) {
			cl->writable = 0; /* a short write: the socket buffer is full */
			cl->h1->pace.client_full = 1;
		}
		worker_buf_release(w, &cl->out);
	}
}
