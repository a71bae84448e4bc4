/*
 * admin.c - /status and /metrics, written with open_memstream into one response body.
 *
 * The endpoint is bounded like any server facing clients (http/server.h): at most
 * ADMIN_MAX_CONNS connections, timeouts.header_ms for a request to arrive, timeouts.idle_ms
 * for an idle connection or an unread answer. With admin.token_file, every request must
 * carry "Authorization: Bearer TOKEN". Only the token's SHA-256 is kept, compared in
 * constant time (equal lengths, so the token's length does not leak either); the token
 * itself is wiped as soon as it is hashed, and neither is ever logged.
 */
#include "proxy/admin.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/secret.h"
#include "http/server.h"

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
#define ADMIN_MAX_BODY 16384 /* nothing here reads a body */
#define TOKEN_MAX 4096

struct admin {
	struct hsrv *srv;
	struct runtime *rt;
	int has_token;
	unsigned char token_sha[32]; /* SHA-256 of the token; wiped at stop */
};

static const char *const class_names[6] = {"aborted", "1xx", "2xx", "3xx", "4xx", "5xx"};

#define LOAD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

/* {"count":N,"p50":MS,"p99":MS} of a histogram (bucket bounds; -1: beyond the last). */
static void write_summary(FILE *f, const char *name, const struct hist *h)
{
	fprintf(f, "\"%s\":{\"count\":%llu,\"p50\":%g,\"p99\":%g}", name,
		(unsigned long long)hist_total(h), hist_quantile_ms(h, 0.5),
		hist_quantile_ms(h, 0.99));
}

static void write_status(FILE *f, struct runtime *rt)
{
	uint64_t now = clock_now_ms();
	fprintf(f, "{\"pools\":[");
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		fprintf(f,
			"%s{\"name\":\"%s\",\"balance\":\"%s\",\"unavailable\":%llu,"
			"\"retries_denied\":%llu,\"spilled_in\":%llu,"
			"\"queue\":{\"discipline\":\"%s\",\"length\":%u,\"enqueued\":%llu,"
			"\"granted\":%llu,\"timeouts\":%llu,\"overflows\":%llu,",
			i ? "," : "", p->conf->name, p->conf->balance->name, LOAD(p->unavailable),
			LOAD(p->retries_denied), LOAD(p->spilled_in),
			p->conf->queue_discipline->name, pool_queue_len(&p->queue),
			LOAD(p->queue.enqueued), LOAD(p->queue.granted), LOAD(p->queue.timeouts),
			LOAD(p->queue.overflows));
		write_summary(f, "wait_ms", &p->queue_wait);
		fprintf(f, "},\"backends\":[");
		for (size_t j = 0; j < p->nbackends; j++) {
			struct backend *b = &p->backends[j];
			fprintf(f,
				"%s{\"address\":\"%s\",\"weight\":%u,\"up\":%s,\"eligible\":%s,"
				"\"ejected\":%s,\"inflight\":%llu,\"max_concurrency\":%u,"
				"\"latency_ms\":%.3f,\"requests\":%llu,\"connect_failures\":%llu,"
				"\"retries\":%llu,\"ejections\":%llu,\"reported_load\":%llu,"
				"\"hedged\":%llu,\"hedge_wins\":%llu,",
				j ? "," : "", b->name, b->conf->weight,
				atomic_load(&b->up) ? "true" : "false",
				backend_eligible(b, now) ? "true" : "false",
				atomic_load(&b->up) && !backend_usable(b, now) ? "true" : "false",
				LOAD(b->inflight), b->conf->max_concurrency,
				backend_latency_us(b, now) / 1000.0, LOAD(b->requests),
				LOAD(b->connect_failures), LOAD(b->retries), LOAD(b->ejections),
				LOAD(b->reported_load), LOAD(b->hedged), LOAD(b->hedge_wins));
			write_summary(f, "ttfb_ms", &b->ttfb);
			fputc(',', f);
			write_summary(f, "gap_ms", &b->gap);
			fprintf(f, ",\"responses\":{");
			for (int k = 0; k < 6; k++)
				fprintf(f, "%s\"%s\":%llu", k ? "," : "", class_names[k],
					LOAD(b->responses[k]));
			fprintf(f, "}}");
		}
		fprintf(f, "]}");
	}
	fprintf(f, "]}\n");
}

