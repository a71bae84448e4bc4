/*
 * access.c - the access log's hooks on the exchange (see access.h): one line per request in
 * obs/accesslog.h's rings.
 *
 * Its head hook runs while the request head is still in the client's buffer: a request drawn
 * into the log joins the exchange (xhooks.h) and the method, the path and the User-Agent are
 * copied (cut to fit) into its context, as the head is gone by the end; one left out costs
 * nothing more (no end hook). Its end hook -- every exchange ends in exchange_free(), relayed,
 * answered by the proxy or cut -- fills the record in place in the worker's ring slot: no
 * allocation, no lock, no atomic another worker writes.
 *
 * The figures: queue wait is from joining the pool's queue to the grant (0 when a slot was
 * free); connect from the first dispatch to the upstream connection being ready (TLS
 * included; 0 for a kept-alive one); time to first byte and total from the request head;
 * for a response whose tokens are counted (an event stream, or any response of a route with
 * api: openai or token limits: tally.h) the number of events and their mean gap, from the
 * same count as the metrics, and its prompt and completion tokens as the route's figures add
 * them (tally.h); upstream time from the first dispatch to the end. The route is named as its
 * metrics label names it; the prefill backend is pd.h's (a disaggregated pool); the model is
 * the body's when a stage read it; the cache result is
 * caching_said()'s; the forwarded target is forward.h's when routes.rewrite changed it. The
 * tenant is the authenticated identity (never a key, token or password), else the routes'
 * tenant_header is not logged: only what auth proved.
 *
 * A request refused before it became an exchange (a malformed head: 400, 431, 505 ...; a
 * head not received in time: 408) gets a line too, from access_log_refusal(): the client,
 * the status, the request id it was answered with, the bytes read and answered, and the method
 * and target when its request line shows them. That path costs the normal one nothing.
 */
#include "core/clock.h"
#include "core/rand.h"
#include "obs/accesslog.h"
#include "proxy/access.h"
#include "proxy/caching.h"
#include "proxy/forward.h"
#include "proxy/pd.h"
#include "proxy/spend.h"
#include "proxy/tally.h"
#include "runtime/proxy_metric.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* What the access log keeps of an exchange: its request line and User-Agent, copied at the
 * head (<on>: it is logged). */
struct access_x {
	uint8_t on, path_cut;
	char method[16], path[ALOG_PATH_MAX + 1], ua[ALOG_UA_MAX + 1];
};

static size_t ctx_off;
static uint32_t bit; /* joined by a request drawn into the log (access_note_head()) */

static void copy_cut(char *dst, size_t cap, const char *p, size_t len, uint8_t *cut)
{
	if (len >= cap) {
		len = cap - 1;
		if (cut)
			*cut = 1;
	}
	memcpy(dst, p, len);
	dst[len] = 0;
	/* a NUL inside would end the string early; the parser refuses them, keep it so */
	for (size_t i = 0; i < len; i++)
		if (!dst[i])
			dst[i] = ' ';
}

/* Is the access log on, and this request drawn into its sample (access_log.sample)? */
static int access_sampled(struct worker *w)
{
	return w->alog_ring &&
	       (w->alog_sample_cut == UINT64_MAX || rand_next(&w->rng) < w->alog_sample_cut);
}

/* Now, on the wall clock, in microseconds: a line's time. */
static uint64_t wall_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
}

static void access_note_head(struct exchange *x, const struct http_head *h)
{
	/* sampled here, once: a request left out costs no copies (on stays 0) */
	if (!access_sampled(x->w))
		return;
	struct access_x *a = xhooks_join(x, &access_hook);
	a->on = 1;
	a->path_cut = 0;
	copy_cut(a->method, sizeof(a->method), h->method.p, h->method.len, NULL);
	copy_cut(a->path, sizeof(a->path), h->target.p, h->target.len, &a->path_cut);
	const struct http_header *ua = http_find_header(h, "user-agent");
	if (ua)
		copy_cut(a->ua, sizeof(a->ua), ua->value.p, ua->value.len, NULL);
	else
		a->ua[0] = 0;
}

int access_request_line(const struct exchange *x, const char **method, const char **path, int *cut)
{
	const struct access_x *a = xhooks_peek(x, &access_hook);
	if (!a->on)
		return 0;
	*method = a->method;
	*path = a->path;
	*cut = a->path_cut;
	return 1;
}

static void put_str(char *dst, size_t cap, const char *s)
{
	if (!s)
		s = "";
	size_t n = strlen(s);
	copy_cut(dst, cap, s, n, NULL);
}

/* What the cache did (caching_said()), as Cache-Status and the route's cache metric name it. */
static const char *const cache_names[] = {
    "",	      "hit",	"stale",   "stale_if_error", "collapsed", "miss", "revalidated",
    "bypass", "method", "request", "pass",
};
_Static_assert(sizeof(cache_names) / sizeof(cache_names[0]) == CS_PASS + 1,
	       "a name for each caching_said() value");

/* The figures beside the request line: route name, model, tokens, cache, forwarded target,
 * time at the backend. */
