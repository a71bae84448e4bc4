/*
 * probe.c - the state machine behind probe.h. The probe's bytes move through the transport
 * (net/conn.h), as every connection to a backend does: for a pool with pools.tls the probe
 * does its TLS handshake (non-blocking, within the attempt's timeout, with the pool's
 * verification, offering the probe's last session), and a failed handshake is a failed
 * attempt whose reason (OpenSSL's) the owner is given. Everything here runs on the main
 * thread's loop, never on the request path.
 */
#include "control/probe.h"
#include "net/sock.h"
#include "net/tls.h"
#include "runtime/pool.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Close the probe's connection, if it has one. */
static void probe_disconnect(struct probe *p)
{
	if (p->io.fd < 0)
		return;
	loop_io_del(p->loop, &p->io);
	if (p->nc.ssl && p->phase == PROBE_READ)
		net_conn_shutdown(&p->nc); /* close_notify: the session stays resumable */
	net_conn_close(&p->nc);
	p->io.fd = -1;
}

void probe_end(struct probe *p)
{
	probe_disconnect(p);
	p->phase = PROBE_WAIT;
	uint64_t next = p->started_ms + p->interval_ms;
	uint64_t now = loop_now(p->loop);
	loop_timer_set(p->loop, &p->timer, next > now ? next : now);
}

void probe_fail(struct probe *p, const char *why)
{
	probe_end(p);
	p->ops->failed(p, why);
}

void probe_skip(struct probe *p, int err)
{
	probe_end(p);
	p->ops->skipped(p, err);
}

/* Send the request. 0, or -1 with the attempt failed, or (no path: the connect was the whole
 * check) handed to the owner to judge. */
static int probe_send(struct probe *p)
{
	char req[512];
	if (!p->path) {
		p->phase = PROBE_READ;
		p->len = 0;
		p->ops->readable(p);
		return -1;
	}
	int n =
	    snprintf(req, sizeof(req), "GET %s HTTP/%s\r\nHost: %s\r\n%s\r\n", p->path, p->version,
		     p->be->conf->discover ? p->be->conf->discover_name : p->be->name, p->headers);
	/* conf bounds the path; never send past req */
	if (n < 0 || (size_t)n >= sizeof(req)) {
		probe_fail(p, "the request does not fit");
		return -1;
	}
	if (net_conn_write(&p->nc, req, (size_t)n) != n) {
		probe_fail(p, "cannot send the request");
		return -1;
	}
	p->phase = PROBE_READ;
	p->len = 0;
	return 0;
}

/* One step of the TLS handshake. 1: done; 0: it waits, or failed (ended). */
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
	probe_fail(p, why);
	return 0;
}

static void probe_on_io(struct loop_io *io, unsigned events)
{
	struct probe *p = container_of(io, struct probe, io);
	if (p->phase == PROBE_CONNECT && (events & (LOOP_WRITE | LOOP_HUP))) {
		int err = sock_error(io->fd);
		if (err && sock_error_is_local(err)) {
			probe_skip(p, err);
			return;
		}
		if (err) {
			probe_fail(p, strerror(-err));
			return;
		}
		if (p->nc.ssl)
			p->phase = PROBE_HANDSHAKE;
		else if (probe_send(p) < 0)
			return;
	}
	if (p->phase == PROBE_HANDSHAKE && (!probe_handshake(p) || probe_send(p) < 0))
		return;
	if (p->phase == PROBE_READ && (events & (LOOP_READ | LOOP_HUP)))
		p->ops->readable(p);
}

static void probe_on_timer(struct loop_timer *t)
{
	struct probe *p = container_of(t, struct probe, timer);
	if (p->phase != PROBE_WAIT) {
		probe_fail(p, p->ops->timed_out);
		return;
	}
	p->started_ms = loop_now(p->loop);
	p->gen = atomic_load(&p->be->gen);
	if (!backend_present(p->be)) { /* an empty or draining discovery slot: nothing to ask */
		probe_end(p);
		return;
	}
	int fd = sock_connect(&p->be->addr);
	if (fd < 0 && sock_error_is_local(fd)) {
		probe_skip(p, fd);
		return;
	}
	if (fd < 0) {
		probe_fail(p, strerror(-fd));
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
		rc = loop_io_add(p->loop, &p->io);
	if (rc < 0) {
		net_conn_close(&p->nc);
		p->io.fd = -1;
		probe_skip(p, rc);
		return;
	}
	p->phase = PROBE_CONNECT;
	loop_timer_set(p->loop, &p->timer, p->started_ms + p->timeout_ms);
}

void probe_start(struct probe *p)
{
	p->io.fd = -1;
	p->io.fn = probe_on_io;
	p->timer.fn = probe_on_timer;
	p->phase = PROBE_WAIT;
	loop_timer_set(p->loop, &p->timer, loop_now(p->loop));
}

void probe_stop(struct probe *p)
{
	loop_timer_stop(p->loop, &p->timer);
	probe_disconnect(p);
	net_tls_session_free(p->session);
	p->session = NULL;
}
