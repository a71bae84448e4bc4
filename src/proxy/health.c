/*
 * health.c - the probes behind health.h. A probe is a tiny state machine: waiting for its
 * next interval, connecting, or waiting for the status line; its one timer serves both as
 * interval and as deadline. A check that cannot even start because this process is out of
 * descriptors, socket buffers or memory says nothing about the backend: it is skipped, not
 * counted as failed, and the next one runs at the usual interval. The probe's bytes move
 * through the transport (net/conn.h), as every connection to a backend does: for a pool with
 * pools.tls the probe does its TLS handshake (non-blocking, within the check's timeout, with
 * the pool's verification, offering the probe's last session), and a failed handshake is a
 * failed check whose reason (OpenSSL's) the DOWN line gives.
 */
#include "proxy/health.h"
#include "core/log.h"
#include "net/conn.h"
#include "net/sock.h"
#include "net/tls.h"
#include "proxy/admission.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum probe_phase { P_WAIT, P_CONNECT, P_HANDSHAKE, P_READ };

struct probe {
	struct loop_io io; /* io.fd is nc.fd while connected, else -1 */
	struct net_conn nc;
	struct ssl_session_st *session; /* pools.tls: the last session, offered next time */
	struct loop_timer timer;
	struct health *h;
	struct pool_rt *pool;
	struct backend *be;
	enum probe_phase phase;
	uint64_t started_ms;
	size_t len;
	char buf[64];
};

struct health {
	struct loop *loop;
	struct probe *probes;
	size_t nprobes;
};

static void probe_schedule(struct probe *p)
{
	const struct conf_health *hc = &p->be->pool->health;
	p->phase = P_WAIT;
	uint64_t next = p->started_ms + hc->interval_ms;
	uint64_t now = loop_now(p->h->loop);
	loop_timer_set(p->h->loop, &p->timer, next > now ? next : now);
}

/* Close the probe's connection, if it has one. */
static void probe_disconnect(struct probe *p)
{
	if (p->io.fd < 0)
		return;
	loop_io_del(p->h->loop, &p->io);
	if (p->nc.ssl && p->phase == P_READ)
		net_conn_shutdown(&p->nc); /* close_notify: the session stays resumable */
	net_conn_close(&p->nc);
	p->io.fd = -1;
}

static void probe_finish(struct probe *p, int ok, const char *why)
{
	struct backend *be = p->be;
	const struct conf_health *hc = &be->pool->health;
	probe_disconnect(p);
	int up = atomic_load(&be->up);
	if (ok) {
		be->hc_fail = 0;
		if (++be->hc_ok >= hc->rise && !up) {
			atomic_store(&be->down_until_ms, 0);
			backend_came_back(be, loop_now(p->h->loop));
			atomic_store(&be->up, 1);
			log_warn("backend %s (pool %s) is UP after %u good checks", be->name,
				 be->pool->name, be->hc_ok);
			/* requests queued while it was down may use its slots now */
			admission_grant(p->pool, loop_now(p->h->loop),
					be->id + loop_now(p->h->loop));
		}
	} else {
		be->hc_ok = 0;
		if (++be->hc_fail >= hc->fall && up) {
			atomic_store(&be->up, 0);
			log_warn("backend %s (pool %s) is DOWN: %s (%u failed checks)", be->name,
				 be->pool->name, why, be->hc_fail);
		}
	}
	probe_schedule(p);
}

/* The check could not run for want of local resources (<err>): no verdict on the backend. */
static void probe_skip(struct probe *p, int err)
{
	log_warn_every(10000,
		       "health check of backend %s (pool %s) skipped: %s here, which is "
		       "not the backend's fault",
		       p->be->name, p->be->pool->name, strerror(-err));
	probe_schedule(p);
}

/* Send the check request. 0, or -1 with the probe finished. */
static int probe_send(struct probe *p)
{
	char req[512];
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: accelnet-health\r\n"
			 "Connection: close\r\n\r\n",
			 p->be->pool->health.path, p->be->name);
	/* conf bounds the path; never send past req */
	if (n < 0 || (size_t)n >= sizeof(req)) {
		probe_finish(p, 0, "the check request does not fit");
		return -1;
	}
	if (net_conn_write(&p->nc, req, (size_t)n) != n) {
		probe_finish(p, 0, "cannot send the check request");
		return -1;
	}
	p->phase = P_READ;
	p->len = 0;
	return 0;
}

