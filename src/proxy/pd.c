/*
 * pd.c - prefill/decode disaggregation (see pd.h): the prefill attempt, the bodies rewritten
 * for each side, the handing on to the decode attempt.
 *
 * It joins an exchange (xhooks.h) on a pool with P/D, at the stage classify
 * (pd_wants_body()). The bodies are built when the request body is in (the hook req_body), from the
 * strict view's reading of it: the top-level members are copied byte for byte but for those the
 * protocol sets, and the protocol's own written after them. The prefill request goes out with
 * the exchange's forwarded head (x->uphead: its Content-Length set to the prefill body's,
 * with the prefill backend's credential line); the decode attempt then gets the same head with
 * its own body's length. Its events wake the client connection while the exchange waits for
 * it (the relay drives it, as it does a queued exchange); an SGLang prefill that goes on beside
 * its decode is read and dropped from its own events.
 *
 * What it does is counted on the decode pool, in the worker's own metrics shard (prefills,
 * their failures by reason, retries, fallbacks, short prompts skipped, parameters handed on:
 * the PM_POOL_PD_* counters), and the last prefill backend tried is kept for the access log
 * and /debug/requests (pd_prefill_backend()), which read it in their end hooks, before ours.
 */
#include "proxy/pd.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/rand.h"
#include "http/jsonview.h"
#include "http/parse.h"
#include "http/prompt.h"
#include "net/addr.h"
#include "proxy/attempt.h"
#include "proxy/dispatch.h"
#include "proxy/forward.h"
#include "runtime/llm.h"
#include "runtime/pick.h"
#include "runtime/proxy_metric.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PD_TRIES 3		 /* a prefill and two retries, at most */
#define PD_ANSWER_MAX (1u << 20) /* a prefill answer longer than this fails */

enum pd_state {
	PD_OFF,	    /* not disaggregated (or decoding in place) */
	PD_READY,   /* the bodies are built: the prefill begins at admission */
	PD_REFUSE,  /* the client's body sets what the proxy sets: 400 */
	PD_PREFILL, /* the prefill attempt goes on; the decode waits */
	PD_BESIDE,  /* sglang: the prefill goes on beside the decode, its answer dropped */
	PD_DONE,    /* the decode has its body */
};

struct pd_x {
	struct attempt pre; /* the prefill attempt */
	struct buf *pbody;  /* the prefill body (sglang: none, the decode body's bytes) */
	struct buf *dbody;  /* the decode body */
	uint32_t dbase;	    /* bytes of dbody before what the prefill decides */
	uint32_t pbody_off; /* bytes of the prefill body written */
	uint32_t work;	    /* balance: llm's work counted on the prefill backend ... */
	uint32_t missed;    /* ... and the blocks it must compute (0 once answered, as ticks) */
	uint32_t ticks;	    /* ... and the index clock's ticks its prompt took there */
	uint64_t since_ms;  /* the prefill's connect began, or its request was all written */
	unsigned state, tries, dmembers, sent, answered;
	unsigned checked;	    /* the body was read whole and holds none of pd_reserved */
	const struct backend *last; /* the last prefill backend tried, for the logs */
};

static size_t pd_off;
static uint32_t pd_bit; /* joined on a pool with P/D (pd_wants_body(), pd_begin()) */

static struct pd_x *pd_of(struct exchange *x)
{
	return xhooks_join(x, &pd_hook);
}

/* ... to read, joined or not (zeroes: PD_OFF, no bodies, no prefill). */
static const struct pd_x *pd_peek(const struct exchange *x)
{
	return xhooks_peek(x, &pd_hook);
}

/* --- the body's top-level members (the strict view found it valid JSON) --- */

static size_t skip_ws(const char *b, size_t i, size_t n)
{
	while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
		i++;
	return i;
}

static size_t skip_string(const char *b, size_t i, size_t n)
{
	for (i++; i < n && b[i] != '"'; i++)
		if (b[i] == '\\')
			i++;
	return i + 1;
}

