/*
 * stages.c - the stage list and its driver (see stages.h).
 */
#include "proxy/stages.h"
#include "http/grpc.h"
#include "core/check.h"
#include "core/hex.h"
#include "guard/auth.h"
#include "proxy/caching.h"
#include "proxy/classify.h"
#include "proxy/dispatch.h"
#include "proxy/forward.h"
#include "proxy/llm_explain.h"
#include "proxy/pace.h"
#include "proxy/pd.h"
#include "proxy/quota.h"
#include "proxy/probes.h"
#include "proxy/route.h"
#include "proxy/sse.h"
#include "proxy/sticky.h"
#include "runtime/pick.h"
#include "proxy/tunnel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct stage {
	const char *name;
	enum run (*run)(struct exchange *x);
};

/* routes.match.model: when the route depends on the body's "model", read the whole body (up
 * to limits.body_buffer_bytes, or what the input buffer holds) before routing, and read it
 * once with the strict view (reqbody_read_view): the route is chosen on what the backend
 * will read. A request that may name a model where it cannot be read -- a chunked body, or a
 * body longer than what is read (a "model", or a second one, may follow) -- is refused (411,
 * 413), and so is a body the view refuses (400: a key twice, NaN, a lone surrogate...), never
 * routed as if it named none or the first: a later route (one without the model route's
 * auth, say) must not be reachable that way. A request without a body names none. */
static enum run stage_model(struct exchange *x)
{
	const struct http_head *h = x->head;
	const struct conf *c = x->w->conf;
	const struct conf_route *first;
	if (!x->head) { /* back from waiting: the codec reads the head anew */
	} else if (h->framing == HTTP_BODY_NONE ||
		   (h->framing == HTTP_BODY_LENGTH && !h->content_length) || !c->model_routes ||
		   !(first = route_match_head(c, h, x->peer.tls ? x->peer.tls->sni : NULL)) ||
		   !first->model) {
		return RUN_AGAIN;
	} else if (h->framing != HTTP_BODY_LENGTH) {
		return exchange_reply(
		    x, 411, "a request routed by its \"model\" needs a Content-Length body", 0);
	}
	const char *body;
	size_t len;
	int all;
	size_t max = c->limits.body_buffer_bytes ? (size_t)c->limits.body_buffer_bytes : SIZE_MAX;
	void *conn = x->conn;
	const struct exchange_codec_ops *codec = x->codec;
	enum run r = codec->peek_body(x, max, &body, &len, &all);
	if (!exchange_goes_on(r, conn, codec, x))
		return r; /* (a body refused: answered) */
	x->reqbody.peeked = 1;
	if (!all) {
		x->head = NULL; /* its bytes may move while we wait */
		return RUN_STAY;
	}
	if (!x->req.done) /* cut short: a (second) "model" may come after what was read */
		return exchange_reply(
		    x, 413,
		    "a request routed by its \"model\" must fit in limits.body_buffer_bytes", 0);
	if (reqbody_read_view(&x->reqbody, body, len) < 0)
		return exchange_reply(x, 400, x->reqbody.view_why, 0);
	if (reqbody_note_model(&x->reqbody, body, &x->wt) < 0)
		return exchange_reply(x, 400, REQBODY_MODEL_UNREADABLE, 0);
	return RUN_AGAIN;
}

/* Is this GET /v1/models[/ID][?...] on an api: openai route, while the pools behind those
 * routes list models (conf->models)? Then *id is the ID (NULL: the list). */
static int models_request(const struct exchange *x, const char **id, size_t *idlen)
{
	const struct http_head *h = x->head;
	static const char base[] = "/v1/models";
	size_t n = sizeof(base) - 1, plen = h->path.len;
	const char *q = memchr(h->path.p, '?', plen);
	if (q)
		plen = (size_t)(q - h->path.p);
	if (x->route->api != CONF_API_OPENAI || !x->w->conf->models.n || h->meth != HTTP_GET ||
	    plen < n || memcmp(h->path.p, base, n) != 0)
		return 0;
	if (plen == n) {
		*id = NULL;
		return 1;
	}
	if (h->path.p[n] != '/' || plen == n + 1)
		return 0;
	*id = h->path.p + n + 1;
	*idlen = plen - n - 1;
	return 1;
}

static int cmp_model_name(const void *key, const void *elem)
{
	return strcmp(key, *(const char *const *)elem);
}

/* Answer GET /v1/models (the list) or /v1/models/ID (one, or 404 as OpenAI does); the ID
 * may be percent-encoded (a '/' in "org/model" may come as %2F). */
