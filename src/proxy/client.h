/*
 * client.h - one client connection: its transport, its buffers and where its HTTP/1 state
 * machine stands (h1.c, the HTTP/1 client codec, drives it; relay.c moves its exchange's bytes,
 * tunnel.c those of a WebSocket tunnel).
 *
 * The transport reads (net/conn.h): client_read() starts it with this file's callbacks,
 * which put the bytes in cl->in and note the client's end. Between events the transport goes
 * on reading only in a tunnel and while lingering: the codec (h1.c) stops it otherwise, so a
 * head is read as its state runs, and while a request is served the client's next request or
 * its end stays in the socket, as the relay expects (client_gone).
 *
 * Buffers come from the worker's pools and go back when empty, so an idle connection holds
 * none: its record here, a few hundred bytes, is all it costs the proxy. A request body
 * being read whole before admission may outgrow a plain buffer into a body buffer
 * (limits.body_buffer_bytes), at most BODY_BUFS_MAX lent per worker at once.
 */
#ifndef ACCELNET_PROXY_CLIENT_H
#define ACCELNET_PROXY_CLIENT_H

#include "core/buf.h"
#include "core/list.h"
#include "core/loop.h"
#include "net/conn.h"
#include "proxy/exchange.h"
#include "proxy/pace.h"
#include "proxy/worker.h"

#include <netinet/in.h>
#include <stdint.h>

/* Body buffers one worker lends at once; past that a body waits for one, unadmitted. */
#define BODY_BUFS_MAX 64

enum client_state {
	C_HANDSHAKE, /* a TLS handshake (listen[].tls) */
	C_HEAD,	     /* reading a request head (or idle between requests) */
	C_EXCHANGE,  /* an exchange is under way */
	C_REPLY,     /* writing a response the proxy made itself */
	C_LINGER,    /* our side is shut; reading until the client closes */
	C_TUNNEL,    /* a WebSocket tunnel to the exchange's backend (tunnel.h) */
	C_H2,	     /* the connection speaks HTTP/2 (h2.h): its streams are its exchanges */
};

struct h2;

/*
 * The HTTP/1 client codec's own state for the exchange under way: how the request was framed
 * and how the response is being framed for this client, and the exchange's pacing marks
 * (pace.h). It lives in the exchange's block (h1.h: h1_x_hook), so an idle connection holds
 * none of it; set when a request head starts an exchange; nothing outside the codec's files
 * (h1.c, relay.c, hit.c, tunnel.c, client.c) reads it.
 */
struct h1_x {
	int minor;		  /* HTTP/1.<minor> of the request */
	unsigned req_close : 1;	  /* the request said Connection: close (or was the last allowed) */
	unsigned client_keep : 1; /* the response's head lets the connection stay open */
	unsigned early_head : 1;  /* the proxy sent its own event-stream head (sse.h) */
	unsigned wrap_tail : 1;	  /* a Content-Length body relayed as one chunk: end it */
	unsigned wrap_size : 1;	  /* ... whose chunk-size line went out */
	unsigned interims;	  /* interim (1xx) responses relayed ... */
	uint32_t interim_bytes;	  /* ... and their bytes */
	struct xpace pace;
};

