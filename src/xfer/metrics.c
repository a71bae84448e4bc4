/*
 * metrics.c - xfer serve's metrics table and its /metrics endpoint (see metrics.h).
 *
 * The counters themselves are the atomics of struct xfer_server (m_bytes, m_chunks, ...),
 * which the connection threads bump and `xfer get` reads for its report; the registry reads
 * them through each metric's read callback at scrape time (obs/metrics.h allows a counter's
 * value to come that way), and the two gauges (transfers and connections in progress) are
 * read live. A metric is added here, in one table, and nowhere else.
 */
#include "xfer/metrics.h"

#include "core/loop.h"
#include "http/server.h"
#include "net/addr.h"
#include "obs/metrics.h"
#include "obs/prom.h"
#include "xfer/receiver.h"
#include "xfer/server.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_POLL_MS 200 /* how often the thread looks at *stop */

struct xfer_metrics {
	struct xfer_server *s;
	volatile int *stop;
	struct loop *loop;
	struct hsrv *srv;
	struct loop_timer tick;
	struct metrics *reg;
	struct metric_space spaces[2];
	const char *link_names[XFER_LINKS_MAX];
	pthread_t th;
	int started;
};

enum xfer_metric_id {
	XM_RECEIVED_BYTES,
	XM_CHUNKS,
	XM_FILES,
	XM_BATCHES,
	XM_SESSIONS_TOTAL,
	XM_SESSIONS,
	XM_CONNS,
	XM_CONNS_TOTAL,
	XM_AUTH_FAIL,
	XM_ERRORS,
	XM_DUP_BYTES,
	XM_LINK_BYTES,
	XM_SLOW_FRAMES,
	XM_COUNT,
};

enum { SPACE_SERVER, SPACE_LINKS };

static double read_received(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_bytes);
}

static double read_chunks(const void *ctx, size_t i)
{
	const struct xfer_server *s = ctx;
	return (double)atomic_load(i == 0 ? &s->m_chunks : i == 1 ? &s->m_dup : &s->m_bad);
}

static double read_files(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_files);
}

static double read_batches(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_batches);
}

static double read_sessions_total(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_sessions);
}

static double read_sessions(const void *ctx, size_t i)
{
	(void)i;
	return (double)xfer_receiver_count((struct xfer_server *)ctx);
}

static double read_conns(const void *ctx, size_t i)
{
	(void)i;
	struct xfer_server *s = (struct xfer_server *)ctx;
	pthread_mutex_lock(&s->mu);
	unsigned n = s->conns;
	pthread_mutex_unlock(&s->mu);
	return n;
}

static double read_conns_total(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_conns_total);
}

static double read_auth_fail(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_auth_fail);
}

static double read_errors(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_errors);
}

static double read_dup_bytes(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_dup_bytes);
}

static double read_slow_frames(const void *ctx, size_t i)
{
	(void)i;
	return (double)atomic_load(&((const struct xfer_server *)ctx)->m_slow_frames);
}

static double read_link_bytes(const void *ctx, size_t i)
{
	return (double)atomic_load(&((const struct xfer_server *)ctx)->link_bytes[i]);
}

static const char *const chunk_results[] = {"ok", "duplicate", "corrupt"};

static const struct metric_def xfer_metric_defs[XM_COUNT] = {
    [XM_RECEIVED_BYTES] = {.name = "accelnet_xfer_received_bytes_total",
			   .type = METRIC_COUNTER,
			   .help = "Chunk bytes read from senders.",
			   .unit = "bytes",
			   .space = SPACE_SERVER,
			   .read = read_received},
    [XM_CHUNKS] = {.name = "accelnet_xfer_chunks_total",
		   .type = METRIC_COUNTER,
		   .help = "Chunks received, by what became of them.",
		   .space = SPACE_SERVER,
		   .sub_label = "result",
		   .sub_values = chunk_results,
		   .nsub = 3,
		   .read = read_chunks},
    [XM_FILES] = {.name = "accelnet_xfer_files_completed_total",
		  .type = METRIC_COUNTER,
		  .help = "Files verified and put in place.",
		  .space = SPACE_SERVER,
		  .read = read_files},
    [XM_BATCHES] = {.name = "accelnet_xfer_batches_total",
		    .type = METRIC_COUNTER,
		    .help = "Batches of small files received (each file counts as a chunk too).",
		    .space = SPACE_SERVER,
		    .read = read_batches},
    [XM_SESSIONS_TOTAL] = {.name = "accelnet_xfer_sessions_total",
			   .type = METRIC_COUNTER,
			   .help = "Transfers whose manifest was accepted.",
			   .space = SPACE_SERVER,
			   .read = read_sessions_total},
    [XM_SESSIONS] = {.name = "accelnet_xfer_sessions",
		     .type = METRIC_GAUGE,
		     .help = "Transfers being received now.",
		     .space = SPACE_SERVER,
		     .read = read_sessions},
    [XM_CONNS] = {.name = "accelnet_xfer_connections",
		  .type = METRIC_GAUGE,
		  .help = "Open connections (a get's included until its pull closes them).",
		  .space = SPACE_SERVER,
		  .read = read_conns},
    [XM_CONNS_TOTAL] = {.name = "accelnet_xfer_connections_total",
			.type = METRIC_COUNTER,
			.help = "Connections accepted under the caps.",
			.space = SPACE_SERVER,
			.read = read_conns_total},
    [XM_AUTH_FAIL] = {.name = "accelnet_xfer_auth_failures_total",
		      .type = METRIC_COUNTER,
		      .help = "Handshakes refused: a wrong token, TLS or a client certificate.",
		      .space = SPACE_SERVER,
		      .read = read_auth_fail},
    [XM_ERRORS] = {.name = "accelnet_xfer_errors_total",
		   .type = METRIC_COUNTER,
		   .help = "Refused manifests, failed writes and failed finishes.",
		   .space = SPACE_SERVER,
		   .read = read_errors},
    [XM_DUP_BYTES] = {.name = "accelnet_xfer_duplicate_bytes_total",
		      .type = METRIC_COUNTER,
		      .help = "Bytes of chunks received when already verified (wasted copies).",
		      .unit = "bytes",
		      .space = SPACE_SERVER,
		      .read = read_dup_bytes},
    [XM_LINK_BYTES] = {.name = "accelnet_xfer_link_bytes_total",
		       .type = METRIC_COUNTER,
		       .help =
			   "Bytes of chunks first verified, by the listen address they came by.",
		       .unit = "bytes",
		       .space = SPACE_LINKS,
		       .read = read_link_bytes},
    [XM_SLOW_FRAMES] = {.name = "accelnet_xfer_slow_frames_total",
			.type = METRIC_COUNTER,
			.help = "Connections cut because a frame did not come whole in time "
				"(serve --frame-ms, --min-rate-kib).",
			.space = SPACE_SERVER,
			.read = read_slow_frames},
};

