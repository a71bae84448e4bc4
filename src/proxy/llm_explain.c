/*
 * llm_explain.c - balance: llm's decision per exchange, against what happened (see
 * llm_explain.h).
 *
 * Its context is the record the picks read their decision back into, and the backend whose
 * answer came (a hedge's may win). What happened is read where the request path keeps it
 * already: the time to first token from the answering attempt's own clocks (attempt.h's
 * sent_ns and first_ns, which up_h1.c stamps once for balance: llm's fit: a whole answer's
 * head, an event stream's first body bytes), the usage from the tallies' one scanner
 * (tally.h: tally_read_usage() has it scanned, without counting, when the tallies do not
 * count the response's tokens). So it reads no clock and no body byte of its own. It joins
 * an exchange (xhooks.h) at the stage classify, before any pick, when the pool the route sends
 * to or its spillover pool has a balancer that explains its picks (balance: llm, whatever its
 * llm.explain says: the record also feeds /debug/requests and the metrics), and the waiter
 * then points at the record; an exchange on any other route stays out and pays nothing here.
 * Its hooks: the response head (registered after the tallies: the backend that answered, and
 * the usage asked for) and the end (the prediction metrics). Nothing here allocates or writes
 * memory another worker writes: the metrics go to the worker's shard.
 */
#include "proxy/llm_explain.h"
#include "proxy/tally.h"
#include "runtime/proxy_metric.h"

#include <stdio.h>
#include <string.h>

struct llm_explain_x {
	struct lb_explain rec;	     /* the last pick's decision, read back */
	const struct backend *first; /* the backend whose answer came (its head) */
};

static size_t ctx_off;
static uint32_t bit; /* joined at classify when the route's pool or spillover explains */

/* Its context of <x>, to read: zeroes (no decision) unless it joined. */
static const struct llm_explain_x *ex(const struct exchange *x)
{
	return xhooks_peek(x, &llm_explain_hook);
}

/* Does pool <p> explain its picks (its balancer's lb_ops.explain)? */
static int explains(const struct conf_pool *p)
{
	return p->balance && p->balance->explain;
}

/* The pool of <x>'s decision, while it is still the pool <x> goes to, else NULL. */
static const struct pool_rt *pool_of(const struct exchange *x, const struct llm_explain_x *c)
{
	if (!c->rec.where || c->rec.where != (const void *)x->pool)
		return NULL;
	/* a queued request's record is a granting worker's until the grant reaches us */
	if (atomic_load_explicit(&x->wt.state, memory_order_acquire) != W_IDLE)
		return NULL;
	return x->pool;
}

/* The backend the decision chose, or NULL. */
static const struct backend *picked(const struct pool_rt *p, const struct lb_explain *r)
{
	return r->result >= 0 && (size_t)r->result < p->nbackends && r->ncand
		   ? &p->backends[r->result]
		   : NULL;
}

void llm_explain_classify(struct exchange *x)
{
	const struct conf_route *r = x->route;
	if (explains(x->pool->conf) ||
	    (r->has_spill && explains(x->w->rt->pools[r->spill_pool].conf))) {
		struct llm_explain_x *c = xhooks_join(x, &llm_explain_hook);
		x->wt.explain = &c->rec;
	}
}

static void explain_resp_head(struct exchange *x, const struct http_head *h)
{
	(void)h;
	struct llm_explain_x *c = xhooks_join(x, &llm_explain_hook); /* (joined: its hook) */
	if (!c->rec.where || !x->att || !x->att->be)
		return; /* no decision recorded (no balance: llm, or a cache's answer) */
	c->first = x->att->be;
	tally_read_usage(x); /* (its hook ran before ours) */
}

/* The answering attempt's time from the request sent to its first token, in *us: 1, or 0
 * when none came yet (up_h1.c stamps it for balance: llm's fit; not for an error status). */
static int measured(const struct exchange *x, const struct llm_explain_x *c, uint32_t *us)
{
	const struct attempt *a = x->att;
	if (!c->first || !a || a->first_ns <= a->sent_ns)
		return 0;
	uint64_t d = (a->first_ns - a->sent_ns) / 1000;
	*us = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
	return 1;
}

/* The engine's reported cached tokens of <x>, as blocks of <p>'s; 0: it reported none. */
static int reported(const struct exchange *x, const struct pool_rt *p, uint32_t blocks,
		    uint64_t *tokens, uint32_t *out)
{
	const struct usage_scan *u = tally_usage(x);
	if (!u->has_cached)
		return 0;
	uint64_t b = x->reqbody.llm_block_tokens /* blocks of tokens (proxy/tokroute.h) */
			 ? u->cached / x->reqbody.llm_block_tokens
			 : u->cached > UINT64_MAX / LLM_EXPLAIN_BYTES_PER_TOKEN
			       ? UINT64_MAX
			       : u->cached * LLM_EXPLAIN_BYTES_PER_TOKEN / p->conf->lb.block_bytes;
	*tokens = u->cached;
	*out = b < blocks ? (uint32_t)b : blocks; /* (never more of our prompt than it has) */
	return 1;
}

