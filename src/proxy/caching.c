/*
 * caching.c - the response cache on the request path (see caching.h).
 *
 * Keys (cache/key.h): the route, the client's scheme, the host lower-cased, the request
 * target in its normal form (http/target.h), and for an inference POST the 128-bit hash of
 * its canonical JSON body.
 * GET and HEAD share a key; HEAD never fills (its answer has no body).
 * The request's Vary values are compared whole by the store.
 *
 * Requests the cache never answers: other methods than GET and HEAD (but an inference
 * route's POST), a request with a body, a credentialed one unless routes.cache.authorized,
 * one with If-Match or If-Unmodified-Since (the origin judges those), one that asks the
 * origin for another method or target than its own (X-HTTP-Method-Override, X-Original-URL:
 * frameworks obey them, and the answer would be stored under the GET's key), one the store
 * has no room to key (a key over CACHE_KEY_MAX bytes).
 *
 * Credentialed: an identity the guard proved (routes.auth: an API key, a JWT, a Basic user, a
 * client certificate), a verified client certificate on the connection (the origin gets its
 * subject), or a credential field (Authorization, Proxy-Authorization, X-API-Key) the origin
 * may read itself. With
 * routes.cache.authorized such a request's answer is stored only as RFC 9111 3.5 allows, and
 * unless the origin marked it public, only for its scope: a seeded XXH3-128 of the identity
 * (or of the certificate and the credential fields where the guard proved none), kept as a
 * variant's value (cache/fill.h, CACHE_SCOPE_FIELD) so that only the same scope matches it,
 * while a purge of the URL still takes every variant.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack, not XXH3_createState's malloc */
#include "proxy/caching.h"
#include "cache/canon.h"
#include "cache/cond.h"
#include "cache/control.h"
#include "cache/fresh.h"
#include "cache/key.h"
#include "cache/store.h"
#include "cache/vary.h"
#include "core/clock.h"
#include "core/dec.h"
#include "core/log.h"
#include "http/target.h"
#include "proxy/refresh.h"
#include "runtime/pool.h"
#include "runtime/proxy_metric.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define CACHE_KEY_MAX 4096

size_t caching_ctx_off;
static uint32_t caching_bit; /* joined by a route with a cache (caching_stage_lookup()) */

static int64_t wall_now(void)
{
	return (int64_t)time(NULL);
}

static struct cache_store *store_of(const struct exchange *x)
{
	return x->w->rt->cache;
}

/* The primary key of <x>'s request for <host> and <target> (cache/key.h) into out[0..cap):
 * its length, or -1 when it does not fit. */
static long key_build(char *out, size_t cap, const struct exchange *x, struct http_str host,
		      struct http_str target)
{
	return cache_key_build(out, cap, (size_t)(x->route - x->w->conf->routes), x->peer.over_tls,
			       host, target);
}

/* A request head, and the exchange it is of. <client>: the head as the client sent it, before
 * it is forwarded (not the one that went upstream). */
struct vary_req {
	const struct exchange *x;
	const struct http_head *h;
	int client;
};

static int name_is(const char *name, size_t n, const char *lit)
{
	return strlen(lit) == n && strncasecmp(name, lit, n) == 0;
}

/* Is <name> (n bytes) a field the proxy itself sets in what the origin gets, whatever the
 * client sent (rewrite.h)? 1: the route's identity header; 2: another (the client's address,
 * scheme, request id, trace context, TLS facts, other routes' identities). */
static int proxy_sets(const struct exchange *x, const char *name, size_t n)
{
	static const char *const fixed[] = {
	    "x-forwarded-for",	"x-forwarded-proto", "x-request-id",	  "traceparent",
	    "tracestate",	"x-tls-version",     "x-tls-cipher",	  "x-tls-sni",
	    "x-client-subject", "x-client-san",	     "x-accelnet-timing",
	};
	const struct conf *c = x->w->conf;
	const struct conf_auth *a = x->route->auth;
	if (a && name_is(name, n, a->identity_header))
		return 1;
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (name_is(name, n, fixed[i]))
			return 2;
	for (size_t i = 0; i < c->nguarded_fields; i++)
		if (name_is(name, n, c->guarded_fields[i]))
			return 2;
	return 0;
}

/* A value as cache/vary.h writes one ("\1" absent, "\2" VALUE, "\n") of v[0..n) (v NULL:
 * absent) at out[*len..cap). 0, or -1 when it does not fit. */
static int put_value(const char *v, size_t n, char *out, size_t cap, size_t *len)
{
	if (cap - *len < n + 2)
		return -1;
	out[(*len)++] = v ? '\2' : '\1';
	if (v)
		memcpy(out + *len, v, n);
	*len += n;
	out[(*len)++] = '\n';
	return 0;
}

/*
 * The store's Vary callback: the values the request has for a stored variant's <names>. The
 * scope (CACHE_SCOPE_FIELD) is the request's own (cx->cfx, set by the lookup stage). Before
 * the request is forwarded (vr->client) the values are those the origin will see, which are
 * those of the client's head but for the fields the proxy sets: its identity header has the
 * identity the guard proved (the stored variant was keyed by the value the origin got: a
 * client naming another tenant there must not match it); a Vary on the other fields it sets
 * never matches there (their values are per client or per request).
 */
