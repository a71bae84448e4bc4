/*
 * quota.c - routes.rate_limit on the request path (see quota.h).
 *
 * It joins an exchange (xhooks.h) on a route with a rate_limit at the guard (a per-IP refusal
 * too: refuse()), or where auth keeps the identity in its context (quota_identity_buf(): every
 * authenticated request): another costs it nothing. Its hooks: more response body was
 * scanned (tally.h), charge what its tokens now exceed; the response has come whole from the
 * backend, settle its tokens and give back its count in flight now, not when the last byte has
 * gone; the end, settle what is still held.
 */
#include "proxy/quota.h"
#include "core/clock.h"
#include "proxy/classify.h"
#include "proxy/spend.h"
#include "proxy/tally.h"

#include <errno.h>
#include <stdio.h>

/* The guard's context of an exchange. */
struct quota_x {
	struct limit_hold hold;		   /* what it holds of the route's limits */
	const char *limit_type;		   /* a 429's OpenAI error type, or NULL */
	char limit_headers[160];	   /* ... and its X-RateLimit-* lines, or "" */
	char identity[QUOTA_IDENTITY_CAP]; /* what x->peer.identity points to */
};

static size_t ctx_off;
static uint32_t bit;

/* Its context, joined: an exchange on a route with limits, or with an identity to keep. */
static struct quota_x *qx(struct exchange *x)
{
	return xhooks_join(x, &quota_hook);
}

/* ... to read, joined or not (zeroes: nothing held, no refusal). */
static const struct quota_x *qx_peek(const struct exchange *x)
{
	return xhooks_peek(x, &quota_hook);
}

char *quota_identity_buf(struct exchange *x)
{
	return qx(x)->identity;
}

const char *quota_refusal_type(const struct exchange *x)
{
	return spend_refused(x) ? "insufficient_quota" : qx_peek(x)->limit_type;
}

const char *quota_refusal_headers(const struct exchange *x)
{
	return qx_peek(x)->limit_headers;
}

static struct route_limits *limits_of(const struct exchange *x)
{
	return &x->w->sh->limits[x->route - x->w->conf->routes];
}

static unsigned secs_up(uint64_t us)
{
	uint64_t s = (us + 999999) / 1000000;
	return s > 86400 * 365 ? 86400 * 365 : (unsigned)s;
}

/* A concurrency cap passes again when one of the tenant's requests ends, which cannot be
 * known: the client is told to come back in this many seconds. */
#define QUOTA_CONCURRENCY_RETRY_S 1

/* 429 for <why>: Retry-After (until a rate or token bucket would let it pass; a second for a
 * concurrency cap), the X-RateLimit-* lines, and the OpenAI error type (<type>). */
static enum run refuse(struct exchange *x, const struct limit_refusal *why, const char *detail,
		       const char *type)
{
	struct quota_x *q = qx(x);
	x->answer.retry_after_s = why->wait_us ? secs_up(why->wait_us) : QUOTA_CONCURRENCY_RETRY_S;
	q->limit_type = type;
	snprintf(q->limit_headers, sizeof(q->limit_headers),
		 "X-RateLimit-Limit: %llu\r\nX-RateLimit-Remaining: %llu\r\n"
		 "X-RateLimit-Reset: %u\r\n",
		 (unsigned long long)why->st.limit, (unsigned long long)why->st.remaining,
		 secs_up(why->st.reset_us));
	return exchange_reply(x, 429, detail, 1);
}

static enum run refuse_rate(struct exchange *x, const struct limit_refusal *why)
{
	char detail[80];
	snprintf(detail, sizeof(detail), "request rate limit reached (routes.rate_limit.%s)",
		 why->what);
	return refuse(x, why, detail, "requests");
}

enum run quota_guard_address(struct exchange *x)
{
	struct limit_refusal why;
	if (x->route->rate_limit &&
	    limits_take_address(limits_of(x), x->peer.key, clock_now_ns() / 1000, &why) < 0)
		return refuse_rate(x, &why);
	return RUN_AGAIN;
}

/* The route's rates, concurrency cap and the token limit's wish for the body. */
static enum run guard_limits(struct exchange *x)
{
	if (!x->route->rate_limit)
		return RUN_AGAIN;
	struct route_limits *l = limits_of(x);
	struct limit_hold *hold = &qx(x)->hold;
	struct limit_refusal why;
	hold->tenant = classify_tenant_of(x->route, x->head, x->peer.key, x->peer.identity);
	if (limits_take_rate(l, hold->tenant, clock_now_ns() / 1000, &why) < 0)
		return refuse_rate(x, &why);
	if (limits_take_hold(l, hold->tenant, &hold->conc, &why) < 0)
		return refuse(x, &why,
			      "this tenant has routes.rate_limit.concurrency requests in flight",
			      "requests");
	/* until the body says otherwise: the default reservation, the prompt from its size */
	hold->max_tokens = l->default_max_tokens;
	hold->prompt_est = x->req.framing == HTTP_BODY_LENGTH ? x->req.left / 4 : 0;
	const struct http_head *h = x->head;
	if (!l->has_tokens || h->framing == HTTP_BODY_NONE ||
	    (h->framing == HTTP_BODY_LENGTH && !h->content_length))
		return RUN_AGAIN;
	/* its max_tokens must be read from the whole body (the view), so the body is read
	 * before admission however limits.body_buffer_bytes is set */
	if (x->req.framing != HTTP_BODY_LENGTH)
		return exchange_reply(
		    x, 411,
		    "a request on a route with tokens_per_minute needs a Content-Length body", 0);
	x->reqbody.want_view = 1;
	return RUN_AGAIN;
}