static void help(FILE *f, const char *name, const char *type, const char *text)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* One Prometheus histogram series: cumulative buckets, sum and count, in seconds. */
static void write_hist(FILE *f, const char *name, const char *labels, const struct hist *h)
{
	unsigned long long cum = 0;
	for (size_t i = 0; i < HIST_BUCKETS; i++) {
		cum += LOAD(h->count[i]);
		if (i < HIST_BUCKETS - 1)
			fprintf(f, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels,
				hist_bounds_ms[i] / 1000.0, cum);
		else
			fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, cum);
	}
	fprintf(f, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, labels, LOAD(h->sum_us) / 1e6,
		name, labels, cum);
}

enum {
	BM_UP,
	BM_INFLIGHT,
	BM_REQUESTS,
	BM_CONNECT_FAILURES,
	BM_RETRIES,
	BM_EJECTIONS,
	BM_HEDGED,
	BM_HEDGE_WINS,
	BM_LATENCY,
	BM_COUNT
};

static const struct {
	const char *name, *type, *help;
} backend_metrics[BM_COUNT] = {
    [BM_UP] = {"accelnet_backend_up", "gauge", "1 if active health checks find the backend up"},
    [BM_INFLIGHT] = {"accelnet_backend_inflight", "gauge", "requests in flight to the backend"},
    [BM_REQUESTS] = {"accelnet_backend_requests_total", "counter", "requests sent to the backend"},
    [BM_CONNECT_FAILURES] = {"accelnet_backend_connect_failures_total", "counter",
			     "failed connects"},
    [BM_RETRIES] = {"accelnet_backend_retries_total", "counter", "requests retried elsewhere"},
    [BM_EJECTIONS] = {"accelnet_backend_ejections_total", "counter",
		      "times outlier detection took the backend out"},
    [BM_HEDGED] = {"accelnet_backend_hedged_total", "counter",
		   "requests on this backend that were also sent to another (hedging)"},
    [BM_HEDGE_WINS] = {"accelnet_backend_hedge_wins_total", "counter",
		       "hedged copies on this backend that answered first"},
    [BM_LATENCY] = {"accelnet_backend_latency_seconds", "gauge",
		    "peak-EWMA time to first byte, as balancing sees it"},
};

static double backend_value(const struct backend *b, int k, uint64_t now)
{
	switch (k) {
	case BM_UP:
		return atomic_load(&b->up);
	case BM_INFLIGHT:
		return LOAD(b->inflight);
	case BM_REQUESTS:
		return LOAD(b->requests);
	case BM_CONNECT_FAILURES:
		return LOAD(b->connect_failures);
	case BM_RETRIES:
		return LOAD(b->retries);
	case BM_EJECTIONS:
		return LOAD(b->ejections);
	case BM_HEDGED:
		return LOAD(b->hedged);
	case BM_HEDGE_WINS:
		return LOAD(b->hedge_wins);
	default:
		return backend_latency_us(b, now) / 1e6;
	}
}

