/*
 * admin.c - /status, /metrics and the dashboard, written with open_memstream into one
 * response body.
 *
 * The documents come from the runtime's metrics registry (runtime/proxy_metric.c declares every
 * metric once; obs/json.c and obs/prom.c walk that one table): this file only serves them. The
 * dashboard's page, script and style sheet (obs/dashboard.h) are files embedded in the binary;
 * the page draws what it reads from /dashboard.json once a second.
 *
 * The endpoint is bounded like any server facing clients (http/server.h): at most
 * ADMIN_MAX_CONNS connections, timeouts.header_ms for a request to arrive, timeouts.idle_ms
 * for an idle connection or an unread answer. With admin.token_file, every request must
 * carry "Authorization: Bearer TOKEN", except the dashboard's files, which hold no data (a
 * browser opening a page cannot send the header; the page sends it to read the feed). Only the
 * token's SHA-256 is kept, compared in constant time (equal lengths, so the token's length does not
 * leak either); the token itself is wiped as soon as it is hashed, and neither is ever logged.
 * Without a token, only requests naming the listener by an IP address or localhost in Host are
 * answered: a name could be a web page's, pointed at 127.0.0.1 (DNS rebinding).
 *
 * GET /debug/requests (debugreq.h) asks every worker for a snapshot and answers once all
 * have given theirs, or after DEBUG_WAIT_MS with the silent ones named: the main loop polls
 * for the answers on a timer and never blocks.
 *
 * POST /cache/purge (uri=, prefix=, tag= or all=1, in the query or a form body: cache/purge.h
 * reads them and judges each object) unlinks objects from the response cache, on this thread:
 * the store's shards are locked one at a time, a round of at most a few dozen drops each, so
 * workers' hits wait at most for one round. It is the one admin request that changes state,
 * so it is POST only (405 otherwise), and without a token it is refused to browsers (a request
 * with Origin or Sec-Fetch-Site: any web page can make a browser POST a form to 127.0.0.1,
 * though it cannot read the answer); with the token, the Authorization header is what a page
 * cannot send.
 *
 * /api/ is the runtime admin API (adminapi.h): the same token, and without one the same
 * refusal of browsers for every call that is not a GET.
 *
 * GET /healthz and /readyz are the probes of a load balancer or Kubernetes, which carry no
 * token and may name the listener by any Host: they are answered before both checks. They
 * say only whether the process answers (/healthz: 200 "ok") and whether it should be sent
 * traffic (/readyz: 200 "ready", followed by the models whose tokenizer is degraded, or 503
 * saying why not: draining, a pool with fewer than probes.min_up backends up, a model whose
 * tokenizer is failing; proxy/probes.h). Which pools and models those are is told only to a
 * request that could read /status: with a token, one that carries it (a connection without
 * it is closed after one probe, as after a dashboard file). Once the process
 * drains to exit, the endpoint keeps listening (admin_set_draining) so probes hear the 503.
 */
#include "control/admin.h"
#include "cache/purge.h"
#include "cache/store.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/secret.h"
#include "http/server.h"
#include "net/sock.h"
#include "obs/dashboard.h"
#include "obs/json.h"
#include "obs/prom.h"
#include "control/adminapi.h"
#include "proxy/debugreq.h"
#include "proxy/probes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define ADMIN_MAX_CONNS 256
#define ADMIN_MAX_BODY 16384 /* a purge's form body at most */
#define TOKEN_MAX 4096
#define DEBUG_WAIT_MS 500 /* how long /debug/requests waits for the workers' snapshots */

struct admin {
	struct hsrv *srv;
	struct loop *loop;
	struct runtime *rt;
	struct debugreq_board *debug; /* /debug/requests, or NULL */
	int has_token;
	unsigned char token_sha[32]; /* SHA-256 of the token; wiped at stop */
	const char *tag_field;	     /* cache.tag_header */
	struct cache_purge purge;    /* the purge being answered (too large for the stack) */
	struct adminapi api;	     /* /api/: the runtime admin API */
	unsigned ready_min_up;	     /* probes.min_up */
	int draining;		     /* the process drains to exit: listen on until stopped */
};

static int sha256(const void *data, size_t len, unsigned char out[32])
{
	unsigned int n = 0;
	return EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) == 1 && n == 32 ? 0 : -EIO;
}

