/*
 * spend.c - routes.budget on the request path (see spend.h).
 *
 * It joins an exchange (xhooks.h) on a route with a budget once the request's body view was
 * read (spend_note_body(), before the model is looked up: an exchange refused for an unpriced
 * model has joined too): another costs it nothing. Its hooks: the response head, an event stream's
 * body wanted; its bytes, counted by the tallies just before (tally.c runs first), charged as they
 * go; the response has come whole from the backend, settle at once (the figures and the log read
 * the cost at the end); the end, settle what is still held. Every count goes to the worker's own
 * shard; the only word shared between workers is the tenant's spend word (guard/budget.h), one
 * compare-and-swap to reserve, one per first reservation's worth a stream grows by, and one to
 * settle.
 */
#include "proxy/spend.h"
#include "guard/budget.h"
#include "proxy/classify.h"
#include "proxy/tally.h"
#include "runtime/proxy_metric.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct spend_x {
	struct budget_hold hold;
	const struct spend_price *price; /* the model's, once the body is read */
	size_t model;			 /* its index in conf->prices */
	uint64_t prompt_est;		 /* tokens: the body's bytes / 4 */
	uint64_t max_tokens;		 /* what its answers may take together */
	uint64_t step;			 /* its first reservation: what a stream takes more by */
	uint64_t cost;			 /* micro-units, once settled */
	unsigned priced : 1;		 /* metered: its model's price is known */
	unsigned reserved : 1;		 /* a reservation is held */
	unsigned settled : 1;		 /* cost is what it cost */
	unsigned refused : 1;		 /* answered 429: the budget is spent */
	unsigned cut : 1;		 /* its stream was ended: the budget covered no more */
};

static size_t ctx_off;
static uint32_t bit;

/* Its context, joined: an exchange on a route with a budget, once its body is priced. */
static struct spend_x *sx(struct exchange *x)
{
	return xhooks_join(x, &spend_hook);
}

/* ... to read, joined or not (zeroes: nothing reserved, refused or settled). */
static const struct spend_x *sx_peek(const struct exchange *x)
{
	return xhooks_peek(x, &spend_hook);
}

static struct route_budget *budget_of(const struct exchange *x)
{
	return &x->w->sh->budgets[x->route - x->w->conf->routes];
}

enum run spend_guard(struct exchange *x)
{
	const struct http_head *h = x->head;
	if (!x->route->budget || h->framing == HTTP_BODY_NONE ||
	    (h->framing == HTTP_BODY_LENGTH && !h->content_length))
		return RUN_AGAIN; /* no body, no model: nothing to price (GET /v1/models) */
	if (x->req.framing != HTTP_BODY_LENGTH)
		return exchange_reply(
		    x, 411, "a request on a route with a budget needs a Content-Length body", 0);
	x->reqbody.want_view = 1;
	return RUN_AGAIN;
}

enum run spend_note_body(struct exchange *x, const char *body, uint64_t max_tokens)
{
	const struct conf *c = x->w->conf;
	if (!x->route->budget || !x->reqbody.want_view)
		return RUN_AGAIN;
	struct spend_x *s = sx(x);
	char model[CONF_MODEL_MAX + 1];
	size_t len = 0;
	if (json_view_model(&x->reqbody.view, body, model, sizeof(model), &len) < 0)
		return exchange_reply(x, 403,
				      "a request on a route with a budget must name a priced "
				      "\"model\"",
				      1);
	for (size_t i = 0; i < c->nprices; i++)
		if (strlen(c->prices[i].model) == len &&
		    memcmp(c->prices[i].model, model, len) == 0) {
			s->price = &c->prices[i].price;
			s->model = i;
			s->priced = 1;
			s->prompt_est = x->req.ready / 4;
			s->max_tokens = max_tokens;
			return RUN_AGAIN;
		}
	char why[CONF_MODEL_MAX + 96];
	snprintf(why, sizeof(why), "model '%s' has no price on this route (routes.budget)", model);
	return exchange_reply(x, 403, why, 1);
}

/* "1.250000": <micros> as a decimal of the currency. */
static void amount_text(char *out, size_t len, uint64_t micros)
{
	snprintf(out, len, "%llu.%06llu", (unsigned long long)(micros / SPEND_MICROS),
		 (unsigned long long)(micros % SPEND_MICROS));
}

enum run spend_reserve(struct exchange *x)
{
	if (!x->route->budget || !sx_peek(x)->priced)
		return RUN_AGAIN;
	struct spend_x *s = sx(x);
	if (s->reserved || s->settled)
		return RUN_AGAIN;
	const struct conf_budget *b = x->route->budget;
	uint64_t cost = spend_cost(s->price, s->prompt_est, 0, s->max_tokens);
	uint64_t now_s = (uint64_t)time(NULL), spent = 0;
	if (!cost)
		cost = 1; /* a free model still takes its turn against a spent budget */
	int err = budget_reserve(
	    budget_of(x), classify_tenant_of(x->route, x->head, x->peer.key, x->peer.identity),
	    cost, now_s, &s->hold, &spent);
	if (err == -ENOSPC) {
		metrics_add(x->w->shard, PM_ROUTE_BUDGET_FULL,
			    (size_t)(x->route - x->w->conf->routes), 1);
		x->answer.retry_after_s = (unsigned)spend_window_left(now_s, b->window_s);
		return exchange_reply(x, 503,
				      "this route's budget table has no room for another tenant in "
				      "this window (routes.budget): try again when it turns",
				      1);
	}
	if (err < 0) {
		char have[32], limit[32], need[32], detail[224];
		amount_text(have, sizeof(have), spent);
		amount_text(limit, sizeof(limit), b->per_tenant);
		amount_text(need, sizeof(need), cost);
		snprintf(detail, sizeof(detail),
			 "this tenant's budget is spent: %s of %s in this window, and the request "
			 "may cost %s (routes.budget)",
			 have, limit, need);
		x->answer.code = "insufficient_quota";
		x->answer.retry_after_s = (unsigned)spend_window_left(now_s, b->window_s);
		s->refused = 1;
		return exchange_reply(x, 429, detail, 1);
	}
	s->reserved = 1;
	s->step = cost;
	tally_want_tokens(x); /* settled with the response's tokens, whatever it is */
	return RUN_AGAIN;
}