/* Past the value at b[i] (valid JSON). */
static size_t skip_value(const char *b, size_t i, size_t n)
{
	int depth = 0;
	while (i < n) {
		char c = b[i];
		if (c == '"')
			i = skip_string(b, i, n);
		else if (c == '{' || c == '[')
			depth++, i++;
		else if (c == '}' || c == ']') {
			if (!depth)
				return i;
			depth--, i++;
		} else if (!depth && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'))
			return i;
		else
			i++;
		if (!depth && (c == '"' || c == '}' || c == ']'))
			return i;
	}
	return i;
}

struct member {
	size_t ks, ke, vs, ve; /* the key (quotes included) and the value */
};

/* The next member of an object from *pos (just past its '{' or a member): 1, or 0 at its end. */
static int next_member(const char *b, size_t n, size_t *pos, struct member *m)
{
	size_t i = skip_ws(b, *pos, n);
	if (i < n && b[i] == ',')
		i = skip_ws(b, i + 1, n);
	if (i >= n || b[i] != '"')
		return 0;
	m->ks = i;
	m->ke = i = skip_string(b, i, n);
	i = skip_ws(b, skip_ws(b, i, n) + 1, n); /* the ':' */
	m->vs = i;
	m->ve = *pos = skip_value(b, i, n);
	return 1;
}

/* Where the members of the object body[0..n) begin, or 0 when it is no object. */
static size_t object_start(const char *b, size_t n)
{
	size_t i = skip_ws(b, 0, n);
	return i < n && b[i] == '{' ? i + 1 : 0;
}

static int key_in(const char *b, const struct member *m, const char *const *names)
{
	for (; *names; names++)
		if (json_key_is(b, m->ks, m->ke, *names))
			return 1;
	return 0;
}

static int put(struct buf *o, const void *p, size_t n)
{
	if (n > o->cap - o->end)
		return -ENOSPC;
	memcpy(o->data + o->end, p, n);
	o->end += (uint32_t)n;
	return 0;
}

static int put_str(struct buf *o, const char *s)
{
	return put(o, s, strlen(s));
}

/* "{" and the members of body[0..n) but <drop>'s into <o>; their count in *kept. */
static int copy_members(struct buf *o, const char *b, size_t n, const char *const *drop,
			unsigned *kept)
{
	size_t pos = object_start(b, n);
	struct member m;
	*kept = 0;
	if (put(o, "{", 1) < 0)
		return -ENOSPC;
	while (next_member(b, n, &pos, &m)) {
		if (key_in(b, &m, drop))
			continue;
		if ((*kept && put(o, ",", 1) < 0) || put(o, b + m.ks, m.ke - m.ks) < 0 ||
		    put(o, ":", 1) < 0 || put(o, b + m.vs, m.ve - m.vs) < 0)
			return -ENOSPC;
		(*kept)++;
	}
	return 0;
}

/* The fields the proxy sets: a client may not. */
static const char *const pd_reserved[] = {"kv_transfer_params", "bootstrap_host", "bootstrap_port",
					  "bootstrap_room", NULL};
/* What the vLLM prefill request sets anew. */
static const char *const vllm_prefill_drop[] = {
    "max_tokens",	  "max_completion_tokens", "stream",	     "stream_options", "min_tokens",
    "kv_transfer_params", "bootstrap_host",	   "bootstrap_port", "bootstrap_room", NULL};

static const char vllm_prefill_tail[] =
    "\"max_tokens\":1,\"stream\":false,\"kv_transfer_params\":{\"do_remote_decode\":true,"
    "\"do_remote_prefill\":false,\"remote_engine_id\":null,\"remote_block_ids\":null,"
    "\"remote_host\":null,\"remote_port\":null}}";

static void pd_free_bodies(struct exchange *x, struct pd_x *p)
{
	worker_buf_put(x->w, p->pbody);
	worker_buf_put(x->w, p->dbody);
	p->pbody = p->dbody = NULL;
}

/*
 * A prefill pool with balance: llm picks by the prompt's blocks (its prefix index); when the
 * decode pool reads none itself (not llm), they are read here at the prefill pool's block size,
 * into the array the worker lends the exchange (given back with it).
 */
static void prefill_blocks(struct exchange *x, const char *body, size_t len)
{
	const struct conf_pool *pc = x->w->rt->pools[x->pool->conf->pd.prefill_pool].conf;
	if (x->pool->conf->balance->blocks || !pc->balance->blocks)
		return;
	if (!x->reqbody.llm_blocks && !(x->reqbody.llm_blocks = llm_blocks_get(&x->w->llm_spares)))
		return;
	long n = http_prompt_blocks(body, len, pc->lb.block_bytes, x->reqbody.llm_blocks,
				    LLM_MAX_BLOCKS, NULL);
	if (n > 0) {
		llm_scope_blocks(x->reqbody.llm_blocks, (uint32_t)n, &x->reqbody.view, body);
		x->wt.blocks = x->reqbody.llm_blocks;
		x->wt.nblocks = (uint32_t)n;
	}
}

static void pd_on_req_body(struct exchange *x, const char *body, size_t len)
{
	struct pd_x *p = pd_of(x);
	const struct conf_pd *c = &x->pool->conf->pd;
	if (!c->enabled || !body || !x->req.done || x->req.framing != HTTP_BODY_LENGTH ||
	    !x->reqbody.view_ok || !object_start(body, len))
		return;
	size_t pos = object_start(body, len);
	struct member m;
	while (next_member(body, len, &pos, &m))
		if (key_in(body, &m, pd_reserved)) {
			p->state = PD_REFUSE;
			return;
		}
	p->checked = 1;
	if (len < c->min_prompt_bytes) { /* short: decodes in place */
		pool_count(x->pool, PM_POOL_PD_SKIPPED, 1);
		return;
	}
	unsigned kept;
	if (!(p->dbody = buf_get(&x->w->body_bufs)) ||
	    copy_members(p->dbody, body, len, pd_reserved, &p->dmembers) < 0)
		goto in_place;
	p->dbase = p->dbody->end;
	if (c->protocol == CONF_PD_VLLM) {
		if (!(p->pbody = buf_get(&x->w->body_bufs)) ||
		    copy_members(p->pbody, body, len, vllm_prefill_drop, &kept) < 0 ||
		    (kept && put(p->pbody, ",", 1) < 0) || put_str(p->pbody, vllm_prefill_tail) < 0)
			goto in_place;
	}
	p->state = PD_READY;
	prefill_blocks(x, body, len);
	return;
in_place: /* too long for a body buffer, or none free */
	log_debug("disaggregation: a body too long to rewrite decodes in place");
	pd_free_bodies(x, p);
}

/* Set the Content-Length of head <h> (as rewrite.c writes it) to <n>. */
static int set_content_length(struct buf *h, size_t n)
{
	char *d = h->data + h->start;
	size_t len = buf_len(h), i;
	static const char name[] = "\r\nContent-Length: ";
	for (i = 0; i + sizeof(name) - 1 <= len; i++)
		if (strncasecmp(d + i, name, sizeof(name) - 1) == 0)
			break;
	if (i + sizeof(name) - 1 > len)
		return -EINVAL;
	size_t v = i + sizeof(name) - 1, e = v;
	while (e < len && d[e] >= '0' && d[e] <= '9')
		e++;
	char num[24];
	int k = snprintf(num, sizeof(num), "%zu", n);
	if ((size_t)k > e - v && (size_t)k - (e - v) > h->cap - h->end)
		return -ENOSPC;
	memmove(d + v + k, d + e, len - e);
	memcpy(d + v, num, (size_t)k);
	h->end = (uint32_t)(h->end + (size_t)k - (e - v));
	return 0;
}

/* sglang: the bootstrap fields for prefill backend <be> after the decode body's members. */
static int sglang_fields(struct exchange *x, struct pd_x *p, const struct backend *be)
{
	char text[96];
	const char *addr =
	    net_addr_format((const struct sockaddr *)&be->addr.ss, text, sizeof(text));
	const char *colon = strrchr(addr, ':');
	if (!colon)
		return -EINVAL;
	size_t hl = (size_t)(colon - addr);
	if (addr[0] == '[') /* [v6]:port */
		addr++, hl -= 2;
	unsigned port = x->pool->conf->pd.bootstrap_port;
	if (!port)
		port = (unsigned)strtoul(colon + 1, NULL, 10);
	char tail[160];
	int n =
	    snprintf(tail, sizeof(tail),
		     "%s\"bootstrap_host\":\"%.*s\",\"bootstrap_port\":%u,\"bootstrap_room\":%llu}",
		     p->dmembers ? "," : "", (int)hl, addr, port,
		     (unsigned long long)(rand_next(&x->w->rng) >> 1));
	p->dbody->end = p->dbase;
	return put(p->dbody, tail, (size_t)n);
}

int pd_wants_body(struct exchange *x)
{
	if (!x->pool->conf->pd.enabled)
		return 0;
	(void)pd_of(x); /* its req_body hook reads the body */
	return 1;
}

int pd_waiting(const struct exchange *x)
{
	return pd_peek(x)->state == PD_PREFILL;
}

struct buf *pd_decode_body(const struct exchange *x)
{
	const struct pd_x *p = pd_peek(x);
	return p->state == PD_DONE || p->state == PD_BESIDE ? p->dbody : NULL;
}

static void pd_on_event(void *owner);

/* The prefill attempt ends; its backend's llm work is done, and the prompt its pick put in
 * the index goes again unless an answer came (pre_answered() settles p->missed). */
static void pre_end(struct exchange *x, struct pd_x *p, int reuse)
{
	if (p->pre.be && p->pre.be->llm && p->work) {
		if (x->wt.blocks)
			llm_unpicked(p->pre.be->llm, x->wt.blocks, x->wt.nblocks, p->missed,
				     p->ticks);
		llm_done(p->pre.be->llm, p->work);
	}
	p->work = 0;
	p->missed = p->ticks = 0;
	attempt_end(&p->pre, x->w, reuse);
}

/* Pick a prefill backend (not <exclude>) and connect to it. 0, or -errno. */
static int pre_start(struct exchange *x, struct pd_x *p, const struct backend *exclude)
{
	struct worker *w = x->w;
	struct pool_rt *pp = &w->rt->pools[x->pool->conf->pd.prefill_pool];
	struct pick_hint h = {.exclude = exclude,
			      .key = x->wt.key,
			      .has_key = x->wt.has_key,
			      .blocks = x->wt.blocks,
			      .nblocks = x->wt.nblocks,
			      .missed = &p->missed,
			      .ticks = &p->ticks,
			      .work = &p->work,
			      .model = x->wt.model,
			      .has_model = x->wt.has_model};
	struct backend *be = pool_pick(pp, loop_now(w->loop), rand_next(&w->rng), &h);
	if (!be)
		return -EAGAIN;
	p->tries++;
	p->last = be;
	pool_count(x->pool, PM_POOL_PD_PREFILLS, 1);
	p->pre = (struct attempt){0};
	attempt_begin(&p->pre, pp, be);
	struct buf *body = p->pbody;
	if (x->pool->conf->pd.protocol == CONF_PD_SGLANG) {
		if (sglang_fields(x, p, be) < 0)
			return -ENOSPC;
		body = p->dbody;
	}
	p->pbody_off = 0;
	p->sent = 0;
	if (set_content_length(x->uphead, buf_len(body)) < 0)
		return -ENOSPC;
	p->since_ms = loop_now(w->loop);
	if (p->tries == 1)
		pool_retry_earn(pp); /* the prefill pool's retry budget grows with its requests */
	int err = attempt_connect(&p->pre, w, x, pd_on_event);
	if (err)
		backend_mark_failed(be, loop_now(w->loop));
	return err;
}

/* Begin the decode: its body's length in the head, then dispatch as any request. */
static enum run decode_go(struct exchange *x, struct pd_x *p, unsigned state)
{
	p->state = state;
	if (p->dbody)
		pool_count(x->pool, PM_POOL_PD_KV_PARAMS, 1);
	if (p->dbody && set_content_length(x->uphead, buf_len(p->dbody)) < 0)
		return exchange_reply(x, 502, "request head too large for disaggregation", 1);
	return dispatch_connect(x, NULL);
}

#define PD_FAIL_TEXT(name, label, text) [PD_FAIL_##name] = text,
static const char *const pd_fail_text[PD_FAILS] = {PD_FAIL_LIST(PD_FAIL_TEXT)};
#undef PD_FAIL_TEXT

/* The prefill failed on its backend (<why>, counted on the decode pool): another, decode in
 * place, or 502. */
static enum run pre_failed(struct exchange *x, struct pd_x *p, enum pd_fail why, int blame)
{
	struct worker *w = x->w;
	const struct backend *be = p->pre.be;
	struct pool_rt *pp = &w->rt->pools[x->pool->conf->pd.prefill_pool];
	metrics_add(metrics_shard_self(x->pool->metrics), PM_POOL_PD_PREFILL_FAILURES,
		    x->pool->index * PD_FAILS + why, 1);
	if (be) {
		log_warn("prefill backend %s: %s", be->name, pd_fail_text[why]);
		if (blame && !p->pre.up_reused) /* a kept-alive one it closed is no failure */
			backend_mark_failed(p->pre.be, loop_now(w->loop));
		attempt_count_response(&p->pre, 0);
	}
	pre_end(x, p, 0);
	while (be && p->tries < PD_TRIES && pool_retry_allowed(pp)) {
		pool_count(x->pool, PM_POOL_PD_RETRIES, 1);
		int err = pre_start(x, p, be);
		if (!err)
			return pd_run(x);
		be = p->pre.be;
		pre_end(x, p, 0);
		if (err == -EAGAIN)
			break;
	}
	if (x->pool->conf->pd.decode_only) {
		pool_count(x->pool, PM_POOL_PD_FALLBACKS, 1);
		pd_free_bodies(x, p);
		if (set_content_length(x->uphead, x->req.ready) < 0)
			return exchange_reply(x, 502, "prefill failed", 1);
		p->state = PD_OFF;
		return dispatch_connect(x, NULL);
	}
	p->state = PD_OFF;
	return exchange_reply(x, 502, "prefill failed, no other prefill backend", 1);
}

int pd_begin(struct exchange *x)
{
	if (!x->pool->conf->pd.enabled && !xhooks_in(x, &pd_hook))
		return 0; /* (what a zeroed context says: PD_OFF) */
	struct pd_x *p = pd_of(x);
	if (p->state == PD_REFUSE) {
		p->state = PD_OFF;
		return -EPERM;
	}
	/* a body the proxy could not read whole as a JSON object (chunked, longer than a body
	 * buffer, not strict JSON) may hold the fields only the proxy sets: never passed on */
	if (x->pool->conf->pd.enabled && x->req.framing != HTTP_BODY_NONE && !p->checked)
		return -EBADMSG;
	if (p->state != PD_READY)
		return 0;
	p->state = PD_PREFILL;
	/* a failure to start is the relay's to handle (pd_run: no connection) */
	(void)pre_start(x, p, NULL);
	return 0;
}

/* The prefill backend answered <status>: its latency and status feed the prefill pool's
 * estimates and outlier ejection, and balance: llm's index learns that it holds the prompt. */
static void pre_answered(struct exchange *x, struct pd_x *p, int status)
{
	uint64_t us = (clock_now_ns() - p->pre.sent_ns) / 1000;
	backend_observe(p->pre.pool, p->pre.be, loop_now(x->w->loop), us, status);
	if (status < 400 && p->pre.be->llm && x->wt.nblocks)
		llm_answered(p->pre.be->llm, x->wt.blocks, x->wt.nblocks, p->missed, us,
			     p->work != 0);
	else if (p->pre.be->llm && p->work) /* refused: the prompt did not stay there */
		llm_unpicked(p->pre.be->llm, x->wt.blocks, x->wt.nblocks, p->missed, p->ticks);
	p->missed = p->ticks = 0; /* settled: pre_end() takes nothing more back */
}

/* vllm: the prefill answer in whole: its kv_transfer_params go after the decode body's
 * members. 1 done, 0 more to read, -1 a failed prefill. */
static int vllm_answer(struct exchange *x, struct pd_x *p, enum pd_fail *why)
{
	struct upconn *up = p->pre.up;
	struct http_head h;
	const char *d = buf_head(up->in);
	size_t n = buf_len(up->in);
	int hl = http_parse_response(d, n, n, HTTP_POST, &h);
	if (hl == 0)
		return 0;
	*why = PD_FAIL_MALFORMED;
	if (hl < 0 || h.framing != HTTP_BODY_LENGTH || h.content_length > PD_ANSWER_MAX)
		return -1;
	if (n < (size_t)hl + h.content_length)
		return up->read_end || up->hup ? -1 : 0;
	const char *b = d + hl;
	size_t bl = (size_t)h.content_length;
	attempt_count_response(&p->pre, h.status);
	/* its latency and status feed the prefill pool's estimates and outlier ejection */
	pre_answered(x, p, h.status);
	*why = PD_FAIL_STATUS;
	if (h.status != 200)
		return -1;
	struct json_view v;
	const char *bad;
	*why = PD_FAIL_NO_PARAMS;
	if (json_view_read(&v, b, bl, &bad) < 0 || !object_start(b, bl))
		return -1;
	size_t pos = object_start(b, bl);
	struct member m;
	while (next_member(b, bl, &pos, &m))
		if (json_key_is(b, m.ks, m.ke, "kv_transfer_params") && b[m.vs] == '{') {
			if ((p->dmembers && put(p->dbody, ",", 1) < 0) ||
			    put_str(p->dbody, "\"kv_transfer_params\":") < 0 ||
			    put(p->dbody, b + m.vs, m.ve - m.vs) < 0 || put(p->dbody, "}", 1) < 0)
				return -1;
			buf_consume(up->in, (size_t)hl + bl);
			p->pre.reusable = !(h.flags & HTTP_F_CLOSE) && h.minor == 1;
			return 1;
		}
	return -1;
}

enum run pd_run(struct exchange *x)
{
	struct pd_x *p = pd_of(x);
	struct upconn *up = p->pre.up;
	if (p->state != PD_PREFILL)
		return RUN_STAY;
	if (!up) /* none free to pick, or its connect failed at once (marked failed) */
		return pre_failed(x, p, p->pre.be ? PD_FAIL_CONNECT : PD_FAIL_NO_BACKEND, 0);
	if (up->failed)
		return pre_failed(x, p, PD_FAIL_CONNECT, 1);
	int sglang = x->pool->conf->pd.protocol == CONF_PD_SGLANG;
	struct buf *body = sglang ? p->dbody : p->pbody;
	size_t head_len = forward_head_len(x, &p->pre);
	while (!up->connecting && up->writable &&
	       (p->pre.head_off < head_len || p->pbody_off < buf_len(body))) {
		struct iovec iov[4];
		int k = p->pre.head_off < head_len ? forward_head_iov(x, &p->pre, iov) : 0;
		iov[k++] =
		    (struct iovec){buf_head(body) + p->pbody_off, buf_len(body) - p->pbody_off};
		ssize_t n = net_conn_writev(&up->conn, iov, k);
		if (n == -EAGAIN || n == -EINTR) {
			up->writable = 0;
			break;
		}
		if (n < 0)
			return pre_failed(x, p, PD_FAIL_RESET, 1);
		size_t s = (size_t)n, hs = head_len - p->pre.head_off;
		hs = s < hs ? s : hs;
		p->pre.head_off += hs;
		p->pbody_off += (uint32_t)(s - hs);
	}
	int sent = p->pre.head_off == head_len && p->pbody_off == buf_len(body);
	if (sent && !p->sent) { /* its answer is due within timeouts.first_byte_ms */
		p->sent = 1;
		p->since_ms = loop_now(x->w->loop);
	}
	if (sglang && sent) /* the decode goes now; the prefill's answer is dropped */
		return decode_go(x, p, PD_BESIDE);
	if (!up->connecting && up->readable) {
		ssize_t n = worker_read(x->w, &up->conn, &up->in, &up->readable, up->hup);
		if (n == 0)
			up->read_end = 1;
		else if (n == -ENOSPC) /* a buffer full, and the answer still not whole */
			return pre_failed(x, p, PD_FAIL_MALFORMED, 0); /* longer than a buffer */
		else if (n < 0 && n != -EAGAIN)
			return pre_failed(x, p, PD_FAIL_RESET, 1);
	}
	if (!up->in || !buf_len(up->in))
		return up->read_end ? pre_failed(x, p, PD_FAIL_CLOSED, 1) : RUN_STAY;
	enum pd_fail why = PD_FAIL_MALFORMED;
	int r = vllm_answer(x, p, &why);
	if (r == 0)
		return RUN_STAY;
	if (r < 0)
		return pre_failed(x, p, why, 0);
	pre_end(x, p, p->pre.reusable);
	return decode_go(x, p, PD_DONE);
}

uint64_t pd_deadline(const struct exchange *x)
{
	const struct pd_x *p = pd_peek(x);
	const struct conf_timeouts *t = &x->w->conf->timeouts;
	if (!p->sent)
		return p->since_ms + t->connect_ms;
	return p->since_ms + t->first_byte_ms;
}

enum run pd_timeout(struct exchange *x, uint64_t now)
{
	struct pd_x *p = pd_of(x);
	if (now < pd_deadline(x))
		return RUN_AGAIN;
	return pre_failed(x, p, p->sent ? PD_FAIL_TIMEOUT : PD_FAIL_CONNECT_TIMEOUT, 1);
}

/* sglang: the prefill's answer, beside the decode, read and dropped. */
static void pre_drain(struct exchange *x, struct pd_x *p)
{
	struct upconn *up = p->pre.up;
	if (!up)
		return;
	while (!up->connecting && up->readable) {
		ssize_t n = worker_read(x->w, &up->conn, &up->in, &up->readable, up->hup);
		struct http_head h;
		if (!p->answered && up->in &&
		    http_parse_response(buf_head(up->in), buf_len(up->in), buf_len(up->in),
					HTTP_POST, &h) > 0) {
			p->answered = 1; /* its head is all it says: the rest is dropped */
			attempt_count_response(&p->pre, h.status);
			pre_answered(x, p, h.status);
		}
		if (up->in && (p->answered || buf_len(up->in) >= up->in->cap / 2))
			buf_consume(up->in, buf_len(up->in));
		if (n <= 0 && n != -ENOSPC) {
			if (n != -EAGAIN)
				pre_end(x, p, 0);
			return;
		}
	}
}

static void pd_on_event(void *owner)
{
	struct exchange *x = owner;
	struct pd_x *p = pd_of(x);
	if (p->state == PD_PREFILL)
		x->codec->wake(x->conn);
	else
		pre_drain(x, p);
}

const char *pd_prefill_backend(const struct exchange *x)
{
	const struct pd_x *p = pd_peek(x);
	return p->last ? p->last->name : NULL;
}

static void pd_on_end(struct exchange *x, uint64_t now_ns)
{
	struct pd_x *p = pd_of(x);
	(void)now_ns;
	if (p->pre.be || p->pre.up)
		pre_end(x, p, 0);
	pd_free_bodies(x, p);
	p->state = PD_OFF;
}

const struct xhook pd_hook = {
    .name = "pd",
    .ctx_size = sizeof(struct pd_x),
    .ctx_off = &pd_off,
    .bit = &pd_bit,
    .req_body = pd_on_req_body,
    .end = pd_on_end,
};