/* Does <req> carry "Authorization: Bearer TOKEN" with the configured token? */
static int admin_authorized(const struct admin *a, const struct http_head *req)
{
	if (!a->has_token)
		return 1;
	const struct http_header *h = http_find_header(req, "authorization");
	if (!h || h->value.len < 7 || strncasecmp(h->value.p, "Bearer ", 7) != 0)
		return 0;
	unsigned char got[32];
	int ok = sha256(h->value.p + 7, h->value.len - 7, got) == 0 &&
		 CRYPTO_memcmp(got, a->token_sha, sizeof(got)) == 0;
	OPENSSL_cleanse(got, sizeof(got));
	return ok;
}

/*
 * Does <req> name this listener as no other web site can make a browser name it: by an IP
 * address (any port) or localhost, or not at all (HTTP/1.0)? A page elsewhere can point a
 * name it owns at 127.0.0.1 (DNS rebinding) and then read this listener as its own origin;
 * without a token, that name in Host is all that tells such a request from the operator's.
 */
static int admin_host_is_address(const struct http_head *req)
{
	char host[INET6_ADDRSTRLEN];
	unsigned char addr[16];
	const char *p = req->host.p;
	size_t n = req->host.len, hlen;
	if (!n)
		return 1;
	if (p[0] == '[') { /* [v6]:port */
		const char *end = memchr(p, ']', n);
		hlen = end ? (size_t)(end - p) - 1 : sizeof(host);
		if (hlen >= sizeof(host))
			return 0;
		memcpy(host, p + 1, hlen);
		host[hlen] = '\0';
		return inet_pton(AF_INET6, host, addr) == 1;
	}
	const char *colon = memchr(p, ':', n);
	hlen = colon ? (size_t)(colon - p) : n;
	if (hlen == 9 && strncasecmp(p, "localhost", 9) == 0)
		return 1;
	if (hlen >= sizeof(host))
		return 0;
	memcpy(host, p, hlen);
	host[hlen] = '\0';
	return inet_pton(AF_INET, host, addr) == 1;
}

/*
 * Answer a GET or HEAD of one of the dashboard's files (/dashboard, /dashboard.js, ...): 1 if
 * <req> was one, 0 to go on. Served without the token: they hold no data. But a connection
 * without it is closed after the file, as after a 401: it holds none of the endpoint's few
 * connections for longer than one request.
 */
static int admin_serve_asset(const struct admin *a, struct hsrv_conn *c,
			     const struct http_head *req)
{
	const struct dashboard_asset *d = dashboard_find(req->path.p, req->path.len);
	if (!d || (req->meth != HTTP_GET && req->meth != HTTP_HEAD))
		return 0;
	if (!admin_authorized(a, req))
		hsrv_close_after(c);
	hsrv_respond(c, 200, d->type, dashboard_headers, (const char *)d->data, d->len);
	return 1;
}

/* --- GET /debug/requests --- */

struct debug_wait {
	struct admin *a;
	struct hsrv_conn *c;
	struct loop_timer timer;
	uint64_t deadline_ms;
};

static void debug_wait_end(void *arg)
{
	struct debug_wait *dw = arg;
	loop_timer_stop(dw->a->loop, &dw->timer);
	free(dw);
}

static void debug_on_timer(struct loop_timer *t)
{
	struct debug_wait *dw = container_of(t, struct debug_wait, timer);
	struct admin *a = dw->a;
	if (!debugreq_answered(a->debug) && loop_now(a->loop) < dw->deadline_ms) {
		loop_timer_set(a->loop, &dw->timer, loop_now(a->loop) + 1);
		return;
	}
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int rc = f ? debugreq_write(a->debug, f) : -ENOMEM;
	if (f)
		fclose(f);
	struct hsrv_conn *c = dw->c;
	hsrv_on_abort(c, NULL, NULL);
	free(dw);
	if (rc < 0)
		hsrv_respond(c, 500, "text/plain", "", "out of memory\n", 14);
	else
		hsrv_respond(c, 200, "application/json", "Cache-Control: no-store\r\n", text, len);
	free(text);
}

/* Ask the workers, and answer from a timer once they have (the request stays open). */
static void admin_debug_requests(struct admin *a, struct hsrv_conn *c)
{
	struct debug_wait *dw = calloc(1, sizeof(*dw));
	if (!dw) {
		hsrv_respond(c, 500, "text/plain", "", "out of memory\n", 14);
		return;
	}
	dw->a = a;
	dw->c = c;
	dw->timer.fn = debug_on_timer;
	dw->deadline_ms = loop_now(a->loop) + DEBUG_WAIT_MS;
	hsrv_on_abort(c, debug_wait_end, dw);
	debugreq_ask(a->debug);
	loop_timer_set(a->loop, &dw->timer, loop_now(a->loop) + 1);
}

