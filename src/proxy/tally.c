/*
 * tally.c - the figures of an exchange by route and by tenant, and the token-level ones of
 * an LLM response: time to first token, the gaps between tokens, prompt and completion
 * tokens (runtime/proxy_metric.h's PM_ROUTE_*, PM_TENANT_*, PM_BACKEND_TTFT and
 * PM_BACKEND_TOKEN_GAP).
 *
 * Tokens are counted in every event stream (a response of Content-Type text/event-stream,
 * on any route), and in every response of routes with api: openai or whose tokens are
 * limited (rate_limit.tokens_per_minute) or priced (budget), JSON completions included: the
 * response body passes through one usage scanner (http/usage.h), the very count the token
 * limits and budgets settle with and the access log writes. A token is an SSE data line carrying
 * text (lines ended by CR, LF or CRLF), timed when the read that completes it arrives: the first
 * one's time since the request was sent upstream is the time to first token, each later one's time
 * since the previous one a gap (events that arrive in one read are 0 apart, as the client
 * sees them). A response that is not an event stream (a whole
 * JSON completion) has no events, so no time to first token and no gaps: its first byte is
 * its whole answer, which accelnet_backend_ttfb_seconds already times. Prompt and completion
 * tokens come from the response's "usage" when it has one (a JSON completion always; a
 * stream when the client asked stream_options.include_usage); without one, the completion
 * is the events counted and the prompt is not counted.
 *
 * A feature that reads the usage without counting it (llm_explain.h: the engine's cached
 * tokens) asks for the same scan at the response head (tally_read_usage()): one scanner per
 * response whoever reads it, and nothing counted that was not counted before.
 *
 * Its hooks (tally_hook, xhooks.h): the response head, the response body bytes as they come
 * from the backend (framing and all: the scanner takes chunked framing off itself), and the
 * end of the exchange. Its context is the scanner and the token clocks. Every count
 * goes to the worker's own shard (worker.shard): plain stores, nothing shared. The tenant
 * is the authenticated identity (routes.auth), never a header a client may write; requests
 * without one are in the route's figures only, and tenants past metrics.max_tenants are
 * folded into "other" (obs/names.h).
 */
#include "core/clock.h"
#include "proxy/tally.h"
#include "runtime/proxy_metric.h"

#include <string.h>
#include <strings.h>

/* A backend may report any 19 digits: one response counts at most this many tokens. */
#define TOKENS_MAX_PER_RESPONSE (1ull << 40)

/* What tally.c keeps of an exchange. */
struct tally_x {
	struct usage_scan usage;    /* the response's token usage, while on */
	uint64_t first_ns, last_ns; /* the first and the last token event; 0: none */
	unsigned on : 1;	    /* the response's tokens are counted */
	unsigned want : 1;	    /* ... whatever it is (tally_want_tokens()) */
	unsigned read : 1;	    /* its usage is scanned, not counted (tally_read_usage()) */
};

static size_t ctx_off;

static struct tally_x *tx(const struct exchange *x)
{
	return xhooks_ctx(x, ctx_off);
}

void tally_want_tokens(struct exchange *x)
{
	tx(x)->want = 1;
}

const struct usage_scan *tally_usage(const struct exchange *x)
{
	return &tx(x)->usage;
}

void tally_tokens_of(const struct exchange *x, struct tally_tokens *t)
{
	const struct tally_x *c = tx(x);
	t->events = c->usage.events;
	t->first_ns = c->first_ns;
	t->last_ns = c->last_ns;
}

/* The response's body goes through the usage scanner. */
static void scan_start(struct exchange *x, struct tally_x *c)
{
	xhooks_want_body(x, &tally_hook);
	usage_scan_init(&c->usage);
	if (x->resp.framing == HTTP_BODY_CHUNKED)
		usage_scan_chunked(&c->usage);
}

static void tally_response_head(struct exchange *x, const struct http_head *h)
{
	struct tally_x *c = tx(x);
	c->on = x->route->api == CONF_API_OPENAI || c->want || http_is_event_stream(h);
	c->read = 0;
	c->first_ns = c->last_ns = 0;
	if (c->on)
		scan_start(x, c);
}

void tally_read_usage(struct exchange *x)
{
	struct tally_x *c = tx(x);
	if (c->on || c->read)
		return; /* scanned already */
	c->read = 1;
	scan_start(x, c);
}