static void explain_end(struct exchange *x, uint64_t now_ns)
{
	(void)now_ns;
	const struct llm_explain_x *c = ex(x);
	const struct pool_rt *p = pool_of(x, c);
	const struct backend *b = p ? picked(p, &c->rec) : NULL;
	if (!b || !x->log.backend)
		return; /* (a grant withdrawn before dispatch sent it nowhere) */
	struct metrics_shard *sh = x->w->shard;
	metrics_add(sh, PM_BACKEND_LLM_PREDICT_DECISIONS, b->id * LB_WHYS + c->rec.why, 1);
	int status = x->relayed || x->resp_head ? x->status : 0;
	uint32_t got;
	if (c->first != b || status < 200 || status >= 400 || !measured(x, c, &got))
		return; /* another backend answered (a hedge), or none did: nothing to compare */
	uint32_t predicted = c->rec.cand[0].expect_us;
	metrics_observe(sh, PM_BACKEND_LLM_PREDICT_TTFT, b->id, predicted);
	metrics_observe(sh, PM_BACKEND_LLM_PREDICT_MEASURED_TTFT, b->id, got);
	metrics_observe(sh, PM_BACKEND_LLM_PREDICT_TTFT_ERROR, b->id,
			got > predicted ? got - predicted : predicted - got);
	uint64_t tokens;
	uint32_t blocks;
	if (!reported(x, p, c->rec.blocks, &tokens, &blocks))
		return;
	metrics_add(sh, PM_BACKEND_LLM_PREDICT_REPORTS, b->id, 1);
	metrics_add(sh, PM_BACKEND_LLM_PREDICT_HIT_BLOCKS, b->id, c->rec.cand[0].hit_blocks);
	metrics_add(sh, PM_BACKEND_LLM_PREDICT_REPORTED_BLOCKS, b->id, blocks);
}

const struct xhook llm_explain_hook = {
    .name = "llm_explain",
    .ctx_size = sizeof(struct llm_explain_x),
    .ctx_off = &ctx_off,
    .bit = &bit,
    .resp_head = explain_resp_head,
    .end = explain_end,
};

static void copy_name(char *dst, const char *s)
{
	size_t n = strnlen(s, LLM_EXPLAIN_NAME - 1);
	memcpy(dst, s, n);
	dst[n] = 0;
}

void llm_explain_view(const struct exchange *x, struct llm_explain_view *v)
{
	const struct llm_explain_x *c = ex(x);
	const struct pool_rt *p = pool_of(x, c);
	v->has = 0;
	if (!p)
		return;
	const struct lb_explain *r = &c->rec;
	v->has = 1;
	v->why = r->why;
	v->waited = r->waited;
	v->picked = picked(p, r) != NULL;
	v->nseen = r->nseen;
	v->blocks = r->blocks;
	v->waited_ms = r->waited_ms;
	v->ncand = 0;
	for (unsigned k = 0; k < r->ncand && k < LB_EXPLAIN_MAX; k++) {
		if (r->cand[k].backend >= p->nbackends)
			continue;
		copy_name(v->cand[v->ncand].name, p->backends[r->cand[k].backend].name);
		v->cand[v->ncand++].e = r->cand[k];
	}
	v->answered[0] = 0;
	if (c->first)
		copy_name(v->answered, c->first->name);
	v->measured_us = 0;
	v->has_measured = (uint8_t)measured(x, c, &v->measured_us);
	v->has_reported = reported(x, p, r->blocks, &v->cached_tokens, &v->reported_blocks);
}

/* <name> as a quoted string of a header value: quotes, backslashes and controls left out. */
static int put_name(char *out, size_t cap, const char *name)
{
	size_t n = 0;
	if (cap < 3)
		return -1;
	out[n++] = '"';
	for (const unsigned char *s = (const unsigned char *)name; *s; s++)
		if (*s >= 0x20 && *s < 0x7f && *s != '"' && *s != '\\') {
			if (n + 2 >= cap)
				return -1;
			out[n++] = (char)*s;
		}
	out[n++] = '"';
	return (int)n;
}

#define MS(us) (us) / 1000, (us) % 1000

int llm_explain_header(const struct exchange *x, char *out, size_t cap)
{
	const struct llm_explain_x *c = ex(x);
	const struct pool_rt *p = pool_of(x, c);
	if (!p || !p->conf->lb.explain)
		return 0;
	const struct lb_explain *r = &c->rec;
	const struct backend *b = picked(p, r);
	size_t len = 0;
	int n = snprintf(out, cap, "X-Accelnet-Llm: pick=");
	if (n < 0 || (size_t)n >= cap)
		return -1;
	len += (size_t)n;
	n = b ? put_name(out + len, cap - len, b->name) : snprintf(out + len, cap - len, "none");
	if (n < 0 || (size_t)n >= cap - len)
		return -1;
	len += (size_t)n;
	n = snprintf(out + len, cap - len, ";reason=%s;blocks=%u%s", lb_why_name(r->why), r->blocks,
		     r->waited ? ";waited" : "");
	if (n < 0 || (size_t)n >= cap - len)
		return -1;
	len += (size_t)n;
	for (unsigned k = 0; k < r->ncand && k < LB_EXPLAIN_MAX; k++) {
		const struct lb_estimate *e = &r->cand[k];
		if (e->backend >= p->nbackends)
			continue;
		if (len + 2 >= cap)
			return -1;
		memcpy(out + len, ", ", 2);
		len += 2;
		n = put_name(out + len, cap - len, p->backends[e->backend].name);
		if (n < 0)
			return -1;
		len += (size_t)n;
		n = snprintf(out + len, cap - len,
			     ";hit=%u;wait=%u.%03u;base=%u.%03u;per_block=%u.%03u;ttft=%u.%03u%s",
			     e->hit_blocks, MS(e->wait_us), MS(e->base_us), MS(e->block_us),
			     MS(e->expect_us), e->busy ? ";busy" : "");
		if (n < 0 || (size_t)n >= cap - len)
			return -1;
		len += (size_t)n;
	}
	if (len + 2 >= cap)
		return -1;
	memcpy(out + len, "\r\n", 2);
	return (int)(len + 2);
}