static void on_request(void *arg, struct hsrv_conn *c, const struct http_head *req,
		       const char *body, size_t body_len)
{
	struct xfer_metrics *xm = arg;
	(void)body, (void)body_len;
	if (req->meth != HTTP_GET || req->path.len != 8 || memcmp(req->path.p, "/metrics", 8)) {
		hsrv_respond(c, 404, "text/plain", "", "", 0);
		return;
	}
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f) {
		hsrv_respond(c, 500, "text/plain", "", "", 0);
		return;
	}
	prom_write(f, xm->reg);
	fclose(f);
	hsrv_respond(c, 200, "text/plain; version=0.0.4", "", text, len);
	free(text);
}

static void on_tick(struct loop_timer *t)
{
	struct xfer_metrics *xm = container_of(t, struct xfer_metrics, tick);
	if (__atomic_load_n(xm->stop, __ATOMIC_RELAXED))
		loop_stop(xm->loop);
	else
		loop_timer_set(xm->loop, &xm->tick, loop_now(xm->loop) + METRICS_POLL_MS);
}

static void *metrics_main(void *arg)
{
	struct xfer_metrics *xm = arg;
	loop_timer_set(xm->loop, &xm->tick, loop_now(xm->loop) + METRICS_POLL_MS);
	loop_run(xm->loop);
	OPENSSL_thread_stop();
	return NULL;
}

/* The registry over <s>: one series for the server, one per listen address. */
static int registry_create(struct xfer_metrics *xm)
{
	struct xfer_server *s = xm->s;
	for (unsigned i = 0; i < s->nlisten; i++)
		xm->link_names[i] = s->listen_names[i];
	xm->spaces[SPACE_SERVER] = (struct metric_space){.n = 1, .parent = -1};
	xm->spaces[SPACE_LINKS] = (struct metric_space){.labels = {"listen"},
							.nlabels = 1,
							.n = s->nlisten,
							.values = xm->link_names,
							.parent = -1};
	struct metrics_config cfg = {.defs = xfer_metric_defs,
				     .ndefs = XM_COUNT,
				     .spaces = xm->spaces,
				     .nspaces = 2,
				     .ctx = s};
	return metrics_create(&cfg, &xm->reg);
}

int xfer_metrics_start(struct xfer_server *s, const char *addr, volatile int *stop,
		       struct xfer_metrics **out, char *err, size_t errlen)
{
	struct net_addr a;
	const char *why;
	if (net_addr_parse(addr, &a, &why)) {
		snprintf(err, errlen, "bad listen address '%s': %s", addr, why);
		return -EINVAL;
	}
	struct xfer_metrics *xm = calloc(1, sizeof(*xm));
	if (!xm)
		return -ENOMEM;
	xm->s = s;
	xm->stop = stop;
	xm->tick.fn = on_tick;
	/* an idle scraper holds up only other scrapes, for at most 2 s */
	struct hsrv_limits lim = {
	    .max_conns = 64, .header_ms = 2000, .idle_ms = 2000, .max_body = 1};
	int rc = registry_create(xm);
	if (rc) {
		snprintf(err, errlen, "cannot build the metrics registry: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = loop_create(&xm->loop))) {
		snprintf(err, errlen, "cannot start the metrics loop: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = hsrv_start(xm->loop, &a, &lim, on_request, xm, &xm->srv)) < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(-rc));
		goto fail;
	}
	if (pthread_create(&xm->th, NULL, metrics_main, xm)) {
		rc = -EAGAIN;
		snprintf(err, errlen, "cannot start the metrics thread");
		goto fail;
	}
	xm->started = 1;
	*out = xm;
	return 0;
fail:
	xfer_metrics_stop(xm);
	return rc;
}

void xfer_metrics_stop(struct xfer_metrics *xm)
{
	if (!xm)
		return;
	if (xm->started)
		pthread_join(xm->th, NULL);
	if (xm->srv)
		hsrv_stop(xm->srv);
	if (xm->loop)
		loop_destroy(xm->loop);
	if (xm->reg)
		metrics_destroy(xm->reg);
	free(xm);
}