/* One step of the probe's TLS handshake. 1: done; 0: it waits, or failed (finished). */
static int probe_handshake(struct probe *p)
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
	probe_finish(p, 0, why);
	return 0;
}

static void probe_on_io(struct loop_io *io, unsigned events)
{
	struct probe *p = container_of(io, struct probe, io);
	if (p->phase == P_CONNECT && (events & (LOOP_WRITE | LOOP_HUP))) {
		int err = sock_error(io->fd);
		if (err && sock_error_is_local(err)) {
			probe_disconnect(p);
			probe_skip(p, err);
			return;
		}
		if (err) {
			probe_finish(p, 0, strerror(-err));
			return;
		}
		if (p->nc.ssl)
			p->phase = P_HANDSHAKE;
		else if (probe_send(p) < 0)
			return;
	}
	if (p->phase == P_HANDSHAKE && (!probe_handshake(p) || probe_send(p) < 0))
		return;
	if (p->phase != P_READ || !(events & (LOOP_READ | LOOP_HUP)))
		return;
	for (;;) {
		ssize_t n = net_conn_read(&p->nc, p->buf + p->len, sizeof(p->buf) - 1 - p->len);
		if (n == -EAGAIN)
			return;
		if (n > 0)
			p->len += (size_t)n;
		if (p->len >= 12 || n <= 0)
			break;
	}
	p->buf[p->len] = '\0';
	int status = 0;
	if (p->len >= 12 && memcmp(p->buf, "HTTP/1.", 7) == 0)
		status = atoi(p->buf + 9);
	if (status >= 200 && status < 400) {
		probe_finish(p, 1, NULL);
		return;
	}
	char why[64];
	if (status)
		snprintf(why, sizeof(why), "%s answered %d", p->be->pool->health.path, status);
	else
		snprintf(why, sizeof(why), "no HTTP status line");
	probe_finish(p, 0, why);
}

static void probe_on_timer(struct loop_timer *t)
{
	struct probe *p = container_of(t, struct probe, timer);
	if (p->phase != P_WAIT) {
		probe_finish(p, 0, "check timed out");
		return;
	}
	p->started_ms = loop_now(p->h->loop);
	int fd = sock_connect(&p->be->conf->ep.addr);
	if (fd < 0 && sock_error_is_local(fd)) {
		probe_skip(p, fd);
		return;
	}
	if (fd < 0) {
		probe_finish(p, 0, strerror(-fd));
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
		rc = loop_io_add(p->h->loop, &p->io);
	if (rc < 0) {
		net_conn_close(&p->nc);
		p->io.fd = -1;
		probe_skip(p, rc);
		return;
	}
	p->phase = P_CONNECT;
	loop_timer_set(p->h->loop, &p->timer, p->started_ms + p->be->pool->health.timeout_ms);
}

int health_start(struct loop *loop, struct runtime *rt, struct health **out)
{
	struct health *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->loop = loop;
	h->probes = calloc(rt->nbackends ? rt->nbackends : 1, sizeof(*h->probes));
	if (!h->probes) {
		free(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *pool = &rt->pools[i];
		if (!pool->conf->health.enabled)
			continue;
		for (size_t j = 0; j < pool->nbackends; j++) {
			struct probe *p = &h->probes[h->nprobes++];
			p->h = h;
			p->pool = pool;
			p->be = &pool->backends[j];
			p->io.fd = -1;
			p->io.fn = probe_on_io;
			p->timer.fn = probe_on_timer;
			p->phase = P_WAIT;
			/* the first check runs at once */
			loop_timer_set(loop, &p->timer, loop_now(loop));
		}
	}
	*out = h;
	return 0;
}

void health_stop(struct health *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->nprobes; i++) {
		struct probe *p = &h->probes[i];
		loop_timer_stop(h->loop, &p->timer);
		probe_disconnect(p);
		net_tls_session_free(p->session);
	}
	free(h->probes);
	free(h);
}