enum run quota_guard(struct exchange *x)
{
	void *conn = x->conn;
	const struct exchange_codec_ops *codec = x->codec;
	enum run r = guard_limits(x);
	return exchange_goes_on(r, conn, codec, x) ? spend_guard(x) : r; /* (a 429: answered) */
}

/* A request asking for <choices> answers of <max_tokens> each (<dflt> when it names none). */
static uint64_t answers_tokens(const struct json_view *v, uint64_t dflt)
{
	uint64_t n = v->max_tokens >= 0 ? (uint64_t)v->max_tokens : dflt;
	/* each of n (best_of) answers may take max_tokens: reserve them all, not one */
	return v->choices > 1 ? n * (uint64_t)v->choices : n;
}

enum run quota_note_body(struct exchange *x, const char *body)
{
	int tokens = x->route->rate_limit && limits_of(x)->has_tokens;
	if (!x->reqbody.want_view || (!tokens && !x->route->budget))
		return RUN_AGAIN;
	/* a body the view could not read whole (longer than what is held) could name another
	 * max_tokens after what was read: refused, never reserved as if it named the default */
	if (!x->reqbody.view_read)
		return exchange_reply(x, 413,
				      tokens ? "a request on a route with tokens_per_minute must "
					       "fit in limits.body_buffer_bytes"
					     : "a request on a route with a budget must fit in "
					       "limits.body_buffer_bytes",
				      0);
	if (!x->reqbody.view_ok)
		return exchange_reply(x, 400, x->reqbody.view_why, 0);
	if (x->reqbody.view.max_tokens == JSON_VIEW_TOKENS_BAD)
		return exchange_reply(x, 400,
				      "max_tokens must be a whole number from 0 to 2147483647", 0);
	if (x->reqbody.view.choices == JSON_VIEW_TOKENS_BAD)
		return exchange_reply(
		    x, 400, "n and best_of must be whole numbers from 0 to 2147483647", 0);
	if (tokens) {
		struct limit_hold *hold = &qx(x)->hold;
		hold->max_tokens = answers_tokens(&x->reqbody.view, hold->max_tokens);
	}
	if (!x->route->budget)
		return RUN_AGAIN;
	return spend_note_body(
	    x, body, answers_tokens(&x->reqbody.view, x->route->budget->default_max_tokens));
}

/* The token limit's reservation. */
static enum run reserve_tokens(struct exchange *x)
{
	if (!x->route->rate_limit)
		return RUN_AGAIN;
	struct limit_hold *hold = &qx(x)->hold;
	if (hold->reserved)
		return RUN_AGAIN;
	struct route_limits *l = limits_of(x);
	if (!l->has_tokens)
		return RUN_AGAIN;
	struct limit_refusal why;
	uint64_t n = hold->prompt_est + hold->max_tokens;
	if (limits_reserve_tokens(l, hold->tenant, n, clock_now_ns() / 1000, &why) < 0)
		return refuse(x, &why, "token limit reached (routes.rate_limit.tokens_per_minute)",
			      "tokens");
	hold->charged = n;
	hold->reserved = 1;
	tally_want_tokens(x); /* settled with the response's tokens, whatever it is */
	xhooks_want_body(x, &quota_hook);
	return RUN_AGAIN;
}

enum run quota_reserve(struct exchange *x)
{
	void *conn = x->conn;
	const struct exchange_codec_ops *codec = x->codec;
	enum run r = reserve_tokens(x);
	return exchange_goes_on(r, conn, codec, x) ? spend_reserve(x) : r; /* (a 429: answered) */
}

/* More response body went through the usage scanner: charge what its tokens now exceed. */
static void quota_count(struct exchange *x, const char *p, size_t len)
{
	struct limit_hold *hold = &qx(x)->hold;
	(void)p;
	(void)len;
	if (hold->reserved)
		limits_count_response(limits_of(x), hold, tally_usage(x), clock_now_ns() / 1000);
}

static void quota_response_done(struct exchange *x)
{
	if (x->route->rate_limit)
		limits_end(limits_of(x), &qx(x)->hold, tally_usage(x), x->status < 400,
			   clock_now_ns() / 1000);
}

static void quota_end(struct exchange *x, uint64_t now_ns)
{
	if (x->route && x->route->rate_limit)
		limits_end(limits_of(x), &qx(x)->hold, tally_usage(x),
			   x->resp_head && x->status < 400, now_ns / 1000);
}

const struct xhook quota_hook = {
    .name = "quota",
    .ctx_size = sizeof(struct quota_x),
    .ctx_off = &ctx_off,
    .bit = &bit,
    .resp_body = quota_count,
    .resp_done = quota_response_done,
    .end = quota_end,
};