static void access_log_more(struct exchange *x, struct alog_rec *r, uint64_t now)
{
	struct worker *w = x->w;
	int cut = 0;
	const char *target = forward_target(x, &cut);
	unsigned cs = caching_said(x);
	put_str(r->route_name, sizeof(r->route_name),
		x->route ? w->rt->route_labels[x->route - w->conf->routes] : NULL);
	put_str(r->model, sizeof(r->model), x->wt.has_model ? x->reqbody.model : NULL);
	put_str(r->cache, sizeof(r->cache), cs <= CS_PASS ? cache_names[cs] : NULL);
	put_str(r->target, sizeof(r->target), target);
	r->target_cut = (uint8_t)cut;
	r->has_usage = (uint8_t)tally_usage_tokens(x, &r->prompt_tokens, &r->completion_tokens);
	r->has_cost = (uint8_t)spend_cost_of(x, &r->cost_micros);
	r->cut = x->cut_why;
	r->upstream_us = x->log.backend && x->log.dispatch_ns
			     ? exchange_us_between(x->log.dispatch_ns, now)
			     : UINT32_MAX;
}

static void access_log_exchange(struct exchange *x, uint64_t now)
{
	struct worker *w = x->w;
	const struct access_x *a = xhooks_ctx(x, ctx_off); /* (its end: it joined) */
	if (!w->alog_ring || !a->on || (x->route && !x->route->access_log))
		return;
	struct alog_rec *r = alog_ring_claim(w->alog_ring);
	if (!r)
		return;
	r->time_us = wall_now_us();
	r->status = x->log.status ? x->log.status : x->resp_head ? x->status : 0;
	r->route = x->route ? (int)(x->route - w->conf->routes) : -1;
	r->bytes_in = x->log.head_len + x->req.sent;
	r->bytes_out = x->log.status ? x->log.bytes_out : x->resp.sent;
	r->queue_us = exchange_queue_us(x, loop_now(w->loop));
	r->connect_us = exchange_us_between(x->log.dispatch_ns, x->log.conn_ns);
	r->ttfb_us =
	    x->resp_head ? exchange_us_between(x->log.start_ns, x->log.ttfb_ns) : UINT32_MAX;
	r->total_us = exchange_us_between(x->log.start_ns, now);
	struct tally_tokens tk;
	tally_tokens_of(x, &tk);
	r->tokens = tk.events > UINT32_MAX ? UINT32_MAX : (uint32_t)tk.events;
	r->gap_us = r->tokens > 1 && tk.last_ns > tk.first_ns
			? exchange_us((tk.last_ns - tk.first_ns) / 1000 / (r->tokens - 1))
			: UINT32_MAX;
	r->path_cut = a->path_cut;
	memcpy(r->reqid, x->names.reqid, sizeof(r->reqid) - 1);
	r->reqid[sizeof(r->reqid) - 1] = 0;
	memcpy(r->trace_id, x->names.traceparent + 3, TRACE_ID_HEX);
	r->trace_id[TRACE_ID_HEX] = 0;
	memcpy(r->span_id, x->names.traceparent + 36, SPAN_ID_HEX);
	r->span_id[SPAN_ID_HEX] = 0;
	put_str(r->client, sizeof(r->client), x->peer.ip);
	put_str(r->tenant, sizeof(r->tenant), x->peer.identity);
	put_str(r->method, sizeof(r->method), a->method);
	put_str(r->protocol, sizeof(r->protocol), client_proto_names[x->protocol]);
	put_str(r->pool, sizeof(r->pool), x->pool ? x->pool->conf->name : NULL);
	put_str(r->backend, sizeof(r->backend), x->log.backend ? x->log.backend->name : NULL);
	put_str(r->prefill_backend, sizeof(r->prefill_backend), pd_prefill_backend(x));
	put_str(r->path, sizeof(r->path), a->path);
	put_str(r->ua, sizeof(r->ua), a->ua);
	access_log_more(x, r, now);
	alog_ring_commit(w->alog_ring);
}

const struct xhook access_hook = {
    .name = "access_log",
    .ctx_size = sizeof(struct access_x),
    .ctx_off = &ctx_off,
    .bit = &bit,
    .head = access_note_head,
    .end = access_log_exchange,
};

/* The method and target of the request line at head[0..len), when it shows them: a token,
 * one space, a target without spaces or control bytes, one space (then the version). */
static void refusal_request_line(struct alog_rec *r, const char *head, size_t len)
{
	size_t m = 0;
	while (m < len && m < sizeof(r->method) - 1 && http_is_tchar((unsigned char)head[m]))
		m++;
	if (!m || m >= len || head[m] != ' ')
		return;
	size_t t = m + 1, end = t;
	while (end < len && (unsigned char)head[end] > ' ' && head[end] != 0x7f)
		end++;
	if (end == t || end >= len || head[end] != ' ')
		return;
	memcpy(r->method, head, m);
	r->method[m] = 0;
	copy_cut(r->path, sizeof(r->path), head + t, end - t, &r->path_cut);
}

void access_log_refusal(struct worker *w, const char *client_ip, int status, const char *reqid,
			uint64_t bytes_out, const char *head, size_t len)
{
	if (!access_sampled(w))
		return;
	struct alog_rec *r = alog_ring_claim(w->alog_ring);
	if (!r)
		return;
	memset(r, 0, sizeof(*r));
	r->time_us = wall_now_us();
	r->status = status;
	r->route = -1;
	r->bytes_in = len;
	r->bytes_out = bytes_out;
	r->queue_us = r->connect_us = r->ttfb_us = r->total_us = r->gap_us = UINT32_MAX;
	r->upstream_us = UINT32_MAX;
	put_str(r->reqid, sizeof(r->reqid), reqid);
	put_str(r->client, sizeof(r->client), client_ip);
	if (head)
		refusal_request_line(r, head, len);
	alog_ring_commit(w->alog_ring);
}