/* <n> token events came in one read at <now>. */
static void note_events(struct exchange *x, struct tally_x *c, uint64_t n, uint64_t now)
{
	struct metrics_shard *sh = x->w->shard;
	size_t r = (size_t)(x->route - x->w->conf->routes);
	if (!c->first_ns) {
		uint64_t us = now > x->att->sent_ns ? (now - x->att->sent_ns) / 1000 : 0;
		metrics_observe(sh, PM_ROUTE_TTFT, r, us);
		if (x->att->be)
			metrics_observe(sh, PM_BACKEND_TTFT, x->att->be->id, us);
		c->first_ns = c->last_ns = now;
		n--;
	}
	if (!n)
		return;
	uint64_t us = now > c->last_ns ? (now - c->last_ns) / 1000 : 0;
	metrics_observe(sh, PM_ROUTE_TOKEN_GAP, r, us);
	if (n > 1)
		metrics_observe_n(sh, PM_ROUTE_TOKEN_GAP, r, 0, n - 1);
	if (x->att->be) {
		metrics_observe(sh, PM_BACKEND_TOKEN_GAP, x->att->be->id, us);
		if (n > 1)
			metrics_observe_n(sh, PM_BACKEND_TOKEN_GAP, x->att->be->id, 0, n - 1);
	}
	c->last_ns = now;
}

static void tally_body(struct exchange *x, const char *p, size_t len)
{
	struct tally_x *c = tx(x);
	if (!c->on && !c->read)
		return;
	uint64_t before = c->usage.events;
	usage_scan_feed(&c->usage, p, len);
	if (c->on && c->usage.events > before)
		note_events(x, c, c->usage.events - before, clock_now_ns());
}

static uint64_t clip(uint64_t n)
{
	return n < TOKENS_MAX_PER_RESPONSE ? n : TOKENS_MAX_PER_RESPONSE;
}

/* The response's prompt and completion tokens: its usage, else the events counted. */
static void tokens_of(const struct usage_scan *u, uint64_t *prompt, uint64_t *completion)
{
	*prompt = u->has_prompt ? clip(u->prompt) : 0;
	if (u->has_completion)
		*completion = u->completion;
	else if (u->has_total && u->has_prompt && u->total >= u->prompt)
		*completion = u->total - u->prompt;
	else
		*completion = u->events;
	*completion = clip(*completion);
}

int tally_usage_tokens(const struct exchange *x, uint64_t *prompt, uint64_t *completion)
{
	const struct tally_x *c = tx(x);
	if (!c->on)
		return 0;
	tokens_of(&c->usage, prompt, completion);
	return 1;
}

static void tally_exchange(struct exchange *x, uint64_t now)
{
	struct worker *w = x->w;
	const struct tally_x *c = tx(x);
	struct metrics_shard *sh = w->shard;
	if (!x->route)
		return; /* no route matched (404): in no route's figures */
	size_t r = (size_t)(x->route - w->conf->routes);
	int status = x->log.status ? x->log.status : x->relayed ? x->status : 0;
	size_t cls = status >= 100 && status < 600 ? (size_t)status / 100 : 0;
	uint64_t prompt = 0, completion = 0;
	metrics_add(sh, PM_ROUTE_REQUESTS, r * PM_CLASSES + cls, 1);
	metrics_observe(sh, PM_ROUTE_DURATION, r,
			now > x->log.start_ns ? (now - x->log.start_ns) / 1000 : 0);
	if (c->on) {
		tokens_of(&c->usage, &prompt, &completion);
		metrics_add(sh, PM_ROUTE_TOKENS, r * PM_KINDS + TOKENS_PROMPT, prompt);
		metrics_add(sh, PM_ROUTE_TOKENS, r * PM_KINDS + TOKENS_COMPLETION, completion);
	}
	if (!x->peer.identity)
		return;
	size_t t = names_intern(w->rt->tenants, x->peer.identity, strlen(x->peer.identity));
	metrics_add(sh, PM_TENANT_REQUESTS, t * PM_CLASSES + cls, 1);
	if (c->on) {
		metrics_add(sh, PM_TENANT_TOKENS, t * PM_KINDS + TOKENS_PROMPT, prompt);
		metrics_add(sh, PM_TENANT_TOKENS, t * PM_KINDS + TOKENS_COMPLETION, completion);
	}
}

const struct xhook tally_hook = {
    .name = "tally",
    .ctx_size = sizeof(struct tally_x),
    .ctx_off = &ctx_off,
    .always = 1, /* every exchange is in its route's figures */
    .resp_head = tally_response_head,
    .resp_body = tally_body,
    .end = tally_exchange,
};