static enum run answer_models(struct exchange *x, const char *id, size_t idlen)
{
	const struct conf *c = x->w->conf;
	if (!id)
		return x->codec->reply_json(x, 200, c->models.json, c->models.len);
	char name[CONF_MODEL_MAX + 1];
	size_t n = 0;
	for (size_t i = 0; i < idlen && n < CONF_MODEL_MAX; i++) {
		int hi, lo;
		if (id[i] == '%' && i + 2 < idlen && (hi = hex_value(id[i + 1])) >= 0 &&
		    (lo = hex_value(id[i + 2])) >= 0) {
			name[n++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			name[n++] = id[i];
		}
	}
	name[n] = '\0';
	const char *const *hit = strlen(name) == n && n < CONF_MODEL_MAX
				     ? bsearch(name, c->models.names, c->models.n,
					       sizeof(*c->models.names), cmp_model_name)
				     : NULL;
	if (hit) {
		const uint32_t *o = c->models.obj[hit - c->models.names];
		return x->codec->reply_json(x, 200, c->models.json + o[0], o[1]);
	}
	char why[CONF_MODEL_MAX + 64];
	snprintf(why, sizeof(why), "model '%s' not found", name);
	x->answer.code = "model_not_found";
	return exchange_reply(x, 404, why, 1);
}

/* No route matched: 404, saying it was the model when routes choose by one (the OpenAI API's
 * model_not_found, its "param" the body's "model"). */
static enum run route_missed(struct exchange *x)
{
	char why[CONF_MODEL_MAX + 96];
	const struct conf_route *head =
	    route_match_head(x->w->conf, x->head, x->peer.tls ? x->peer.tls->sni : NULL);
	if (!head || !x->reqbody.model_read)
		return exchange_reply(x, 404, "no route matches this request", 1);
	x->answer.code = "model_not_found";
	x->answer.param = "model";
	if (x->wt.has_model)
		snprintf(why, sizeof(why), "model '%s' not found", x->reqbody.model);
	else
		snprintf(why, sizeof(why),
			 "the request names no model: give \"model\" in its JSON "
			 "body");
	return exchange_reply(x, 404, why, 1);
}

static enum run stage_route(struct exchange *x)
{
	void *conn = x->conn;
	const struct exchange_codec_ops *codec = x->codec;
	enum run probed = probes_answer(x); /* probes.listeners: /healthz, /readyz */
	if (!exchange_goes_on(probed, conn, codec, x))
		return probed; /* answered */
	const struct conf_route *route =
	    route_match(x->w->conf, x->head, x->peer.tls ? x->peer.tls->sni : NULL,
			x->wt.has_model ? x->reqbody.model : NULL, x->reqbody.model_len);
	if (!route)
		return route_missed(x);
	x->route = route;
	x->pool = &x->w->rt->pools[route->pool];
	/* the admin API's maintenance: new requests are turned away, those in flight finish */
	unsigned retry_s = atomic_load_explicit(&x->w->rt->maintenance, memory_order_relaxed);
	if (retry_s) {
		x->answer.retry_after_s = retry_s;
		return exchange_reply(x, 503, "in maintenance: try again later", 1);
	}
	return RUN_AGAIN;
}

/* GET /v1/models on an api: openai route: the proxy's own answer, once the guard let the
 * client in (the list is for those the route admits, as OpenAI's needs a key). */
static enum run stage_models(struct exchange *x)
{
	const char *id;
	size_t idlen = 0;
	if (models_request(x, &id, &idlen))
		return answer_models(x, id, idlen);
	return RUN_AGAIN;
}

/* routes.auth.client_cert: the tenant a verified client certificate names, or NULL. */
static const char *guard_cert_tenant(const struct exchange *x, const struct conf_auth *a)
{
	const struct net_tls_facts *f = exchange_tls(x);
	if (a->client_cert == CERT_TENANT_NONE || !f || !f->client_cert)
		return NULL;
	const char *t = a->client_cert == CERT_TENANT_SAN ? f->san : f->cn;
	return *t && strlen(t) <= APIKEYS_TENANT_MAX ? t : NULL;
}

/* routes.rate_limit.per_ip, before the credentials are checked: a client guessing
 * passwords is limited before each guess costs a hash. */
static enum run stage_address(struct exchange *x)
{
	return quota_guard_address(x);
}

/* routes.auth: only a request with a verified client certificate naming its tenant, or whose
 * credential one of the route's methods verifies, passes; its identity is who it is from
 * now on (fair queueing, rate and token limits, the backend's identity header). Then the
 * route's other limits. */
static enum run stage_guard(struct exchange *x)
{
	const struct conf_auth *a = x->route->auth;
	if (!a)
		return quota_guard(x);
	const char *cert_tenant = guard_cert_tenant(x, a);
	if (cert_tenant) {
		if (!auth_admits(a->tenants, a->ntenants, cert_tenant))
			return exchange_reply(x, 403, "this route does not admit your tenant", 1);
		size_t n = strnlen(cert_tenant, APIKEYS_TENANT_MAX); /* at most that: checked */
		char *id = quota_identity_buf(x);
		memcpy(id, cert_tenant, n);
		id[n] = '\0';
		x->peer.identity = id;
		return quota_guard(x);
	}
	struct auth_tables *t = atomic_load_explicit(&x->w->sh->auth[x->route - x->w->conf->routes],
						     memory_order_acquire);
	if (!t) /* client_cert alone */
		return exchange_reply(
		    x, 403, "this route needs a verified client certificate naming your tenant", 1);
	const char *why;
	/* copied out: the tables may be swapped (SIGHUP) while the exchange lives on */
	switch (auth_check(t, a->tenants, a->ntenants, x->head, (int64_t)time(NULL),
			   quota_identity_buf(x), QUOTA_IDENTITY_CAP, &why)) {
	case AUTH_OK:
		x->peer.identity = quota_identity_buf(x);
		return quota_guard(x);
	case AUTH_FORBIDDEN:
		return exchange_reply(x, 403, why, 1);
	case AUTH_MISSING:
	case AUTH_INVALID:
		break;
	}
	return exchange_reply(x, 401, why, 1);
}

static enum run stage_classify(struct exchange *x)
{
	const struct http_head *h = x->head;
	const struct conf_pool *pc = x->pool->conf;
	sse_setup(x, h);
	classify_request(x->route, pc, h, x->peer.key, x->peer.identity, &x->wt);
	pool_retry_earn(x->pool);
	x->reqbody.want_key = pc->hash.key == HASH_KEY_PROMPT && pc->balance->keyed &&
			      h->framing == HTTP_BODY_LENGTH && h->content_length > 0;
	/* pools.backends.models, or engines that serve LoRA adapters (policy/lora.h): the
	 * body's "model" chooses among the backends (read with the body, after the guard,
	 * unless routing read it already) */
	if (pd_wants_body(x) && h->framing == HTTP_BODY_LENGTH && h->content_length)
		x->reqbody.want_view = 1; /* disaggregation rewrites the body (pd.h) */
	x->reqbody.want_model =
	    (pc->has_models || atomic_load_explicit(&x->pool->lora_seen, memory_order_relaxed)) &&
	    !x->reqbody.model_read && h->framing == HTTP_BODY_LENGTH && h->content_length > 0;
	sticky_classify(x, h);
	llm_explain_classify(x); /* before any pick: the decision's record */
	return RUN_AGAIN;
}

/* The names of the fields only the proxy sets anywhere in the config (other listeners'
 * certificate fields, the auth routes' identity fields), after the <n> fields in <f>, each
 * once, to be dropped: a backend behind several listeners and routes believes X-Cert-DN or
 * X-Tenant from any of them, so no client may send one through a listener or route that
 * does not set it (a plain listener, a route without auth). At most CONF_GUARDED_FIELDS_MAX
 * names, so they fit (conf/schema.c refuses more). */
static unsigned drop_other_names(const struct conf *c, const char *own, struct rewrite_field *f,
				 unsigned n)
{
	for (size_t i = 0; i < c->nguarded_fields; i++) {
		const char *name = c->guarded_fields[i];
		unsigned j = 0;
		while (j < n && strcasecmp(f[j].name, name) != 0)
			j++;
		if (j == n && !(own && strcasecmp(own, name) == 0))
			f[n++] = (struct rewrite_field){name, NULL};
	}
	return n;
}

/* The fields only the proxy sets from the client's TLS connection (listen[].tls): the
 * verified certificate's subject and SAN, and with facts_headers the version, cipher and
 * SNI. Any of them the client sent is dropped, on every listener, and so are the names other
 * listeners and routes give fields only they set. Returns how many. */
static unsigned forward_tls_fields(const struct exchange *x, struct rewrite_field *f)
{
	const struct conf_tls *t = x->peer.tls_conf;
	const struct net_tls_facts *tf = exchange_tls(x);
	int cert = tf && tf->client_cert, facts = tf && t && t->facts_headers;
	unsigned n = 0;
	f[n++] = (struct rewrite_field){t ? t->client_subject_header : "X-Client-Subject",
					cert ? tf->subject : NULL};
	f[n++] = (struct rewrite_field){t ? t->client_san_header : "X-Client-SAN",
					cert && tf->san[0] ? tf->san : NULL};
	f[n++] = (struct rewrite_field){"X-TLS-Version", facts ? tf->version : NULL};
	f[n++] = (struct rewrite_field){"X-TLS-Cipher", facts ? tf->cipher : NULL};
	f[n++] = (struct rewrite_field){"X-TLS-SNI", facts && tf->sni[0] ? tf->sni : NULL};
	const struct conf_auth *a = x->route->auth;
	return drop_other_names(x->w->conf, a ? a->identity_header : NULL, f, n);
}

/* A WebSocket handshake on a route with websocket: true is marked for a tunnel (tunnel.h). */
static enum run stage_upgrade(struct exchange *x)
{
	return tunnel_stage(x);
}

static enum run stage_cache(struct exchange *x)
{
	if (x->tunnel)
		return RUN_AGAIN; /* a tunnel is never the cache's */
	return caching_stage_lookup(x);
}

static enum run stage_cache_serve(struct exchange *x)
{
	return caching_stage_serve(x);
}

static enum run stage_forward(struct exchange *x)
{
	struct rewrite_field set[5 + 4 + CONF_GUARDED_FIELDS_MAX];
	char etag[256], lm[256];
	if (caching_hit_complete(x))
		return RUN_AGAIN; /* a hit: nothing goes upstream (but a refresh) */
	const struct http_header *ct = x->route->grpc_web
					   ? http_find_only_header(x->head, "content-type")
					   : NULL; /* gRPC-Web, turned into gRPC by up_h2.c */
	size_t rest;
	x->grpc_web = ct && http_grpc_web_kind(ct->value.p, ct->value.len, &rest);
	struct rewrite_request_info info = {
	    .client_ip = x->peer.ip,
	    .request_id = x->names.reqid,
	    .traceparent = x->names.traceparent,
	    .pass_tracestate = x->names.pass_tracestate,
	    .upstream_minor = x->head->minor,
	    .trusted = x->peer.trusted,
	    .tls = x->peer.over_tls,
	    .identity_header = x->route->auth ? x->route->auth->identity_header : NULL,
	    .identity = x->peer.identity,
	    .strip_credentials = x->route->auth && !x->route->auth->pass_credentials,
	    .set = set,
	    .nset = forward_tls_fields(x, set),
	    .upgrade = x->tunnel,
	};
	info.nset += caching_forward_fields(x, set + info.nset, etag, lm, sizeof(lm));
	struct forward_scratch fs; /* routes.rewrite, request_headers (forward.h) */
	int status = forward_request(x, &info, &fs);
	if (status)
		return exchange_reply(x, status,
				      status == 414 ? "request target too long once rewritten"
						    : "the route's rewrite makes no valid path",
				      1);
	if (!(x->uphead = buf_get(&x->w->bufs)))
		return exchange_abort(x, "out of memory");
	int n = rewrite_request(x->uphead->data, x->uphead->cap, x->head, &info);
	if (n < 0)
		return exchange_reply(x, 431, "request head too large once forwarded", 0);
	x->uphead->end = (uint32_t)n;
	return RUN_AGAIN;
}

static enum run stage_head_done(struct exchange *x)
{
	void *conn = x->conn;
	const struct exchange_codec_ops *codec = x->codec;
	enum run r = codec->head_done(x);
	if (!exchange_goes_on(r, conn, codec, x))
		return r;
	/* a body is read (up to limits.body_buffer_bytes) before the request may take a
	 * slot, so a client that sends it slowly, or never, holds no accelerator */
	struct xpace *p = exchange_pace(x);
	p->buffering = (!x->req.done || x->reqbody.peeked) &&
		       (x->w->conf->limits.body_buffer_bytes || x->reqbody.want_key ||
			x->reqbody.want_model || x->reqbody.want_view || x->reqbody.cache_body);
	if (x->reqbody.want_session && (!x->req.done || x->reqbody.peeked))
		p->buffering = 1; /* previous_response_id (sticky.h) */
	if (!p->buffering)
		sse_decide(x); /* from the view, when the model stage read one */
	return RUN_AGAIN;
}

static enum run stage_body(struct exchange *x)
{
	if (!exchange_pace(x)->buffering)
		return RUN_AGAIN;
	void *conn = x->conn;
	const struct exchange_codec_ops *codec = x->codec;
	enum run r = codec->await_body(x);
	/* the body is in: does it ask for a stream? (not when it was refused: answered) */
	if (exchange_goes_on(r, conn, codec, x))
		sse_decide(x);
	return r;
}

/* routes.rate_limit.tokens_per_minute: the request's tokens are reserved before it may wait
 * for a slot, or it is refused */
static enum run stage_tokens(struct exchange *x)
{
	return quota_reserve(x);
}

/* A model no backend of the pool serves (pools.backends.models) is not found, as the OpenAI
 * API answers an unknown model. */
static enum run stage_admit(struct exchange *x)
{
	if (x->att->be || x->wt.state != W_IDLE || x->spilled || x->att->retried ||
	    caching_answers(x))
		return RUN_AGAIN; /* dispatched already: granted, queued, or moved on; or the
				     cache answers (stale-if-error, from a failed dispatch) */
	if (x->wt.has_model && !models_served(&x->pool->models, x->wt.model)) {
		char why[CONF_MODEL_MAX + 64];
		snprintf(why, sizeof(why), "model '%s' not found", x->reqbody.model);
		x->answer.code = "model_not_found";
		return exchange_reply(x, 404, why, 1);
	}
	int pd = pd_begin(x); /* disaggregation: the prefill first (pd.h) */
	if (pd == -EPERM)
		return exchange_reply(x, 400, PD_REFUSAL, 0);
	if (pd < 0)
		return exchange_reply(x, x->req.framing == HTTP_BODY_CHUNKED ? 411 : 400,
				      PD_UNCHECKED, 0);
	if (pd_waiting(x))
		return RUN_AGAIN; /* the relay drives the prefill, then dispatches */
	return dispatch_connect(x, NULL);
}

static enum run stage_relay(struct exchange *x)
{
	return x->codec->relay(x);
}

enum stage_id {
	STAGE_MODEL, /* may wait: it reads the head anew when it runs again */
	STAGE_ROUTE,
	STAGE_ADDRESS,
	STAGE_GUARD,
	STAGE_MODELS,
	STAGE_CLASSIFY,
	STAGE_UPGRADE,
	STAGE_CACHE,
	STAGE_FORWARD,
	STAGE_HEAD_DONE, /* the stages up to this one see x->head, and never wait */
	STAGE_BODY,
	STAGE_CACHE_SERVE,
	STAGE_TOKENS,
	STAGE_ADMIT,
	STAGE_RELAY,
};

static const struct stage stage_list[] = {
    [STAGE_MODEL] = {"model", stage_model},
    [STAGE_ROUTE] = {"route", stage_route},
    [STAGE_ADDRESS] = {"address", stage_address},
    [STAGE_GUARD] = {"guard", stage_guard},
    [STAGE_MODELS] = {"models", stage_models},
    [STAGE_CLASSIFY] = {"classify", stage_classify},
    [STAGE_UPGRADE] = {"upgrade", stage_upgrade},
    [STAGE_CACHE] = {"cache", stage_cache},
    [STAGE_FORWARD] = {"forward", stage_forward},
    [STAGE_HEAD_DONE] = {"head done", stage_head_done},
    [STAGE_BODY] = {"body", stage_body},
    [STAGE_CACHE_SERVE] = {"cache serve", stage_cache_serve},
    [STAGE_TOKENS] = {"tokens", stage_tokens},
    [STAGE_ADMIT] = {"admit", stage_admit},
    [STAGE_RELAY] = {"relay", stage_relay},
};
#define NSTAGES (sizeof(stage_list) / sizeof(stage_list[0]))

enum run stages_run(struct exchange *x, int (*live)(void *conn, const struct exchange *x))
{
	void *conn = x->conn;
	for (;;) {
		enum run r = stage_list[x->stage].run(x);
		/* head stages never wait, but for the model's, which gives x->head up */
		ASSERT(r != RUN_STAY || x->stage > STAGE_HEAD_DONE ||
		       (x->stage == STAGE_MODEL && !x->head));
		if (r == RUN_GONE || !live(conn, x))
			return r; /* the connection, or this exchange, has ended */
		if (r == RUN_STAY || x->stage == NSTAGES - 1)
			return r; /* waits, or relays again */
		x->stage++;
	}
}