static long vary_of_request(void *arg, const char *names, size_t nlen, char *out, size_t cap)
{
	const struct vary_req *vr = arg;
	const struct exchange *x = vr->x;
	const struct caching_x *cx = caching_peek(x);
	const char *p = names, *end = names + nlen;
	size_t len = 0, k;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p), one = n + (nl != NULL);
		int set = vr->client ? proxy_sets(x, p, n) : 0;
		if (name_is(p, n, CACHE_SCOPE_FIELD)) {
			if (put_value(cx->cfx.scope_len ? cx->cfx.scope : NULL, cx->cfx.scope_len,
				      out, cap, &len) < 0)
				return -1;
		} else if (set == 1) {
			const char *id = x->peer.identity;
			if (put_value(id, id ? strlen(id) : 0, out, cap, &len) < 0)
				return -1;
		} else if (set) {
			return -1;
		} else {
			if (cache_vary_values(vr->h, p, one, out + len, cap - len, &k) < 0)
				return -1;
			len += k;
		}
		p += one;
	}
	return (long)len;
}

/* The request as it went upstream (x->uphead), parsed into <h>: for what the head stages no
 * longer have (Vary values, Cache-Control) once the head has left. 0 or -1. */
static int parse_uphead(const struct exchange *x, struct http_head *h)
{
	if (!x->uphead)
		return -1;
	return http_parse_request(buf_head(x->uphead), buf_len(x->uphead), buf_len(x->uphead), h) >
		       0
		   ? 0
		   : -1;
}

/* Cache-Control with no directive at all. */
static void control_none(struct cache_control *cc)
{
	memset(cc, 0, sizeof(*cc));
	cc->max_age = cc->s_maxage = cc->max_stale = cc->min_fresh = CACHE_UNSET;
	cc->stale_while_revalidate = cc->stale_if_error = CACHE_UNSET;
}

static void rules_of(const struct conf_route_cache *rc, struct cache_rules *r)
{
	r->store_cookies = rc->cookies;
	r->store_authorized = rc->authorized;
	r->heuristic_pct = rc->heuristic_pct;
	r->heuristic_max_s = rc->heuristic_max_s;
	r->default_ttl_s = rc->default_ttl_s;
	r->stale_while_revalidate_s = rc->stale_while_revalidate_s;
	r->stale_if_error_s = rc->stale_if_error_s;
}

/* The fill's context: the route's rules, when its request went out. */
static void fill_ctx(struct exchange *x, int64_t now)
{
	struct caching_x *cx = caching_ctx(x);
	struct cache_fill_ctx *c = &cx->cfx;
	c->store = store_of(x);
	rules_of(&x->route->cache, &c->rules);
	c->rules.authorization = cx->cauthorization;
	c->pass_s = x->route->cache.pass_s;
	c->request_time = now;
	c->head_max = x->w->bufs.size - HIT_HEAD_EXTRA; /* what a hit can write (hit.c) */
	c->inference = x->meth == HTTP_POST;
}

/* How a hit answers the request <h> (its conditionals and Range, against <o>). */
static void decide_hit(struct exchange *x, const struct http_head *h, struct cache_obj *o)
{
	struct caching_x *cx = caching_ctx(x);
	struct http_str etag = {o->etag_len ? o->head + o->etag_off : NULL, o->etag_len};
	struct http_str lm = {o->lm_len ? o->head + o->lm_off : NULL, o->lm_len};
	uint64_t len = cache_obj_body_len(o), first, last;
	cx->hit_pos = 0;
	cx->hit_end = len;
	/* preconditions only on what would be a 2xx (RFC 9110 13.2.1): a stored 404 is a 404 */
	if (o->status / 100 == 2 && cache_cond_not_modified(h, etag, lm)) {
		cx->hit_kind = HIT_304;
		return;
	}
	if (x->meth == HTTP_HEAD) {
		cx->hit_kind = HIT_HEAD;
		return;
	}
	cx->hit_kind = HIT_FULL;
	if (o->status != 200)
		return;
	switch (cache_range_of(h, len, etag, lm, &first, &last)) {
	case CACHE_RANGE_PART:
		cx->hit_kind = HIT_RANGE;
		cx->hit_pos = first;
		cx->hit_end = last + 1;
		break;
	case CACHE_RANGE_UNSATISFIABLE:
		cx->hit_kind = HIT_416;
		break;
	default:
		break;
	}
}

/* Coalesced: wait for another request's <fill> (referenced), whatever the request's
 * Cache-Control says (it is the origin's answer, now). */
static enum run wait_on(struct exchange *x, struct cache_obj *fill)
{
	struct caching_x *cx = caching_ctx(x);
	cx->cobj = fill;
	cx->cstatus = CS_COLLAPSED;
	cx->hit_kind = x->meth == HTTP_HEAD ? HIT_HEAD : HIT_FULL;
	cx->hit_pos = 0;
	cx->hit_end = UINT64_MAX;
	cx->hit_wait_until = loop_now(x->w->loop) + x->route->cache.wait_ms;
	return RUN_AGAIN;
}

/*
 * Look <key> up for the request <h> (Cache-Control <rq>) and decide: a hit (cx->cobj), a wait
 * on a fill (cx->cobj, filling), a fill of our own (cx->cfill, and cx->cstale when revalidating),
 * or none (bypass). <h> may be NULL past the head stages (conditionals then not looked at).
 */
