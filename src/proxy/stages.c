/*
 * stages.c - the stage list and its driver (see stages.h).
 */
#include "proxy/stages.h"
#include "core/check.h"
#include "guard/auth.h"
#include "proxy/classify.h"
#include "proxy/dispatch.h"
#include "proxy/quota.h"
#include "proxy/sse.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct stage {
	const char *name;
	enum run (*run)(struct exchange *x);
};

static enum run stage_route(struct exchange *x)
{
	const struct conf_route *route =
	    route_match(x->w->conf, x->head, x->tls ? x->tls->sni : NULL);
	if (!route)
		return exchange_reply(x, 404, "no route matches this request", 1);
	x->route = route;
	x->pool = &x->w->rt->pools[route->pool];
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
		memcpy(x->identity_buf, cert_tenant, n);
		x->identity_buf[n] = '\0';
		x->identity = x->identity_buf;
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
			   x->identity_buf, sizeof(x->identity_buf), &why)) {
	case AUTH_OK:
		x->identity = x->identity_buf;
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
	classify_request(x->route, pc, h, x->client_key, x->identity, &x->wt);
	pool_retry_earn(x->pool);
	x->want_key = pc->hash.key == HASH_KEY_PROMPT && pc->balance->keyed &&
		      h->framing == HTTP_BODY_LENGTH && h->content_length > 0;
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
	const struct conf_tls *t = x->tls_conf;
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

static enum run stage_forward(struct exchange *x)
{
	struct rewrite_field set[5 + CONF_GUARDED_FIELDS_MAX];
	struct rewrite_request_info info = {
	    .client_ip = x->client_ip,
	    .request_id = x->reqid,
	    .traceparent = x->traceparent,
	    .pass_tracestate = x->pass_tracestate,
	    .upstream_minor = x->head->minor,
	    .trusted = x->client_trusted,
	    .tls = x->client_tls,
	    .identity_header = x->route->auth ? x->route->auth->identity_header : NULL,
	    .identity = x->identity,
	    .strip_credentials = x->route->auth && !x->route->auth->pass_credentials,
	    .set = set,
	    .nset = forward_tls_fields(x, set),
	};
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
	return x->codec->head_done(x);
}

static enum run stage_body(struct exchange *x)
{
	return x->buffering ? x->codec->await_body(x) : RUN_AGAIN;
}

/* routes.rate_limit.tokens_per_minute: the request's tokens are reserved before it may wait
 * for a slot, or it is refused */
static enum run stage_tokens(struct exchange *x)
{
	return quota_reserve(x);
}

static enum run stage_admit(struct exchange *x)
{
	if (x->be || x->wt.state != W_IDLE || x->spilled || x->retried)
		return RUN_AGAIN; /* dispatched already: granted, queued, or moved on */
	return dispatch_connect(x, NULL);
}

static enum run stage_relay(struct exchange *x)
{
	return x->codec->relay(x);
}

enum stage_id {
	STAGE_ROUTE,
	STAGE_ADDRESS,
	STAGE_GUARD,
	STAGE_CLASSIFY,
	STAGE_FORWARD,
	STAGE_HEAD_DONE, /* the stages up to this one see x->head, and never wait */
	STAGE_BODY,
	STAGE_TOKENS,
	STAGE_ADMIT,
	STAGE_RELAY,
};

static const struct stage stage_list[] = {
    [STAGE_ROUTE] = {"route", stage_route},
    [STAGE_ADDRESS] = {"address", stage_address},
    [STAGE_GUARD] = {"guard", stage_guard},
    [STAGE_CLASSIFY] = {"classify", stage_classify},
    [STAGE_FORWARD] = {"forward", stage_forward},
    [STAGE_HEAD_DONE] = {"head done", stage_head_done},
    [STAGE_BODY] = {"body", stage_body},
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
		ASSERT(r != RUN_STAY || x->stage > STAGE_HEAD_DONE); /* head stages never wait */
		if (r == RUN_GONE || !live(conn, x))
			return r; /* the connection, or this exchange, has ended */
		if (r == RUN_STAY || x->stage == NSTAGES - 1)
			return r; /* waits, or relays again */
		x->stage++;
	}
}
