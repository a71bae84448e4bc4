/*
 * probe.h - one HTTP GET to a backend from the main thread's loop, again every interval: what
 * a health check (control/health.h) and an engine metrics scrape (control/scrape.h) both are.
 *
 * A probe is a tiny state machine: waiting for its next interval, connecting, in its TLS
 * handshake (pools.tls), or reading the answer. Its one timer is both the interval (from the
 * start of one attempt to the start of the next) and the deadline (timeout_ms from the start).
 * The probe connects, shakes hands and sends the request; its owner reads the answer
 * (ops->readable, from p->nc into its own buffer, p->len counting) and ends the attempt with
 * its verdict. An attempt that cannot even start because this process is out of descriptors,
 * socket buffers or memory says nothing about the backend: the owner hears ops->skipped, not
 * ops->failed, and the next attempt runs at the usual interval.
 *
 * To a backend that speaks HTTP/2 (h2) the probe sends its request as HTTP/2 (nghttp2's client
 * session), and the owner asks probe_h2_status() for the answer's status instead of reading a
 * status line; with grpc it asks the gRPC health checking protocol (grpc.health.v1.Health/
 * Check for the whole server), whose answer counts as 200 when it says SERVING.
 */
#ifndef ACCELNET_CONTROL_PROBE_H
#define ACCELNET_CONTROL_PROBE_H

#include "core/loop.h"
#include "net/conn.h"

#include <stddef.h>
#include <stdint.h>

struct backend;
struct probe;

struct probe_ops {
	/* The answer can be read (LOOP_READ or a hang-up): read what is there from p->nc
	 * (net_conn_read; -EAGAIN: wait for the next call) and, once it has a verdict, end
	 * the attempt with probe_end() or probe_fail(). */
	void (*readable)(struct probe *p);
	/* The attempt failed, the backend's fault (<why>: refused, reset, TLS, timed out, or the
	 * owner's reason given to probe_fail); the probe has ended it already. */
	void (*failed)(struct probe *p, const char *why);
	/* The attempt could not run for want of local resources (-errno <err>); ended, no
	 * verdict on the backend. */
	void (*skipped)(struct probe *p, int err);
	const char *timed_out; /* the failure's words when timeout_ms passes */
};

enum probe_phase { PROBE_WAIT, PROBE_CONNECT, PROBE_HANDSHAKE, PROBE_READ };

struct probe {
	/* set by the owner before probe_start */
	const struct probe_ops *ops;
	struct loop *loop;
	struct backend *be;
	const char *path;    /* GET <path>; NULL: a TCP connect (and TLS handshake) is the whole
			      * attempt, and ops->readable is called once it is up */
	const char *version; /* "1.0" or "1.1" */
	const char *headers; /* after Host:, each line ending in \r\n */
	unsigned interval_ms, timeout_ms;
	unsigned h2 : 1;   /* speak HTTP/2: h2c, or h2 by ALPN over TLS (the backend's protocol) */
	unsigned grpc : 1; /* ... and ask grpc.health.v1.Health/Check instead of GET <path> */
	/* the probe's own */
	struct probe_h2 *h2s; /* h2: its session, while connected */
	struct loop_io io;    /* io.fd is nc.fd while connected, else -1 */
	struct net_conn nc;
	struct ssl_session_st *session; /* pools.tls: the last session, offered next time */
	struct loop_timer timer;
	enum probe_phase phase;
	uint64_t started_ms;
	unsigned gen; /* be->gen when it started: an answer from an address since replaced
		       * (control/discover.c) says nothing of the backend now */
	size_t len;   /* bytes of the answer the owner has read; 0 when the request goes out */
};

/* Arm the probe whose owner fields are set: the first attempt runs at once. A backend that
 * is not present (an unused discovery slot) is not probed; its turn passes. */
void probe_start(struct probe *p);
/* End the attempt (close the connection: under TLS with our close_notify once the request
 * is out, so the session stays resumable) and set the next one for started + interval. */
void probe_end(struct probe *p);
/* End the attempt as failed: probe_end(), then ops->failed(p, why). */
void probe_fail(struct probe *p, const char *why);
/* End the attempt unjudged for want of local resources: probe_end(), then ops->skipped. */
void probe_skip(struct probe *p, int err);
/* h2: read what came; once the answer's status is known, *status (a gRPC check: 200 when the
 * server said SERVING, else 503) and 1; 0: more must come; -1: the connection ended, or the
 * answer was no answer (*why says what). */
int probe_h2_status(struct probe *p, int *status, const char **why);
/* Stop for good: no timer, no connection, no session. */
void probe_stop(struct probe *p);

#endif