void admin_serve_debug(struct admin *a, struct debugreq_board *b)
{
	a->debug = b;
}

/* --- POST /cache/purge --- */

/* Answer {"error": MSG} with <status> (and extra header lines <headers>). */
static void admin_json_error(struct hsrv_conn *c, int status, const char *headers, const char *msg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f) {
		hsrv_respond(c, 500, "text/plain", "", "out of memory\n", 14);
		return;
	}
	fputs("{\"error\":", f);
	json_write_string(f, msg);
	fputs("}\n", f);
	fclose(f);
	hsrv_respond(c, status, "application/json", headers, text, len);
	free(text);
}

/* Does <req> come from a web page, by what browsers add to what pages send? */
static int admin_from_browser(const struct http_head *req)
{
	return http_find_header(req, "origin") || http_find_header(req, "sec-fetch-site");
}

/* Is <req>'s body a form (application/x-www-form-urlencoded, any parameters)? */
static int admin_body_is_form(const struct http_head *req)
{
	static const char form[] = "application/x-www-form-urlencoded";
	const struct http_header *h = http_find_header(req, "content-type");
	size_t n = sizeof(form) - 1;
	return h && h->value.len >= n && strncasecmp(h->value.p, form, n) == 0 &&
	       (h->value.len == n || h->value.p[n] == ';' || h->value.p[n] == ' ');
}

static void admin_log_purge(const struct cache_purge *p, size_t n)
{
	switch (p->kind) {
	case CACHE_PURGE_URI:
	case CACHE_PURGE_PREFIX:
		log_info("admin: purge by %s (host %.*s, target %.*s): purged %zu",
			 p->kind == CACHE_PURGE_URI ? "uri" : "prefix", (int)p->host_len, p->host,
			 (int)p->target_len, p->target, n);
		break;
	case CACHE_PURGE_TAG:
		log_info("admin: purge by tag \"%.*s\" (field %s): purged %zu", (int)p->tag_len,
			 p->tag, p->field, n);
		break;
	case CACHE_PURGE_ALL:
		log_info("admin: purge of everything (all=1): purged %zu", n);
		break;
	}
}

/* POST /cache/purge?PARAMS (or PARAMS as a form body): unlink, answer {"purged": N}. */
static void admin_purge(struct admin *a, struct hsrv_conn *c, const struct http_head *req,
			const char *query, size_t qlen, const char *body, size_t body_len)
{
	struct cache_purge *p = &a->purge;
	char err[256], json[64];
	if (req->meth != HTTP_POST) {
		admin_json_error(c, 405, "Allow: POST\r\n",
				 "method not allowed: purge with POST /cache/purge?uri=URI "
				 "(or prefix=URI, tag=TAG, all=1)");
		return;
	}
	if (!a->has_token && admin_from_browser(req)) {
		hsrv_close_after(c);
		admin_json_error(c, 403, "",
				 "forbidden: without admin.token_file, a purge is refused to "
				 "browsers (this request has Origin or Sec-Fetch-Site); purge "
				 "with a tool such as curl, or set a token");
		return;
	}
	if (!a->rt->cache) {
		admin_json_error(c, 404, "",
				 "no response cache here: the configuration has no cache: section");
		return;
	}
	if (qlen && body_len) {
		admin_json_error(c, 400, "",
				 "give the parameters in the query or in a form body, not both");
		return;
	}
	if (body_len && !admin_body_is_form(req)) {
		admin_json_error(c, 400, "",
				 "a body must be a form (Content-Type: "
				 "application/x-www-form-urlencoded), or give the parameters in "
				 "the query");
		return;
	}
	int rc = body_len ? cache_purge_parse(p, body, body_len, err, sizeof(err))
			  : cache_purge_parse(p, query, qlen, err, sizeof(err));
	if (rc < 0) {
		admin_json_error(c, 400, "", err);
		return;
	}
	p->field = a->tag_field;
	p->field_len = strlen(a->tag_field);
	size_t n = cache_purge_match(a->rt->cache, cache_purge_pred, p);
	admin_log_purge(p, n);
	int len = snprintf(json, sizeof(json), "{\"purged\":%zu}\n", n);
	hsrv_respond(c, 200, "application/json", "Cache-Control: no-store\r\n", json, (size_t)len);
}

/* --- GET /healthz, /readyz --- */

/* Answer GET or HEAD /healthz or /readyz: 1 if <req> was one of them, 0 to go on. Without
 * the token (where one is set), the connection is closed after the answer. */