/* (Laid out with no holes: it is what an idle connection costs, with malloc's 8 bytes.) */
struct client {
	struct loop_io io;
	struct loop_timer timer; /* armed at due_ms or before it (h1.c: h1_arm_timer) */
	uint64_t due_ms;	 /* when the state's deadline is, while not in C_H2 */
	struct net_conn conn;
	struct worker *w;
	struct list_node link;	      /* on w->clients */
	struct buf *in;		      /* bytes from the client */
	struct buf *out;	      /* heads and proxy-made responses for the client */
	uint64_t phase_ms;	      /* when the current state or head began */
	struct http_head_reader head; /* the request head being read */
	_Atomic uint32_t *ip_slot;    /* its address's connection count, or NULL */
	uint64_t key;	    /* the address as tenant and hash key: classify_client_key() */
	struct exchange *x; /* the exchange under way, or NULL */
	struct h1_x *h1;    /* ... and the codec's state for it, in its block (h1.h), or NULL */
	const struct conf_tls *tls_conf; /* its listener's tls: section, or NULL */
	struct net_tls_facts *tls_facts; /* after the handshake (malloc'd), or NULL */
	struct tunnel *tunnel; /* in C_TUNNEL (tunnel.h: freed by tunnel_free()), or NULL */
	struct h2 *h2;	       /* in C_H2: the HTTP/2 connection (h2.h), or NULL */
	void (*codec_free)(struct client *cl); /* frees what a codec other than h1 holds */
	enum client_state state;
	int writable;	   /* edge seen, not yet full (reads: conn.readable, conn.hup) */
	int read_end;	   /* the transport read the client's end (1) or a failure (-errno) */
	uint32_t read_got; /* bytes the transport read that client_read() has not told of */
	uint32_t head_len; /* the request head still at the front of in, during the head stages */
	unsigned served;
	unsigned requests; /* request heads read (limits.max_requests_per_connection) */
	unsigned keep_alive : 1;
	unsigned trusted : 1;	    /* the client is in trusted_proxies */
	unsigned tls : 1;	    /* it came through a TLS listener */
	unsigned hello_checked : 1; /* ... and its ClientHello's declared size was looked at */
	unsigned plain_on_tls : 1;  /* ... but it spoke plain HTTP: answered 400 in plain text */
	unsigned http2 : 1;	    /* its listener takes HTTP/2 (listen[].http2) */
	unsigned hup_checked : 1;   /* conn.hup seen, and client_gone() has looked at it */
	unsigned hup_probed : 1; /* ... and a 100 Continue asks whether it closed or half-closed */
	char ip[INET6_ADDRSTRLEN];
};

/* cl->out, taken if need be and compacted so its room is at the end; NULL without memory. */
struct buf *client_out_buf(struct client *cl);
/* Append p[0..n) to cl->out. 0, or -ENOMEM (no buffer, or no room left in it). */
int client_out_put(struct client *cl, const char *p, size_t n);

static inline size_t client_out_pending(const struct client *cl)
{
	return cl->out ? buf_len(cl->out) : 0;
}

/*
 * Read what the client sent into cl->in, through the transport (net_conn_read_start): the
 * bytes that came since the last call (> 0; the transport may have read some on an event
 * before), 0 at its end, -EAGAIN when nothing more waits, -ENOSPC when cl->in
 * is full, or -errno. Reading stays started (net/conn.h: the transport reads on the client's
 * next readiness event, before the codec runs) until h1.c stops it (above).
 */
ssize_t client_read(struct client *cl);
/* client_read() for a connection between requests or frames: -EAGAIN at once when no edge
 * waits, and with -EAGAIN an empty cl->in goes back to the worker (an idle connection holds
 * no buffer; a read edge with nothing behind it, such as io_uring's poll telling of bytes
 * its receive already took, left one taken for the read). */
ssize_t client_read_idle(struct client *cl);

/* Write what cl->out holds while the client takes it. 0, or -errno (the client is gone). */
int client_flush(struct client *cl);

/*
 * cl->in is full and holds a request body still being read: move it to a body buffer.
 * -ENOSPC when it is one already; -EBUSY when the worker has lent BODY_BUFS_MAX of them
 * (the caller waits for one); -ENOMEM without memory.
 */
int client_grow_in(struct client *cl);
/* The request body has gone upstream: a body buffer goes back at once, what follows in it
 * (a pipelined request) moving to a plain buffer. */
void client_shrink_in(struct client *cl);

/*
 * The client shut its side while its request is served: has it gone, or only half-closed
 * (1: nothing more to read; relay.c tells the two apart), or are bytes still queued (a
 * pipelined request: it is still there, 0)?
 */
int client_gone(struct client *cl);
/* Has the client's socket been reset (it answered our bytes after it closed: gone)? */
int client_reset(struct client *cl);

/* Has the client sent bytes the proxy has not read (in the socket, or in TLS's buffer)? */
int client_pending(const struct client *cl);

/* The answer has gone whole (relayed, or from the cache): the slot and the upstream
 * connection go back, the exchange ends, and the connection waits for its next request or
 * lingers out. */
enum run client_finish(struct client *cl);

/* Close the connection and free it (its exchange, if any, too). */
void client_close(struct client *cl);

#endif