/* Does the usage <u> tell anything? */
static int told(const struct usage_scan *u)
{
	return u->has_total || u->has_prompt || u->has_completion || u->events;
}

/* What the tokens the usage <u> counted so far cost. */
static uint64_t counted_cost(const struct spend_x *s, const struct usage_scan *u)
{
	uint64_t prompt = u->has_prompt ? u->prompt : s->prompt_est;
	uint64_t completion = u->has_completion ? u->completion
			      : u->has_total && u->has_prompt && u->total >= u->prompt
				  ? u->total - u->prompt
				  : u->events;
	return spend_cost(s->price, prompt, u->has_cached ? u->cached : 0, completion);
}

/* What <x>'s response cost by the usage <u>: what it counted; else, a response below 400 that
 * began and told nothing, the reservation; else, a request that reached the backend whole and
 * got no response head (it may have done the prefill before the client left or the backend
 * failed), its prompt; an error status that told nothing costs nothing. */
static uint64_t cost_of(const struct exchange *x, const struct spend_x *s,
			const struct usage_scan *u, int answered)
{
	if (told(u))
		return counted_cost(s, u);
	if (answered)
		return s->hold.reserved;
	if (!x->resp_head && x->log.dispatch_ns && x->req.done && x->req.sent && !x->req.ready)
		return spend_cost(s->price, s->prompt_est, 0, 0);
	return 0;
}

static void settle(struct exchange *x, int answered)
{
	struct spend_x *s = sx(x);
	if (!s->reserved || s->settled)
		return;
	s->cost = cost_of(x, s, tally_usage(x), answered);
	if (s->cut && s->cost > s->hold.reserved)
		s->cost = s->hold.reserved; /* what passed its hold never reached the client */
	s->settled = 1;
	budget_settle(&s->hold, s->cost);
	struct worker *w = x->w;
	struct metrics_shard *sh = w->shard;
	metrics_add(sh, PM_ROUTE_SPEND, (size_t)(x->route - w->conf->routes), s->cost);
	metrics_add(sh, PM_MODEL_SPEND, s->model, s->cost);
	if (x->peer.identity)
		metrics_add(
		    sh, PM_TENANT_SPEND,
		    names_intern(w->rt->tenants, x->peer.identity, strlen(x->peer.identity)),
		    s->cost);
}

int spend_refused(const struct exchange *x)
{
	return sx_peek(x)->refused;
}

int spend_cost_of(const struct exchange *x, uint64_t *micros)
{
	const struct spend_x *s = sx_peek(x);
	*micros = s->cost;
	return s->settled;
}

/* An event stream below 400 on a reservation: charged as it goes (spend_body). */
static void spend_response_head(struct exchange *x, const struct http_head *h)
{
	struct spend_x *s = sx(x);
	if (s->reserved && !s->settled && h->status < 400 && http_is_event_stream(h))
		xhooks_want_body(x, &spend_hook);
}

/*
 * The stream's bytes came (counted by tally.c first): once what they cost passes the hold,
 * the hold takes more of the budget, a first reservation's worth at a time (one swap of the
 * tenant's word per step, not per event); when the budget cannot cover what came, the stream
 * is ended here, before these bytes reach the client, and charged what it held.
 */
static void spend_body(struct exchange *x, const char *p, size_t len)
{
	struct spend_x *s = sx(x);
	(void)p;
	(void)len;
	const struct usage_scan *u = tally_usage(x);
	if (!s->reserved || s->settled || s->cut || !told(u))
		return;
	uint64_t cost = counted_cost(s, u);
	if (cost <= s->hold.reserved)
		return;
	uint64_t need = cost - s->hold.reserved;
	(void)budget_extend(budget_of(x), &s->hold, need > s->step ? need : s->step,
			    (uint64_t)time(NULL));
	if (cost <= s->hold.reserved)
		return;
	s->cut = 1;
	x->cut_why = "the tenant's budget is spent (routes.budget): the stream was ended";
	metrics_add(x->w->shard, PM_ROUTE_BUDGET_CUT, (size_t)(x->route - x->w->conf->routes), 1);
}

static void spend_response_done(struct exchange *x)
{
	settle(x, x->status < 400);
}

static void spend_end(struct exchange *x, uint64_t now_ns)
{
	(void)now_ns;
	settle(x, x->resp_head && x->status < 400);
}

const struct xhook spend_hook = {
    .name = "spend",
    .ctx_size = sizeof(struct spend_x),
    .ctx_off = &ctx_off,
    .bit = &bit,
    .resp_head = spend_response_head,
    .resp_body = spend_body,
    .resp_done = spend_response_done,
    .end = spend_end,
};