static int admin_serve_probe(const struct admin *a, struct hsrv_conn *c,
			     const struct http_head *req)
{
	static const char nocache[] = "Cache-Control: no-store\r\n";
	int ready = http_str_eq(req->path, "/readyz"), named;
	char why[1024];
	if (!ready && !http_str_eq(req->path, "/healthz"))
		return 0;
	/* without the token, one probe per connection, as for the dashboard's files */
	if (!(named = admin_authorized(a, req)))
		hsrv_close_after(c);
	if (req->meth != HTTP_GET && req->meth != HTTP_HEAD) {
		static const char msg[] = "method not allowed: probe with GET or HEAD\n";
		hsrv_respond(c, 405, "text/plain", "Allow: GET, HEAD\r\n", msg, sizeof(msg) - 1);
		return 1;
	}
	if (!ready) {
		hsrv_respond(c, 200, "text/plain", nocache, "ok\n", 3);
		return 1;
	}
	probes_ready_why(a->rt, a->ready_min_up, named, why, sizeof(why) - 64);
	if (!why[0]) { /* "ready", then the degraded models, a line each */
		memcpy(why, "ready\n", 6);
		probes_degraded(a->rt, named, why + 6, sizeof(why) - 6);
		hsrv_respond(c, 200, "text/plain", nocache, why, strlen(why));
		return 1;
	}
	if (!named && !atomic_load(&a->rt->stopping))
		strcat(why, " (send the admin token to see which)"); /* 36 bytes of the 64 */
	strcat(why, "\n");
	hsrv_respond(c, 503, "text/plain", nocache, why, strlen(why));
	return 1;
}

void admin_set_draining(struct admin *a)
{
	if (a)
		a->draining = 1;
}

static void admin_on_request(void *arg, struct hsrv_conn *c, const struct http_head *req,
			     const char *body, size_t body_len)
{
	struct admin *a = arg;
	char *text = NULL;
	size_t len = 0;
	if (admin_serve_probe(a, c, req))
		return;
	if (!a->has_token && !admin_host_is_address(req)) {
		static const char msg[] = "forbidden: without admin.token_file, name this listener "
					  "by its address or localhost in Host (a name could be a "
					  "web page's, pointed here)\n";
		hsrv_close_after(c);
		hsrv_respond(c, 403, "text/plain", "", msg, sizeof(msg) - 1);
		return;
	}
	if (admin_serve_asset(a, c, req))
		return;
	if (!admin_authorized(a, req)) {
		static const char msg[] = "unauthorized: send Authorization: Bearer TOKEN "
					  "(the token in admin.token_file)\n";
		/* and goodbye: a connection without the token neither holds one of the
		 * endpoint's few connections nor guesses again on it */
		hsrv_close_after(c);
		hsrv_respond(c, 401, "text/plain", "WWW-Authenticate: Bearer\r\n", msg,
			     sizeof(msg) - 1);
		return;
	}
	if (req->path.len >= 5 && memcmp(req->path.p, "/api/", 5) == 0) {
		if (req->meth != HTTP_GET && req->meth != HTTP_HEAD && !a->has_token &&
		    admin_from_browser(req)) {
			hsrv_close_after(c);
			admin_json_error(c, 403, "",
					 "forbidden: without admin.token_file, a change is refused "
					 "to browsers (this request has Origin or Sec-Fetch-Site); "
					 "use accelnet ctl or curl, or set a token");
			return;
		}
		adminapi_serve(&a->api, c, req, body, body_len);
		return;
	}
	if (a->debug && http_str_eq(req->path, "/debug/requests") && req->meth == HTTP_GET) {
		admin_debug_requests(a, c);
		return;
	}
	const char *q = memchr(req->path.p, '?', req->path.len);
	size_t plen = q ? (size_t)(q - req->path.p) : req->path.len;
	if (plen == 12 && memcmp(req->path.p, "/cache/purge", 12) == 0) {
		admin_purge(a, c, req, q ? q + 1 : "", q ? req->path.len - plen - 1 : 0, body,
			    body_len);
		return;
	}
	int status = http_str_eq(req->path, "/status")		 ? 1
		     : http_str_eq(req->path, "/metrics")	 ? 2
		     : http_str_eq(req->path, "/dashboard.json") ? 3
								 : 0;
	if (!status || (req->meth != HTTP_GET && req->meth != HTTP_HEAD)) {
		static const char msg[] = "not found: try /status, /metrics, /dashboard, "
					  "/healthz, /readyz, /debug/requests, POST /cache/purge "
					  "or /api/backends\n";
		hsrv_respond(c, 404, "text/plain", "", msg, sizeof(msg) - 1);
		return;
	}
	FILE *f = open_memstream(&text, &len);
	if (!f) {
		hsrv_respond(c, 500, "text/plain", "", "out of memory\n", 14);
		return;
	}
	if (status == 1)
		json_write_status(f, a->rt->metrics);
	else if (status == 2)
		prom_write(f, a->rt->metrics);
	else
		json_write_feed(f, a->rt->metrics);
	fclose(f);
	hsrv_respond(c, 200, status == 2 ? "text/plain; version=0.0.4" : "application/json",
		     status == 3 ? "Cache-Control: no-store\r\n" : "", text, len);
	free(text);
}

