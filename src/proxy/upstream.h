/*
 * upstream.h - connections to backends: opening them (TCP, then TLS for a pool with
 * pools.tls), and keeping idle ones per worker and per backend for reuse (LIFO, so the
 * warmest is reused and the coldest expire).
 *
 * A connection in use belongs to an attempt (attempt.h), whose owner registered a callback
 * for its readiness events (an exchange's: the codec's wake of the connection that carries
 * it); the connection only records them (readable, writable, hup, a failed connect) and
 * hands them to the transport (net/conn.h: net_conn_ready), which reads for an owner that
 * started reading and calls it back (the upstream half, up_h1.h); otherwise the owner is
 * called and moves the bytes itself. An owner's reads stop when it lets the connection go.
 *
 * A backend that speaks HTTP/2 (pools[].protocol) gets no connection per request: a struct
 * upconn then stands for a stream of one of a few multiplexed connections (h2s: up_h2.h),
 * which the attempt takes and lets go through up_h2 instead.
 *
 * For a TLS pool the connection stays "connecting" until its handshake is done: the
 * handshake runs here, one non-blocking step per readiness event, and the owner hears of
 * the connection only when it is ready or has failed, so timeouts.connect_ms covers TCP and
 * TLS together, and a refused certificate fails the connect as a refused connection does
 * (tls_failed says which, tls_error says why). The worker keeps the last session each
 * backend gave (w->tls_sessions) and offers it on the next connect, so a reconnect resumes.
 */
#ifndef ACCELNET_PROXY_UPSTREAM_H
#define ACCELNET_PROXY_UPSTREAM_H

#include "core/buf.h"
#include "core/list.h"
#include "core/loop.h"
#include "net/conn.h"
#include "runtime/pool.h"
#include "proxy/worker.h"

struct upconn {
	struct loop_io io;
	struct loop_timer timer; /* idle expiry, at idle_due_ms or before it (upstream.c) */
	uint64_t idle_due_ms;	 /* when it is closed if still idle */
	struct net_conn conn;
	struct worker *w;
	struct backend *be;
	void *owner;		       /* who uses it; NULL while idle */
	void (*on_event)(void *owner); /* called on each readiness event while owned */
	struct list_node idle_link;    /* on w->idle[be->id] while idle */
	struct buf *in;		       /* response bytes not yet relayed */
	int failed;		       /* -errno of a failed connect */
	int readable, writable;	       /* edge seen, not yet drained / not yet full */
	int hup;		       /* the backend shut its side */
	int read_end;		       /* the transport read its end (1) or a failure (-errno) */
	size_t read_got; /* bytes the transport read that the owner has not looked at */
	unsigned connecting : 1, idle : 1;
	unsigned handshaking : 1; /* TCP is up, the TLS handshake is not done (still connecting) */
	unsigned tls_failed : 1;  /* <failed> is the TLS handshake's, not the TCP connect's */
	unsigned grpc_web : 1; /* its request is gRPC-Web to translate (routes.grpc_web: up_h2) */
	unsigned served;       /* exchanges completed on this connection */
	unsigned gen;	       /* be->gen when opened: an older one's address is gone */
	char *tls_error;       /* tls_failed: why, with OpenSSL's reason (freed with it) */
	/* an HTTP/2 stream standing for a connection (up_h2.h): conn is none (fd -1), and the
	 * stream's connection owns the socket; NULL for a connection of its own */
	struct up_h2s *h2s;
};

/* An idle connection to <be> that the backend has not closed, made to its present address,
 * or a new one (connecting); NULL with *err = -errno. */
struct upconn *upconn_get(struct worker *w, struct backend *be, int *err);
/* A new connection to <be>, connecting (never an idle one: HTTP/2's own, up_h2.h); NULL with
 * *err = -errno. */
struct upconn *upconn_open(struct worker *w, struct backend *be, int *err);
/* Owned from now on by <owner>: <on_event> is called on its readiness events. */
void upconn_own(struct upconn *up, void *owner, void (*on_event)(void *owner));
/* The exchange on it completed and it may carry another: back to the idle list. */
void upconn_release(struct upconn *up);
void upconn_close(struct upconn *up);
/* Close every idle connection of <w>. */
void upconn_close_idle(struct worker *w);

#endif