static void write_metrics(FILE *f, struct runtime *rt)
{
	uint64_t now = clock_now_ms();
	char labels[256];
	for (int k = 0; k < BM_COUNT; k++) {
		help(f, backend_metrics[k].name, backend_metrics[k].type, backend_metrics[k].help);
		for (size_t i = 0; i < rt->npools; i++) {
			struct pool_rt *p = &rt->pools[i];
			for (size_t j = 0; j < p->nbackends; j++)
				fprintf(f, "%s{pool=\"%s\",backend=\"%s\"} %.9g\n",
					backend_metrics[k].name, p->conf->name, p->backends[j].name,
					backend_value(&p->backends[j], k, now));
		}
	}
	help(f, "accelnet_backend_responses_total", "counter", "responses by status class");
	for (size_t i = 0; i < rt->npools; i++)
		for (size_t j = 0; j < rt->pools[i].nbackends; j++) {
			struct backend *b = &rt->pools[i].backends[j];
			for (int c = 0; c < 6; c++)
				fprintf(
				    f,
				    "accelnet_backend_responses_total{pool=\"%s\",backend=\"%s\","
				    "class=\"%s\"} %llu\n",
				    rt->pools[i].conf->name, b->name, class_names[c],
				    LOAD(b->responses[c]));
		}
	static const struct {
		const char *name, *help;
		size_t off;
	} hists[] = {
	    {"accelnet_backend_ttfb_seconds", "request sent to response head (time to first token)",
	     offsetof(struct backend, ttfb)},
	    {"accelnet_backend_gap_seconds", "time between reads of a streamed response body",
	     offsetof(struct backend, gap)},
	};
	for (size_t k = 0; k < sizeof(hists) / sizeof(hists[0]); k++) {
		help(f, hists[k].name, "histogram", hists[k].help);
		for (size_t i = 0; i < rt->npools; i++)
			for (size_t j = 0; j < rt->pools[i].nbackends; j++) {
				struct backend *b = &rt->pools[i].backends[j];
				snprintf(labels, sizeof(labels), "pool=\"%s\",backend=\"%s\"",
					 rt->pools[i].conf->name, b->name);
				write_hist(f, hists[k].name, labels,
					   (const struct hist *)(const void *)((const char *)b +
									       hists[k].off));
			}
	}
	help(f, "accelnet_pool_queue_wait_seconds", "histogram",
	     "time from queueing to a granted backend slot");
	for (size_t i = 0; i < rt->npools; i++) {
		snprintf(labels, sizeof(labels), "pool=\"%s\"", rt->pools[i].conf->name);
		write_hist(f, "accelnet_pool_queue_wait_seconds", labels, &rt->pools[i].queue_wait);
	}
	help(f, "accelnet_pool_queue_length", "gauge", "requests waiting for a backend slot");
	for (size_t i = 0; i < rt->npools; i++)
		fprintf(f, "accelnet_pool_queue_length{pool=\"%s\"} %u\n", rt->pools[i].conf->name,
			pool_queue_len(&rt->pools[i].queue));
	static const struct {
		const char *name, *help;
	} counters[] = {
	    {"accelnet_pool_unavailable_total",
	     "requests turned away with no backend to serve them"},
	    {"accelnet_pool_retries_denied_total", "retries the retry budget turned down"},
	    {"accelnet_pool_spilled_in_total", "requests moved here by a route's spillover"},
	    {"accelnet_pool_queue_enqueued_total", "queue enqueued"},
	    {"accelnet_pool_queue_granted_total", "queue granted"},
	    {"accelnet_pool_queue_timeouts_total", "queue timeouts"},
	    {"accelnet_pool_queue_overflows_total", "queue overflows"},
	};
	for (size_t k = 0; k < sizeof(counters) / sizeof(counters[0]); k++) {
		help(f, counters[k].name, "counter", counters[k].help);
		for (size_t i = 0; i < rt->npools; i++) {
			struct pool_rt *p = &rt->pools[i];
			atomic_uint_fast64_t *v[] = {&p->unavailable,	 &p->retries_denied,
						     &p->spilled_in,	 &p->queue.enqueued,
						     &p->queue.granted,	 &p->queue.timeouts,
						     &p->queue.overflows};
			fprintf(f, "%s{pool=\"%s\"} %llu\n", counters[k].name, p->conf->name,
				LOAD(*v[k]));
		}
	}
}

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

static void admin_on_request(void *arg, struct hsrv_conn *c, const struct http_head *req,
			     const char *body, size_t body_len)
{
	struct admin *a = arg;
	char *text = NULL;
	size_t len = 0;
	(void)body;
	(void)body_len;
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
	int status = http_str_eq(req->path, "/status")	  ? 1
		     : http_str_eq(req->path, "/metrics") ? 2
							  : 0;
	if (!status || (req->meth != HTTP_GET && req->meth != HTTP_HEAD)) {
		static const char msg[] = "not found: try /status or /metrics\n";
		hsrv_respond(c, 404, "text/plain", "", msg, sizeof(msg) - 1);
		return;
	}
	FILE *f = open_memstream(&text, &len);
	if (!f) {
		hsrv_respond(c, 500, "text/plain", "", "out of memory\n", 14);
		return;
	}
	if (status == 1)
		write_status(f, a->rt);
	else
		write_metrics(f, a->rt);
	fclose(f);
	hsrv_respond(c, 200, status == 1 ? "application/json" : "text/plain; version=0.0.4", "",
		     text, len);
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
			snprintf(err, errlen, "admin.token_file %s: the token must be one line of "
				 "printable characters without spaces", path);
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

int admin_start(struct loop *loop, const struct conf *conf, struct runtime *rt,
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
	if (conf->admin_token_file &&
	    (rc = admin_load_token(a, conf->admin_token_file, err, errlen)) < 0)
		goto fail;
	if ((rc = hsrv_start(loop, &conf->admin.addr, &lim, admin_on_request, a, &a->srv)) < 0) {
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

void admin_stop(struct admin *a)
{
	if (!a)
		return;
	hsrv_stop(a->srv);
	OPENSSL_cleanse(a, sizeof(*a));
	free(a);
}
