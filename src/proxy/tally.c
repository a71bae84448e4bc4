/*
 * tally.c - the figures of an exchange by route and by tenant, and the token-level ones of
 * an LLM response: time to first token, the gaps between tokens, prompt and completion
 * tokens (runtime.h's PM_ROUTE_*, PM_TENANT_*, PM_BACKEND_TTFT and PM_BACKEND_TOKEN_GAP).
 *
 * Tokens are counted in every event stream (a response of Content-Type text/event-stream,
 * on any route), and in every response of routes with api: openai or whose tokens are
 * limited (rate_limit.tokens_per_minute), JSON completions included: the response body
 * passes through one usage scanner (http/usage.h), the very count the token limits settle
 * with and the access log writes. A token is an SSE data line carrying text (lines ended
 * by CR, LF or CRLF), timed when the read that completes it arrives: the first one's time
 * since the request was sent upstream is the time to first token, each later one's time
 * since the previous one a gap (events that arrive in one read are 0 apart, as the client
 * sees them). A response that is not an event stream (a whole
 * JSON completion) has no events, so no time to first token and no gaps: its first byte is
 * its whole answer, which accelnet_backend_ttfb_seconds already times. Prompt and completion
 * tokens come from the response's "usage" when it has one (a JSON completion always; a
 * stream when the client asked stream_options.include_usage); without one, the completion
 * is the events counted and the prompt is not counted.
 *
 * Its hooks are declared in exchange.h, as access.c's are: exchange_free() calls
 * tally_exchange(), the HTTP/1 relay tally_response_head() and tally_body(). Every count
 * goes to the worker's own shard (worker.shard): plain stores, nothing shared. The tenant
 * is the authenticated identity (routes.auth), never a header a client may write; requests
 * without one are in the route's figures only, and tenants past metrics.max_tenants are
 * folded into "other" (obs/names.h).
 */
#include "core/clock.h"
#include "proxy/exchange.h"
#include "proxy/quota.h"

#include <string.h>
#include <strings.h>

/* A backend may report any 19 digits: one response counts at most this many tokens. */
#define TOKENS_MAX_PER_RESPONSE (1ull << 40)

/* Is the response an event stream (Content-Type text/event-stream, parameters aside)? */
static int event_stream(const struct http_head *h)
{
	const struct http_header *ct = http_find_header(h, "Content-Type");
	return ct && ct->value.len >= 17 && strncasecmp(ct->value.p, "text/event-stream", 17) == 0;
}

void tally_response_head(struct exchange *x, const struct http_head *h)
{
	x->tok_on = x->route->api == CONF_API_OPENAI || x->hold.reserved || event_stream(h);
	x->tok_first_ns = x->tok_last_ns = 0;
	if (!x->tok_on)
		return;
	usage_scan_init(&x->usage);
	if (x->resp.framing == HTTP_BODY_CHUNKED)
		usage_scan_chunked(&x->usage);
}

/* <n> token events came in one read at <now>. */
static void note_events(struct exchange *x, uint64_t n, uint64_t now)
{
	struct metrics_shard *sh = x->w->shard;
	size_t r = (size_t)(x->route - x->w->conf->routes);
	if (!x->tok_first_ns) {
		uint64_t us = now > x->att->sent_ns ? (now - x->att->sent_ns) / 1000 : 0;
		metrics_observe(sh, PM_ROUTE_TTFT, r, us);
		if (x->att->be)
			metrics_observe(sh, PM_BACKEND_TTFT, x->att->be->id, us);
		x->tok_first_ns = x->tok_last_ns = now;
		n--;
	}
	if (!n)
		return;
	uint64_t us = now > x->tok_last_ns ? (now - x->tok_last_ns) / 1000 : 0;
	metrics_observe(sh, PM_ROUTE_TOKEN_GAP, r, us);
	if (n > 1)
		metrics_observe_n(sh, PM_ROUTE_TOKEN_GAP, r, 0, n - 1);
	if (x->att->be) {
		metrics_observe(sh, PM_BACKEND_TOKEN_GAP, x->att->be->id, us);
		if (n > 1)
			metrics_observe_n(sh, PM_BACKEND_TOKEN_GAP, x->att->be->id, 0, n - 1);
	}
	x->tok_last_ns = now;
}

void tally_body(struct exchange *x, const char *p, size_t len)
{
	if (!x->tok_on)
		return;
	uint64_t before = x->usage.events;
	usage_scan_feed(&x->usage, p, len);
	if (x->usage.events > before)
		note_events(x, x->usage.events - before, clock_now_ns());
	quota_count(x);
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

void tally_exchange(struct exchange *x, uint64_t now)
{
	struct worker *w = x->w;
	struct metrics_shard *sh = w->shard;
	if (!x->route)
		return; /* no route matched (404): in no route's figures */
	size_t r = (size_t)(x->route - w->conf->routes);
	int status = x->log_status ? x->log_status : x->relayed ? x->status : 0;
	size_t cls = status >= 100 && status < 600 ? (size_t)status / 100 : 0;
	uint64_t prompt = 0, completion = 0;
	metrics_add(sh, PM_ROUTE_REQUESTS, r * PM_CLASSES + cls, 1);
	metrics_observe(sh, PM_ROUTE_DURATION, r,
			now > x->log_start_ns ? (now - x->log_start_ns) / 1000 : 0);
	if (x->tok_on) {
		tokens_of(&x->usage, &prompt, &completion);
		metrics_add(sh, PM_ROUTE_TOKENS, r * PM_KINDS + TOKENS_PROMPT, prompt);
		metrics_add(sh, PM_ROUTE_TOKENS, r * PM_KINDS + TOKENS_COMPLETION, completion);
	}
	if (!x->identity)
		return;
	size_t t = names_intern(w->rt->tenants, x->identity, strlen(x->identity));
	metrics_add(sh, PM_TENANT_REQUESTS, t * PM_CLASSES + cls, 1);
	if (x->tok_on) {
		metrics_add(sh, PM_TENANT_TOKENS, t * PM_KINDS + TOKENS_PROMPT, prompt);
		metrics_add(sh, PM_TENANT_TOKENS, t * PM_KINDS + TOKENS_COMPLETION, completion);
	}
}
