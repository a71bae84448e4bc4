/*
 * upstream.h - connections to backends: opening them, and keeping idle ones per worker and
 * per backend for reuse (LIFO, so the warmest is reused and the coldest expire).
 *
 * A connection in use belongs to its owner (an exchange), which registered a callback for
 * its readiness events; the connection only records them (readable, writable, hup, a
 * failed connect) and calls the owner, which moves the bytes through up->conn.
 */
#ifndef ACCELNET_PROXY_UPSTREAM_H
#define ACCELNET_PROXY_UPSTREAM_H

#include "core/buf.h"
#include "core/list.h"
#include "core/loop.h"
#include "net/conn.h"
#include "proxy/runtime.h"
#include "proxy/worker.h"

struct upconn {
	struct loop_io io;
	struct loop_timer timer; /* idle expiry while on the idle list */
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
	unsigned connecting : 1, idle : 1;
	unsigned served; /* exchanges completed on this connection */
};

/* An idle connection to <be>, or a new one (connecting); NULL with *err = -errno. */
struct upconn *upconn_get(struct worker *w, struct backend *be, int *err);
/* Owned from now on by <owner>: <on_event> is called on its readiness events. */
void upconn_own(struct upconn *up, void *owner, void (*on_event)(void *owner));
/* The exchange on it completed and it may carry another: back to the idle list. */
void upconn_release(struct upconn *up);
void upconn_close(struct upconn *up);
/* Close every idle connection of <w>. */
void upconn_close_idle(struct worker *w);

#endif
