/*
 * scrape.c - the scrapers behind scrape.h. Each is the health probe's state machine
 * (proxy/health.c) with a longer read: waiting for its next interval, connecting, in its TLS
 * handshake (pools.tls), or reading the answer to EOF into a buffer that grows by doubling up
 * to max_bytes and is kept for the next scrape. Its one timer is both the interval and the
 * deadline. A scrape that cannot start for want of local resources (descriptors, memory) is
 * skipped, as a health check is: it says nothing about the engine.
 */
#include "proxy/scrape.h"
#include "core/log.h"
#include "net/conn.h"
#include "net/sock.h"
#include "net/tls.h"
#include "obs/promtext.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BUF_FIRST (16u << 10) /* the buffer's first size; it doubles up to max_bytes */

enum scraper_phase { S_WAIT, S_CONNECT, S_HANDSHAKE, S_READ };

struct scraper {
	struct loop_io io; /* io.fd is nc.fd while connected, else -1 */
	struct net_conn nc;
	struct ssl_session_st *session;
	struct loop_timer timer;
	struct scrape *s;
	struct backend *be;
	const struct conf_engine_metrics *em;
	enum scraper_phase phase;
	uint64_t started_ms;
	char *buf;
	size_t len, cap;
};

struct scrape {
	struct loop *loop;
	struct scraper *sc;
	size_t n;
};

/* The gauges read, and which figure each feeds. */
enum figure { F_WAITING, F_RUNNING, F_KV };

static const struct {
	const char *name;
	enum figure fig;
} gauges[] = {
    {"vllm:num_requests_waiting", F_WAITING},
    {"vllm:num_requests_running", F_RUNNING},
    {"vllm:kv_cache_usage_perc", F_KV},
    {"vllm:gpu_cache_usage_perc", F_KV},
    {"sglang:num_queue_reqs", F_WAITING},
    {"sglang:num_running_reqs", F_RUNNING},
    {"sglang:token_usage", F_KV},
    {"tgi_queue_size", F_WAITING},
    {"tgi_batch_current_size", F_RUNNING},
};
#define NGAUGES (sizeof(gauges) / sizeof(gauges[0]))

static void scraper_schedule(struct scraper *p)
{
	p->phase = S_WAIT;
	uint64_t next = p->started_ms + p->em->interval_ms;
	uint64_t now = loop_now(p->s->loop);
	loop_timer_set(p->s->loop, &p->timer, next > now ? next : now);
}

static void scraper_disconnect(struct scraper *p)
{
	if (p->io.fd < 0)
		return;
	loop_io_del(p->s->loop, &p->io);
	net_conn_close(&p->nc);
	p->io.fd = -1;
}

static void scraper_failed(struct scraper *p, const char *why)
{
	scraper_disconnect(p);
	backend_count(p->be, PM_BACKEND_ENGINE_SCRAPE_FAILURES, 1);
	log_warn_every(10000, "engine metrics of backend %s (pool %s): %s", p->be->name,
		       p->be->pool->name, why);
	scraper_schedule(p);
}

static void scraper_skip(struct scraper *p, int err)
{
	scraper_disconnect(p);
	log_warn_every(10000,
		       "engine metrics of backend %s (pool %s) not scraped: %s here, which is "
		       "not the backend's fault",
		       p->be->name, p->be->pool->name, strerror(-err));
	scraper_schedule(p);
}

/* The whole answer is in buf: read the figures out of it and report them. */
static void scraper_done(struct scraper *p)
{
	char why[96];
	scraper_disconnect(p);
	int status = 0;
	if (p->len >= 12 && memcmp(p->buf, "HTTP/1.", 7) == 0 && p->buf[8] == ' ')
		status = atoi(p->buf + 9);
	const char *end = memmem(p->buf, p->len, "\r\n\r\n", 4);
	if (status != 200 || !end) {
		snprintf(why, sizeof(why), "%s answered %s%d", p->em->path,
			 status ? "" : "no HTTP status: ", status);
		scraper_failed(p, why);
		return;
	}
	size_t head = (size_t)(end - p->buf) + 4;
	/* HTTP/1.0 asked for: a chunked answer would be a broken server; refuse, not misread */
	for (const char *h = p->buf + 1; h + 18 <= end; h++)
		if (h[-1] == '\n' && strncasecmp(h, "transfer-encoding:", 18) == 0) {
			scraper_failed(p, "a chunked answer to an HTTP/1.0 request");
			return;
		}
	struct promtext_want want[NGAUGES];
	for (size_t i = 0; i < NGAUGES; i++)
		want[i] = (struct promtext_want){.name = gauges[i].name};
	if (promtext_read(p->buf + head, p->len - head, want, NGAUGES) < 0) {
		scraper_failed(p, "the answer is not Prometheus text");
		return;
	}
	double fig[3] = {0, 0, 0};
	unsigned found[3] = {0, 0, 0};
	for (size_t i = 0; i < NGAUGES; i++) {
		fig[gauges[i].fig] += want[i].sum;
		found[gauges[i].fig] += want[i].samples;
	}
	if (!found[F_WAITING] && !found[F_RUNNING]) {
		scraper_failed(p, "none of the vLLM, SGLang or TGI queue gauges in the answer");
		return;
	}
	backend_report_engine(p->be, loop_now(p->s->loop), fig[F_RUNNING] > 0 ? fig[F_RUNNING] : 0,
			      fig[F_WAITING] > 0 ? fig[F_WAITING] : 0,
			      found[F_KV] ? fig[F_KV] / found[F_KV] : -1);
	backend_count(p->be, PM_BACKEND_ENGINE_SCRAPES, 1);
	scraper_schedule(p);
}