static enum run look_up(struct exchange *x, const char *key, size_t klen, const struct http_head *h,
			const struct cache_control *rq, int can_fill)
{
	struct caching_x *cx = caching_ctx(x);
	struct cache_store *s = store_of(x);
	uint64_t hash = cache_key_hash(key, klen);
	int64_t now = wall_now();
	struct cache_obj *fill;
	struct vary_req vr = {x, h, h == x->head};
	int again = 1; /* a copy stored between the lookup and the fill: looked up again, once */
look:
	fill = NULL;
	cx->hit_cond = 0;
	struct cache_obj *o = cache_lookup(s, key, klen, hash, vary_of_request, &vr, &fill);
	enum cache_fill_state st = o ? cache_obj_state(o) : CACHE_FAILED;
	if (o && st == CACHE_PASS && now < o->pass_until) {
		cache_obj_put(s, o);
		if (fill)
			cache_obj_put(s, fill);
		cx->cstatus = CS_PASS;
		return RUN_AGAIN;
	}
	int forced = 0; /* a fresh copy, refused by the request's own Cache-Control */
	if (o && st == CACHE_COMPLETE) {
		enum cache_use use = cache_decide_use(&o->times, rq, now);
		if (use == CACHE_USE_REVALIDATE) {
			struct cache_control none;
			control_none(&none);
			forced = cache_decide_use(&o->times, &none, now) == CACHE_USE_FRESH;
		}
		/* an inference POST is never refreshed behind a client: it revalidates */
		if (use == CACHE_USE_SWR && x->meth == HTTP_POST)
			use = CACHE_USE_REVALIDATE;
		if (use != CACHE_USE_REVALIDATE) {
			if (fill)
				cache_obj_put(s, fill);
			cx->cobj = o;
			cx->cstatus = use == CACHE_USE_FRESH ? CS_HIT : CS_HIT_STALE;
			/* stale-while-revalidate: the first such hit refreshes it, once */
			cx->swr = use == CACHE_USE_SWR && !atomic_flag_test_and_set(&o->refreshing);
			if (h)
				decide_hit(x, h, o);
			else
				cx->hit_kind = HIT_FULL, cx->hit_pos = 0,
				cx->hit_end = cache_obj_body_len(o);
			return RUN_AGAIN;
		}
		if (!fill) {
			cx->cstale = o; /* revalidate it (or serve it if the origin fails) */
			if (h) {
				struct http_str etag = {o->etag_len ? o->head + o->etag_off : NULL,
							o->etag_len};
				struct http_str lm = {o->lm_len ? o->head + o->lm_off : NULL,
						      o->lm_len};
				cx->hit_cond = o->status / 100 == 2 &&
					       cache_cond_not_modified(h, etag, lm) == 1;
			}
			o = NULL;
		}
	}
	if (o)
		cache_obj_put(s, o); /* a failed fill, an old pass marker, or revalidated by fill */
	if (fill)
		return wait_on(x, fill);
	if (rq->only_if_cached) /* RFC 9111 5.2.1.7 */
		return exchange_reply(x, 504, "not in the cache (only-if-cached)", 1);
	if (!can_fill) {
		cx->cstatus = CS_MISS;
		cx->cwhy = rq->no_store ? "no-store" : NULL;
		return RUN_AGAIN;
	}
	cx->cfill = cache_fill_begin_unless(s, key, klen, hash, again ? vary_of_request : NULL, &vr,
					    cx->cstale, &fill);
	if (!cx->cfill) {
		if (cx->cstale)
			cache_obj_put(s, cx->cstale);
		cx->cstale = NULL;
		if (fill && again && cache_obj_state(fill) == CACHE_COMPLETE) {
			cache_obj_put(s, fill); /* stored since the lookup (another worker's) */
			again = 0;
			goto look;
		}
		if (fill) /* another request's, begun since the lookup: wait on it too */
			return wait_on(x, fill);
		cx->cstatus = CS_BYPASS;
		return RUN_AGAIN;
	}
	cx->cstatus = !cx->cstale ? CS_MISS : forced ? CS_REQUEST : CS_REVAL;
	fill_ctx(x, now);
	return RUN_AGAIN;
}

/* Does the field name <name> say <lit> (lower case), '_' taken for '-' as CGI-style
 * backends read it? */
static int field_is(struct http_str name, const char *lit)
{
	size_t i = 0;
	for (; i < name.len && lit[i]; i++) {
		char c = (char)tolower((unsigned char)name.p[i]);
		if ((c == '_' ? '-' : c) != lit[i])
			return 0;
	}
	return i == name.len && !lit[i];
}

/* Does <h> ask the origin for another method or target than its request line's (a field
 * that frameworks and servers obey: Symfony, Laravel, Express's method-override, IIS's URL
 * rewrite)? Its answer is not the GET's: never stored under the GET's key, nor answered from
 * it. */
static int overrides_request(const struct http_head *h)
{
	static const char *const names[] = {
	    "x-http-method-override", "x-http-method", "x-method-override",
	    "x-original-url",	      "x-rewrite-url", "x-original-method",
	};
	for (unsigned i = 0; i < h->nheaders; i++)
		for (size_t j = 0; j < sizeof(names) / sizeof(names[0]); j++)
			if (field_is(h->headers[i].name, names[j]))
				return 1;
	return 0;
}

/* Authorization, Proxy-Authorization (forwarded: the proxy takes none) or X-API-Key, as a
 * CGI-style backend reads them (X_API_Key too). */
static int is_credential_field(struct http_str name)
{
	return field_is(name, "authorization") || field_is(name, "x-api-key") ||
	       field_is(name, "proxy-authorization");
}

/* Is the request <h> of <x> credentialed (the essay above)? Without routes.cache.authorized
 * such a request is never answered from the cache, nor stored. */
static int credentialed(const struct exchange *x, const struct http_head *h)
{
	const struct net_tls_facts *f = exchange_tls(x);
	if (x->peer.identity || (f && f->client_cert))
		return 1;
	for (unsigned i = 0; i < h->nheaders; i++)
		if (is_credential_field(h->headers[i].name))
			return 1;
	return 0;
}

static uint64_t scope_seed;