/*
 * Read the token from <path> into a->token_sha: one line of printable characters without
 * spaces (a final newline is allowed). 0, or -errno with <err> filled (never the token).
 */
static int admin_load_token(struct admin *a, const char *path, char *err, size_t errlen)
{
	uint8_t buf[TOKEN_MAX];
	size_t n = 0;
	const char *why = NULL;
	struct stat st;
	int rc = secret_load(path, buf, sizeof(buf), &n, &why);
	if (rc == -EINVAL) {
		snprintf(err, errlen, "admin.token_file %s: expected a token of 1 to %d characters",
			 path, TOKEN_MAX);
		goto fail;
	}
	if (rc < 0) {
		snprintf(err, errlen, "admin.token_file %s: %s", path, strerror(-rc));
		goto fail;
	}
	if (stat(path, &st) == 0 && (st.st_mode & 077))
		log_warn("admin.token_file %s can be read by other users (chmod 600 it)", path);
	rc = -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (buf[i] <= ' ' || buf[i] > '~') {
			snprintf(err, errlen,
				 "admin.token_file %s: the token must be one line of "
				 "printable characters without spaces",
				 path);
			goto fail;
		}
	if ((rc = sha256(buf, n, a->token_sha)) < 0) {
		snprintf(err, errlen, "admin.token_file %s: cannot hash the token", path);
		goto fail;
	}
	a->has_token = 1;
fail:
	OPENSSL_cleanse(buf, sizeof(buf));
	return rc;
}

void admin_set_reload(struct admin *a, adminapi_reload_fn fn, void *arg)
{
	a->api.reload = fn;
	a->api.reload_arg = arg;
}

int admin_start(struct loop *loop, const struct conf *conf, struct runtime *rt, int given,
		struct admin **out, char *err, size_t errlen)
{
	struct hsrv_limits lim = {
	    .max_conns = ADMIN_MAX_CONNS,
	    .header_ms = conf->timeouts.header_ms,
	    .idle_ms = conf->timeouts.idle_ms,
	    .max_body = ADMIN_MAX_BODY,
	};
	struct admin *a = calloc(1, sizeof(*a));
	int rc;
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	a->rt = rt;
	a->loop = loop;
	a->tag_field = conf->cache.tag_header ? conf->cache.tag_header : "Cache-Tag";
	a->ready_min_up = conf->probes.min_up;
	if (conf->admin_token_file &&
	    (rc = admin_load_token(a, conf->admin_token_file, err, errlen)) < 0)
		goto fail;
	a->api = (struct adminapi){
	    .rt = rt, .state_file = conf->admin_state_file, .tag_field = a->tag_field};
	rc = given >= 0 ? sock_dup(given) : 0;
	if (rc >= 0)
		rc = given >= 0
			 ? hsrv_start_fd(loop, rc, &lim, admin_on_request, a, &a->srv)
			 : hsrv_start(loop, &conf->admin.addr, &lim, admin_on_request, a, &a->srv);
	if (rc < 0) {
		snprintf(err, errlen, "cannot serve admin on %s: %s", conf->admin.address,
			 strerror(-rc));
		goto fail;
	}
	*out = a;
	return 0;
fail:
	OPENSSL_cleanse(a, sizeof(*a));
	free(a);
	return rc;
}

int admin_listen_fd(const struct admin *a)
{
	return hsrv_listen_fd(a->srv);
}

void admin_stop_listening(struct admin *a)
{
	if (a && !a->draining)
		hsrv_stop_listening(a->srv);
}

void admin_stop(struct admin *a)
{
	if (!a)
		return;
	hsrv_stop(a->srv);
	OPENSSL_cleanse(a, sizeof(*a));
	free(a);
}