static int scraper_send(struct scraper *p)
{
	char req[512];
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: accelnet-scrape\r\n"
			 "Accept: text/plain;version=0.0.4\r\n\r\n",
			 p->em->path, p->be->name);
	if (n < 0 || (size_t)n >= sizeof(req)) { /* conf bounds the path */
		scraper_failed(p, "the request does not fit");
		return -1;
	}
	if (net_conn_write(&p->nc, req, (size_t)n) != n) {
		scraper_failed(p, "cannot send the request");
		return -1;
	}
	p->phase = S_READ;
	p->len = 0;
	return 0;
}

static int scraper_handshake(struct scraper *p)
{
	int rc = net_tls_handshake(&p->nc);
	if (rc == 0)
		return 1;
	if (rc == -EAGAIN)
		return 0;
	char why[240], tls[200];
	if (rc == -ECONNRESET)
		snprintf(tls, sizeof(tls), "the backend closed the connection");
	else
		net_tls_error_text(&p->nc, tls, sizeof(tls));
	snprintf(why, sizeof(why), "TLS handshake failed: %s", tls);
	scraper_failed(p, why);
	return 0;
}

/* Room for more of the answer: 0, 1 when it would pass max_bytes, -ENOMEM. */
static int scraper_room(struct scraper *p)
{
	if (p->len < p->cap)
		return 0;
	if (p->cap > p->em->max_bytes)
		return 1;
	size_t cap = p->cap ? 2 * p->cap : BUF_FIRST;
	if (cap > p->em->max_bytes + 1)
		cap = (size_t)p->em->max_bytes + 1; /* one byte past: "too large" shows */
	char *nb = realloc(p->buf, cap);
	if (!nb)
		return -ENOMEM;
	p->buf = nb;
	p->cap = cap;
	return 0;
}

static void scraper_read(struct scraper *p)
{
	for (;;) {
		int room = scraper_room(p);
		if (room < 0) {
			scraper_skip(p, room);
			return;
		}
		if (room > 0) {
			char why[80];
			snprintf(why, sizeof(why), "the answer is longer than max_bytes (%llu)",
				 (unsigned long long)p->em->max_bytes);
			scraper_failed(p, why);
			return;
		}
		ssize_t n = net_conn_read(&p->nc, p->buf + p->len, p->cap - p->len);
		if (n == -EAGAIN)
			return;
		if (n < 0) {
			scraper_failed(p, "the connection failed while reading");
			return;
		}
		if (n == 0)
			break;
		p->len += (size_t)n;
	}
	scraper_done(p);
}

static void scraper_on_io(struct loop_io *io, unsigned events)
{
	struct scraper *p = container_of(io, struct scraper, io);
	if (p->phase == S_CONNECT && (events & (LOOP_WRITE | LOOP_HUP))) {
		int err = sock_error(io->fd);
		if (err && sock_error_is_local(err)) {
			scraper_skip(p, err);
			return;
		}
		if (err) {
			scraper_failed(p, strerror(-err));
			return;
		}
		if (p->nc.ssl)
			p->phase = S_HANDSHAKE;
		else if (scraper_send(p) < 0)
			return;
	}
	if (p->phase == S_HANDSHAKE && (!scraper_handshake(p) || scraper_send(p) < 0))
		return;
	if (p->phase == S_READ && (events & (LOOP_READ | LOOP_HUP)))
		scraper_read(p);
}

static void scraper_on_timer(struct loop_timer *t)
{
	struct scraper *p = container_of(t, struct scraper, timer);
	if (p->phase != S_WAIT) {
		scraper_failed(p, "no whole answer within timeout_ms");
		return;
	}
	p->started_ms = loop_now(p->s->loop);
	int fd = sock_connect(&p->be->conf->ep.addr);
	if (fd < 0 && sock_error_is_local(fd)) {
		scraper_skip(p, fd);
		return;
	}
	if (fd < 0) {
		scraper_failed(p, strerror(-fd));
		return;
	}
	net_conn_init(&p->nc, fd);
	p->io.fd = fd;
	int rc = 0;
	if (p->be->tls) {
		struct net_tls_peer peer = {.sni = p->be->conf->tls_sni,
					    .verify_name = p->be->conf->tls_verify_name,
					    .session = &p->session};
		rc = net_tls_attach_client(&p->nc, p->be->tls, &peer);
	}
	if (rc == 0)
		rc = loop_io_add(p->s->loop, &p->io);
	if (rc < 0) {
		net_conn_close(&p->nc);
		p->io.fd = -1;
		scraper_skip(p, rc);
		return;
	}
	p->phase = S_CONNECT;
	loop_timer_set(p->s->loop, &p->timer, p->started_ms + p->em->timeout_ms);
}

int scrape_start(struct loop *loop, struct runtime *rt, struct scrape **out)
{
	struct scrape *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->sc = calloc(rt->nbackends ? rt->nbackends : 1, sizeof(*s->sc));
	if (!s->sc) {
		free(s);
		return -ENOMEM;
	}
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *pool = &rt->pools[i];
		if (!pool->conf->engine_metrics.enabled)
			continue;
		for (size_t j = 0; j < pool->nbackends; j++) {
			struct scraper *p = &s->sc[s->n++];
			p->s = s;
			p->be = &pool->backends[j];
			p->em = &pool->conf->engine_metrics;
			p->io.fd = -1;
			p->io.fn = scraper_on_io;
			p->timer.fn = scraper_on_timer;
			p->phase = S_WAIT;
			loop_timer_set(loop, &p->timer, loop_now(loop));
		}
	}
	*out = s;
	return 0;
}

void scrape_stop(struct scrape *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		struct scraper *p = &s->sc[i];
		loop_timer_stop(s->loop, &p->timer);
		scraper_disconnect(p);
		net_tls_session_free(p->session);
		free(p->buf);
	}
	free(s->sc);
	free(s);
}