static void scope_seed_init(void)
{
	if (getrandom(&scope_seed, sizeof(scope_seed), 0) != sizeof(scope_seed))
		scope_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

static void hash_part(XXH3_state_t *st, const char *p, size_t n)
{
	uint32_t len = (uint32_t)n; /* each part with its length: parts never run together */
	XXH3_128bits_update(st, &len, sizeof(len));
	XXH3_128bits_update(st, p, n);
}

/* The scope of the credentialed request <h> into cx->cfx (the essay above): the identity the
 * guard proved, or else the client certificate and the credential fields, hashed with a
 * seed of this process (no one outside can aim at another's). */
static void scope_set(struct exchange *x, const struct http_head *h)
{
	struct caching_x *cx = caching_ctx(x);
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	static const char digits[] = "0123456789abcdef";
	const struct net_tls_facts *f = exchange_tls(x);
	XXH3_state_t st;
	pthread_once(&once, scope_seed_init);
	XXH3_128bits_reset_withSeed(&st, scope_seed);
	if (x->peer.identity) {
		hash_part(&st, "t", 1);
		hash_part(&st, x->peer.identity, strlen(x->peer.identity));
	} else {
		if (f && f->client_cert) {
			hash_part(&st, "c", 1);
			hash_part(&st, f->subject, strlen(f->subject));
			hash_part(&st, f->san, strlen(f->san));
		}
		for (unsigned i = 0; i < h->nheaders; i++) {
			const struct http_header *hf = &h->headers[i];
			if (!is_credential_field(hf->name))
				continue;
			hash_part(&st, hf->name.p, hf->name.len);
			hash_part(&st, hf->value.p, hf->value.len);
		}
	}
	XXH128_hash_t d = XXH3_128bits_digest(&st);
	uint64_t w[2] = {d.high64, d.low64};
	_Static_assert(CACHE_SCOPE_MAX == 32, "a scope is 32 hex digits");
	for (int i = 0; i < 32; i++)
		cx->cfx.scope[i] = digits[(w[i / 16] >> (60 - 4 * (i % 16))) & 15];
	cx->cfx.scope_len = CACHE_SCOPE_MAX;
}

/* The cache's view of who asks: 0, or -1 when the request is credentialed and the route does
 * not take those (a bypass). Sets cx->cauthorization and the scope. */
static int note_credentials(struct exchange *x, const struct http_head *h)
{
	struct caching_x *cx = caching_ctx(x);
	cx->cfx.scope_len = 0;
	cx->cauthorization = 0;
	if (!credentialed(x, h))
		return 0;
	if (!x->route->cache.authorized)
		return -1;
	/* kept for the fill and a refresh: the request the origin gets may not say so */
	cx->cauthorization = 1;
	scope_set(x, h);
	return 0;
}

enum run caching_stage_lookup(struct exchange *x)
{
	const struct conf_route_cache *rc = &x->route->cache;
	const struct http_head *h = x->head;
	if (!rc->on || !store_of(x))
		return RUN_AGAIN;
	struct caching_x *cx = caching_ctx(x); /* the cache joins the exchange */
	if (h->meth != HTTP_GET && h->meth != HTTP_HEAD) {
		if (h->meth == HTTP_POST && rc->inference) {
			if (note_credentials(x, h) < 0 || overrides_request(h)) {
				cx->cstatus = CS_BYPASS;
				return RUN_AGAIN;
			}
			x->reqbody.cache_body = 1; /* looked up once the body is read */
			return RUN_AGAIN;
		}
		if (!http_method_idempotent(h->meth) || h->meth == HTTP_PUT ||
		    h->meth == HTTP_DELETE) {
			cx->cache_inval = 1; /* RFC 9111 4.4, once the answer is not an error */
			cx->cstatus = CS_METHOD;
		} else {
			cx->cstatus = CS_BYPASS;
		}
		return RUN_AGAIN;
	}
	int has_body = h->framing != HTTP_BODY_NONE &&
		       !(h->framing == HTTP_BODY_LENGTH && h->content_length == 0);
	/* If-Match and If-Unmodified-Since are the origin's to judge (cache/cond.h) */
	if (has_body || note_credentials(x, h) < 0 || http_find_header(h, "if-match") ||
	    http_find_header(h, "if-unmodified-since") || overrides_request(h)) {
		cx->cstatus = CS_BYPASS;
		return RUN_AGAIN;
	}
	struct cache_control rq;
	cache_control_parse(h, 1, &rq);
	char key[CACHE_KEY_MAX];
	long klen = key_build(key, sizeof(key), x, h->host, h->path);
	if (klen < 0) {
		cx->cstatus = CS_BYPASS;
		return RUN_AGAIN;
	}
	/* a request's no-store keeps its answer out of the store (RFC 9111 5.2.1.5), and out of
	 * a fill: one would end as a pass marker, and one client could keep any key from being
	 * cached, for everyone, by asking every pass_s */
	return look_up(x, key, (size_t)klen, h, &rq, h->meth == HTTP_GET && !rq.no_store);
}

/* The req_body hook: an inference route's POST body (<len> bytes at <body>) is in, its
 * canonical key. */
static void caching_note_body(struct exchange *x, const char *body, size_t len)
{
	if (!x->reqbody.cache_body)
		return;
	struct caching_x *cx = caching_ctx(x);
	struct canon_facts f;
	if (!x->reqbody.cache_body || !body || !x->req.done || canon_json(body, len, &f) < 0) {
		x->reqbody.cache_body = 0; /* not one JSON object (or not all here): not cached */
		cx->cstatus = CS_BYPASS;
		return;
	}
	cx->canon[0] = f.hash[0];
	cx->canon[1] = f.hash[1];
	cx->canon_temp = f.has_temperature ? (f.temperature == 0 ? 1 : 2) : 0;
}

/* Is the inference request to <path> deterministic enough to be answered from the cache?
 * Temperature 0; or no temperature on an embeddings path (embeddings have none); or any,
 * when the route says so (routes.cache.any_temperature). */
static int deterministic(const struct exchange *x, struct http_str path)
{
	const struct caching_x *cx = caching_peek(x);
	static const char emb[] = "/embeddings";
	size_t n = sizeof(emb) - 1, plen = path.len;
	const char *q = memchr(path.p, '?', plen);
	if (q)
		plen = (size_t)(q - path.p);
	if (x->route->cache.any_temperature || cx->canon_temp == 1)
		return 1;
	return cx->canon_temp == 0 && plen >= n && memcmp(path.p + plen - n, emb, n) == 0;
}

/* A stale-while-revalidate hit: the request the forward stage wrote (with the stored
 * response's validators) goes to the backend behind the client's back, to fill anew. */
static void start_refresh(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	struct cache_store *s = store_of(x);
	struct http_head h;
	char key[CACHE_KEY_MAX];
	long klen = -1;
	cx->swr = 0;
	if (parse_uphead(x, &h) == 0)
		klen = key_build(key, sizeof(key), x, h.host, h.path);
	struct cache_obj *fill =
	    klen > 0 ? cache_fill_begin(s, key, (size_t)klen, cache_key_hash(key, (size_t)klen))
		     : NULL;
	if (fill) {
		fill_ctx(x, wall_now());
		if (refresh_start(x->w, x->pool, x->uphead, fill, cx->cobj, &cx->cfx) == 0)
			x->uphead = NULL; /* the refresh's now */
		else
			cache_fill_end(s, fill, 0);
		cache_obj_put(s, fill);
		if (!x->uphead)
			return;
	}
	atomic_flag_clear(&cx->cobj->refreshing); /* none started: a later hit tries */
}

enum run caching_stage_serve(struct exchange *x)
{
	if (!xhooks_in(x, &caching_hook))
		return RUN_AGAIN; /* (what a zeroed context says: no object, no body to key) */
	struct caching_x *cx = caching_ctx(x);
	if (x->reqbody.cache_body) {
		x->reqbody.cache_body = 0;
		struct http_head head, *h = &head;
		struct cache_control rq;
		char key[CACHE_KEY_MAX];
		if (parse_uphead(x, h) < 0 || !deterministic(x, h->path)) {
			cx->cstatus = CS_BYPASS;
			return RUN_AGAIN;
		}
		cache_control_parse(h, 1, &rq);
		long klen = key_build(key, sizeof(key), x, h->host, h->path);
		if (klen < 0) {
			cx->cstatus = CS_BYPASS;
			return RUN_AGAIN;
		}
		klen = cache_key_add_body(key, sizeof(key), (size_t)klen, cx->canon);
		if (klen < 0) {
			cx->cstatus = CS_BYPASS;
			return RUN_AGAIN;
		}
		void *conn = x->conn;
		const struct exchange_codec_ops *codec = x->codec;
		enum run r = look_up(x, key, (size_t)klen, h, &rq, !rq.no_store);
		if (!exchange_goes_on(r, conn, codec, x)) /* (only-if-cached: answered) */
			return r;
		if (cx->cobj && cx->hit_kind != HIT_FULL) /* no conditionals on a POST */
			cx->hit_kind = HIT_FULL, cx->hit_pos = 0, cx->hit_end = UINT64_MAX;
	}
	if (!cx->cobj)
		return RUN_AGAIN;
	if (cx->swr)
		start_refresh(x);
	return x->codec->serve(x);
}

/* --- the response from the backend ------------------------------------------------ */

static const struct xkeep caching_keep;

/* Drop the fill (it will not complete): waiters go on to the backend themselves. */
static void fill_fail(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	if (!cx->cfill)
		return;
	cache_fill_end(store_of(x), cx->cfill, 0);
	cache_obj_put(store_of(x), cx->cfill);
	cx->cfill = NULL;
}

/* Unsafe method answered without error: what its target (and the Location and
 * Content-Location of the same host) had stored goes (RFC 9111 4.4). */
static void invalidate(struct exchange *x, const struct http_head *resp)
{
	char key[CACHE_KEY_MAX];
	struct http_head rh;
	if (parse_uphead(x, &rh) < 0)
		return;
	long n = key_build(key, sizeof(key), x, rh.host, rh.path);
	if (n > 0)
		cache_invalidate(store_of(x), key, (size_t)n);
	static const char *const fields[] = {"location", "content-location"};
	for (size_t i = 0; i < 2; i++) {
		const struct http_header *f = http_find_header(resp, fields[i]);
		if (!f || !f->value.len)
			continue;
		struct http_str target = f->value;
		if (target.p[0] != '/') { /* absolute: only on the same host */
			const char *p = memchr(target.p, ':', target.len);
			if (!p || (size_t)(p - target.p) + 3 > target.len || p[1] != '/' ||
			    p[2] != '/')
				continue;
			const char *auth = p + 3, *end = target.p + target.len;
			const char *slash = memchr(auth, '/', (size_t)(end - auth));
			size_t alen = slash ? (size_t)(slash - auth) : (size_t)(end - auth);
			if (alen != rh.host.len || strncasecmp(auth, rh.host.p, alen) != 0)
				continue;
			target = slash ? (struct http_str){slash, (uint32_t)(end - slash)}
				       : (struct http_str){"/", 1};
		}
		/* keyed as a request for it would be: in its normal form (http/target.h) */
		char norm[CACHE_KEY_MAX];
		size_t tlen = target.len;
		const char *why;
		if (tlen > sizeof(norm))
			continue;
		memcpy(norm, target.p, tlen);
		if (http_target_normalize(norm, &tlen, HTTP_TARGET_NORMALIZE, 0, &why) < 0)
			continue; /* a request for it would be refused: nothing is stored */
		target = (struct http_str){norm, (uint32_t)tlen};
		if ((n = key_build(key, sizeof(key), x, rh.host, target)) > 0)
			cache_invalidate(store_of(x), key, (size_t)n);
	}
}

/* A 304 answered the revalidation: the stored response, its head refreshed, answers. */
static int revalidated(struct exchange *x, const struct http_head *h)
{
	struct caching_x *cx = caching_ctx(x);
	struct cache_obj *old = cx->cstale;
	if (cx->cstatus != CS_REQUEST)
		cx->cstatus = CS_REVAL;
	cx->cstale = NULL;
	cx->cobj = old;
	cx->hit_kind = cx->hit_cond ? HIT_304 : x->meth == HTTP_HEAD ? HIT_HEAD : HIT_FULL;
	cx->hit_pos = 0;
	cx->hit_end = cache_obj_body_len(old);
	if (!cx->cfill)
		return 1;
	struct cache_obj *o = cx->cfill;
	cx->cfill = NULL;
	if (cache_fill_304(&cx->cfx, o, old, h) < 0) {
		cache_obj_put(store_of(x), o); /* answered from the old copy, not refreshed */
		return 1;
	}
	cache_obj_put(store_of(x), old);
	cx->cobj = o; /* the refreshed copy answers */
	cx->cstored = 1;
	return 1;
}

/* The origin failed: the stale copy answers if stale-if-error (the response's, the
 * request's or the route's) allows it. 1 when it does (cx->cobj). */
static int serve_stale(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	struct http_head req;
	struct cache_control rq;
	if (parse_uphead(x, &req) == 0)
		cache_control_parse(&req, 1, &rq);
	else
		control_none(&rq);
	if (!cache_stale_if_error_ok(&cx->cstale->times, &rq, wall_now()))
		return 0;
	fill_fail(x);
	cx->cobj = cx->cstale;
	cx->cstale = NULL;
	cx->cstatus = CS_STALE_ERR;
	cx->hit_kind = x->meth == HTTP_HEAD ? HIT_HEAD : HIT_FULL;
	cx->hit_pos = 0;
	cx->hit_end = cache_obj_body_len(cx->cobj);
	return 1;
}

int caching_response_head(struct exchange *x, const struct http_head *h)
{
	if (!xhooks_in(x, &caching_hook))
		return 0; /* (what a zeroed context says: nothing to fill, revalidate or drop) */
	struct caching_x *cx = caching_ctx(x);
	if (!cx->cache_inval && !cx->cfill && !cx->cstale)
		return 0;
	struct http_head req;
	int have_req = parse_uphead(x, &req) == 0;
	if (cx->cache_inval && h->status < 400)
		invalidate(x, h);
	if (cx->cstale && h->status == 304)
		return revalidated(x, h);
	if (cx->cstale && h->status >= 500 && serve_stale(x))
		return 1;
	if (cx->cfill && (!have_req || h->status == 304 || h->status == 206)) {
		cx->cwhy = h->status == 304 ? "304" : h->status == 206 ? "206" : "request head";
		fill_fail(x);
	}
	if (cx->cfill && cache_fill_start(&cx->cfx, cx->cfill, h, &req, &cx->cwhy)) {
		cx->cstored = 1;
		xhooks_want_body(x, &caching_hook); /* its bytes go into the fill */
		if (h->framing != HTTP_BODY_NONE) { /* ... and the client may read them there */
			cache_obj_get(cx->cfill);
			cx->cfeed = cx->cfill;
			xhooks_keep_body(x, &caching_keep);
		}
	} else if (cx->cfill) {
		cache_obj_put(store_of(x), cx->cfill);
		cx->cfill = NULL;
	}
	return 0;
}

/* The resp_body hook: body bytes p[0..n) as they are scanned go into the fill. Those it took
 * the codec may let go (caching_keep); should it fail, the rest of them is the codec's again
 * from where the fill stopped. */
static void caching_response_body(struct exchange *x, const char *p, size_t n)
{
	struct caching_x *cx = caching_ctx(x);
	if (!cx->cfill)
		return;
	int err = cache_fill_bytes(&cx->cfx, cx->cfill, p, n);
	cx->ctaken += cx->cfx.took;
	if (err) {
		cx->cwhy = err == -EFBIG ? "too large" : "body";
		cx->cstored = 0;
		cx->cresume = cx->cfx.at;
		cx->cstopped = 1;
		fill_fail(x);
	}
}

/* --- the fill as the client's source (xhooks.h) ------------------------------------------ */

static size_t keep_taken(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	size_t k = cx->ctaken;
	cx->ctaken = 0;
	return k;
}

static uint64_t keep_kept(const struct exchange *x, int *state)
{
	const struct caching_x *cx = caching_peek(x);
	/* the state first: a fill that has ended has all its bytes, but bytes read before its
	 * end may be fewer than it ended with */
	enum cache_fill_state st = cache_obj_state(cx->cfeed);
	*state = cx->cstopped || (st != CACHE_FILLING && st != CACHE_COMPLETE) ? -1
		 : st == CACHE_COMPLETE					       ? 0
									       : 1;
	return cache_obj_body_len(cx->cfeed);
}

static int keep_iov(const struct exchange *x, uint64_t from, uint64_t to, struct iovec *iov,
		    int max)
{
	return cache_obj_iov(caching_peek(x)->cfeed, from, to, iov, max);
}

static const struct http_chunked *keep_resume(const struct exchange *x)
{
	const struct caching_x *cx = caching_peek(x);
	return cx->cstopped ? &cx->cresume : &cx->cfx.ch;
}

static const struct xkeep caching_keep = {
    .taken = keep_taken,
    .kept = keep_kept,
    .iov = keep_iov,
    .resume = keep_resume,
};

/* The exchange ends with its fill under way, the backend's connection sound: the rest of the
 * response goes into the fill without the client (refresh.h), on the same connection and
 * slot. 1 when it does. */
static int fill_go_on(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	struct upconn *up;
	struct pool_rt *pool;
	struct backend *be;
	if (!cx->cfill || !cx->cstored || !x->resp_head || x->resp.done || x->cut_why ||
	    x->up_stalled) /* (a stalled backend: the fill fails, its waiters go on without) */
		return 0;
	int reusable = x->att->reusable;
	if (exchange_take_upstream(x, &up, &pool, &be) < 0)
		return 0;
	/* the bytes scanned and not relayed are in the fill already */
	struct http_body body = x->resp;
	if (body.ready)
		buf_consume(up->in, body.ready);
	body.ready = 0;
	if (refresh_adopt(x->w, pool, be, up, reusable, &body, cx->cfill, &cx->cfx) < 0)
		return 0; /* (it let them go) */
	cache_obj_put(store_of(x), cx->cfill);
	cx->cfill = NULL;
	return 1;
}

/* The resp_done hook: the response is whole, so is the fill. */
static void caching_response_done(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	if (!cx->cfill)
		return;
	cache_fill_end(store_of(x), cx->cfill, 1);
	cache_obj_put(store_of(x), cx->cfill);
	cx->cfill = NULL;
}

int caching_stale_on_error(struct exchange *x, int status)
{
	const struct caching_x *cx = caching_peek(x);
	if (!cx->cstale || status < 500 || x->head || x->resp_head)
		return 0;
	return serve_stale(x);
}

/* --- what the answers say ------------------------------------------------------------ */

static int put_status(const struct exchange *x, char *out, size_t cap, int64_t ttl, int has_ttl)
{
	const struct caching_x *cx = caching_peek(x);
	static const char *const fwd[] = {
	    [CS_COLLAPSED] = "miss", [CS_MISS] = "miss",     [CS_REVAL] = "stale",
	    [CS_BYPASS] = "bypass",  [CS_METHOD] = "method", [CS_REQUEST] = "request",
	    [CS_PASS] = "uri-miss",
	};
	int n;
	switch (cx->cstatus) {
	case CS_NONE:
		return 0;
	case CS_HIT:
	case CS_HIT_STALE:
	case CS_STALE_ERR: { /* per hit: no snprintf */
		static const char hit[] = "Cache-Status: accelnet; hit; ttl=";
		static const char sie[] = "; detail=stale-if-error";
		if (cap < sizeof(hit) + DEC_U64_MAX + sizeof(sie) + 3)
			return -1;
		memcpy(out, hit, sizeof(hit) - 1);
		size_t k = sizeof(hit) - 1;
		if (ttl < 0)
			out[k++] = '-';
		k += dec_u64(out + k, ttl < 0 ? (uint64_t)-ttl : (uint64_t)ttl);
		if (cx->cstatus == CS_STALE_ERR) {
			memcpy(out + k, sie, sizeof(sie) - 1);
			k += sizeof(sie) - 1;
		}
		memcpy(out + k, "\r\n", 2);
		return (int)k + 2;
	}
	default:
		n = snprintf(
		    out, cap, "Cache-Status: accelnet; fwd=%s%s%s%s%s%s\r\n", fwd[cx->cstatus],
		    (cx->cstatus == CS_REVAL || cx->cstatus == CS_REQUEST) && cx->cobj
			? "; fwd-status=304"
			: "",
		    cx->cstatus == CS_COLLAPSED ? "; collapsed" : "", cx->cstored ? "; stored" : "",
		    cx->cwhy ? "; detail=" : "", cx->cwhy ? "\"" : "");
		if (n > 0 && cx->cwhy && (size_t)n < cap) {
			n -= 2; /* after the opening quote: the reason, quote, CRLF */
			int m = snprintf(out + n, cap - (size_t)n, "%s\"\r\n", cx->cwhy);
			n = m < 0 ? -1 : n + m;
		}
		(void)has_ttl;
		break;
	}
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int caching_status_lines(const struct exchange *x, char *out, size_t cap)
{
	const struct caching_x *cx = caching_peek(x);
	if (!x->w->conf->cache.status_header || cx->cstatus == CS_NONE)
		return 0;
	return put_status(x, out, cap, 0, 0);
}

int caching_hit_lines(const struct exchange *x, char *out, size_t cap)
{
	const struct caching_x *cx = caching_peek(x);
	const struct cache_obj *o = cx->cobj;
	int64_t age = cache_current_age(&o->times, wall_now());
	if (cap < 7 + DEC_U64_MAX)
		return -1;
	memcpy(out, "Age: ", 5);
	int n = 5 + (int)dec_u64(out + 5, age < 0 ? 0 : (uint64_t)age);
	memcpy(out + n, "\r\n", 2);
	n += 2;
	if (!x->w->conf->cache.status_header)
		return n;
	int m = put_status(x, out + n, cap - (size_t)n, o->times.lifetime - age, 1);
	return m < 0 ? -1 : n + m;
}

/* --- waiting on fills ---------------------------------------------------------------- */

/* From the filling thread (the object's lock held): into the owner's inbox, its loop woken. */
static void notify(struct cache_wait *cw)
{
	struct caching_x *cx = container_of(cw, struct caching_x, cwait);
	struct worker *w = xhooks_exchange_of(cx, caching_ctx_off)->w;
	pthread_mutex_lock(&w->cache_inbox.lock);
	int first = list_empty(&w->cache_inbox.ready);
	list_push_back(&w->cache_inbox.ready, &cw->link);
	cx->cinboxed = 1;
	pthread_mutex_unlock(&w->cache_inbox.lock);
	if (first)
		loop_wake(w->loop);
}

int caching_wait(struct exchange *x, uint64_t have)
{
	struct caching_x *cx = caching_ctx(x);
	cx->cwait.notify = notify;
	return cache_obj_wait(cx->cobj, &cx->cwait, have);
}

/* Take <x> off its wait, wherever it is. */
static void unwait(struct exchange *x)
{
	struct caching_x *cx = caching_ctx(x);
	struct worker *w = x->w;
	cache_obj_unwait(cx->cobj, &cx->cwait); /* listed: off the list; notified: in the inbox */
	pthread_mutex_lock(&w->cache_inbox.lock);
	if (cx->cinboxed) {
		list_del(&w->cache_inbox.ready, &cx->cwait.link);
		cx->cinboxed = 0;
	}
	pthread_mutex_unlock(&w->cache_inbox.lock);
}

void caching_take_ready(struct worker *w)
{
	for (;;) {
		pthread_mutex_lock(&w->cache_inbox.lock);
		struct list_node *n = list_pop_front(&w->cache_inbox.ready);
		struct exchange *x = NULL;
		struct caching_x *cx = NULL;
		if (n) {
			cx = container_of(n, struct caching_x, cwait.link);
			x = xhooks_exchange_of(cx, caching_ctx_off);
			cx->cinboxed = 0;
		}
		pthread_mutex_unlock(&w->cache_inbox.lock);
		if (!x)
			return;
		cx->cwait.waiting = CACHE_WAIT_IDLE; /* its wake is taken: it may wait again */
		x->codec->wake(x->conn);
	}
}

_Static_assert(CS_PASS == CACHE_RESULTS, "a series for every Cache-Status but none");

/* The end hook: let go of what the exchange holds of the cache (a fill not complete fails)
 * and count what the cache did for it. */
static void caching_end(struct exchange *x, uint64_t now_ns)
{
	(void)now_ns;
	struct caching_x *cx = caching_ctx(x);
	struct cache_store *s = store_of(x);
	if (!s)
		return;
	if (cx->cstatus != CS_NONE && x->route)
		metrics_add(
		    x->w->shard, PM_ROUTE_CACHE,
		    (size_t)(x->route - x->w->conf->routes) * CACHE_RESULTS + cx->cstatus - 1, 1);
	if (cx->cobj) {
		unwait(x);
		cache_obj_put(s, cx->cobj);
	}
	if (cx->cstale)
		cache_obj_put(s, cx->cstale);
	if (cx->cfeed)
		cache_obj_put(s, cx->cfeed);
	cx->cobj = cx->cstale = cx->cfeed = NULL;
	if (!fill_go_on(x))
		fill_fail(x);
}

void caching_give_up(struct exchange *x, const char *why)
{
	struct caching_x *cx = caching_ctx(x);
	unwait(x);
	cache_obj_put(store_of(x), cx->cobj);
	cx->cobj = NULL;
	cx->cstatus = CS_MISS;
	cx->cwhy = why;
}

int caching_vary_ok(const struct exchange *x)
{
	const struct caching_x *cx = caching_peek(x);
	const struct cache_obj *o = cx->cobj;
	struct http_head h;
	char values[1024];
	if (!o->vary)
		return 1;
	if (parse_uphead(x, &h) < 0)
		return 0;
	struct vary_req vr = {x, &h, 0};
	long n = vary_of_request(&vr, o->vary, o->vary_len, values, sizeof(values));
	return n >= 0 && (size_t)n == o->vary_values_len &&
	       memcmp(values, o->vary_values, (size_t)n) == 0;
}

const struct cache_obj *caching_answers(const struct exchange *x)
{
	return caching_peek(x)->cobj;
}

int caching_hit_complete(const struct exchange *x)
{
	const struct caching_x *cx = caching_peek(x);
	return cx->cobj && cache_obj_state(cx->cobj) == CACHE_COMPLETE && !cx->swr;
}

int caching_hit_waiting(const struct exchange *x, uint64_t *until)
{
	const struct caching_x *cx = caching_peek(x);
	if (until)
		*until = cx->hit_wait_until;
	return cx->cobj && !cx->hit_started;
}

unsigned caching_said(const struct exchange *x)
{
	return caching_peek(x)->cstatus;
}

unsigned caching_forward_fields(const struct exchange *x, struct rewrite_field *f, char *etag,
				char *lm, size_t cap)
{
	const struct caching_x *cx = caching_peek(x);
	const struct cache_obj *o = cx->cstale ? cx->cstale : cx->swr ? cx->cobj : NULL;
	if (!cx->cfill && !cx->cstale && !cx->swr)
		return 0;
	etag[0] = lm[0] = '\0';
	if (o && o->etag_len && o->etag_len < cap)
		snprintf(etag, cap, "%.*s", (int)o->etag_len, o->head + o->etag_off);
	if (o && o->lm_len && o->lm_len < cap)
		snprintf(lm, cap, "%.*s", (int)o->lm_len, o->head + o->lm_off);
	f[0] = (struct rewrite_field){"If-None-Match", etag[0] ? etag : NULL};
	f[1] = (struct rewrite_field){"If-Modified-Since", lm[0] ? lm : NULL};
	f[2] = (struct rewrite_field){"Range", NULL};
	f[3] = (struct rewrite_field){"If-Range", NULL};
	return 4;
}

const struct xhook caching_hook = {
    .name = "cache",
    .ctx_size = sizeof(struct caching_x),
    .ctx_off = &caching_ctx_off,
    .bit = &caching_bit,
    .req_body = caching_note_body,
    .resp_body = caching_response_body,
    .resp_done = caching_response_done,
    .end = caching_end,
};
