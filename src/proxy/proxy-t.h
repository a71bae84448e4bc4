/*
 * proxy-t.h - the types the proxy's own files share: workers, client sessions and upstream
 * connections. Nothing outside proxy/ includes this; the public face is proxy.h.
 *
 * Ownership: a worker owns its sessions, its idle upstream connections and its buffers. A
 * session owns the exchange in progress, which holds at most one upstream connection; when
 * the exchange ends the connection goes back to the worker's idle list for its backend, or
 * is closed.
 */
#ifndef ACCELNET_PROXY_PROXY_T_H
#define ACCELNET_PROXY_PROXY_T_H

#include "core/buf.h"
#include "core/loop.h"
#include "http/chunked.h"
#include "http/parse.h"
#include "proxy/rewrite.h"
#include "proxy/runtime.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>

struct proxy;
struct worker;
struct session;

struct upconn {
	struct loop_io io;
	struct loop_timer timer; /* idle expiry while on the idle list */
	struct worker *w;
	struct backend *be;
	struct session *s;	    /* the session using it; NULL while idle */
	struct upconn *prev, *next; /* idle list links */
	struct buf *in;		    /* response bytes not yet relayed */
	int failed;		    /* -errno of a failed connect */
	int readable, writable;	    /* edge seen, not yet drained / not yet full */
	int hup;		    /* the backend shut its side */
	unsigned connecting : 1, idle : 1;
	unsigned served; /* exchanges completed on this connection */
};

struct idle_list {
	struct upconn *head;
	unsigned count;
};

struct listener {
	struct loop_io io;
	struct worker *w;
};

enum session_state {
	S_HEAD,	    /* reading a request head (or idle between requests) */
	S_EXCHANGE, /* relaying one request and its response */
	S_REPLY,    /* writing a response the proxy made itself */
	S_LINGER,   /* our side is shut; reading until the client closes */
};

/* One request and its response, client <-> backend. */
struct exchange {
	enum http_method meth;
	int minor;
	unsigned req_close : 1, retried : 1, up_reused : 1;
	unsigned want_key : 1;	/* the pool balances on the prompt key, read from the body */
	unsigned buffering : 1; /* reading the body before admission (await_body) */
	unsigned buf_wait : 1;	/* ... and waiting for a body buffer to be free */
	unsigned sse_body : 1;	/* heartbeats if the body asks for a stream: not looked yet */
	unsigned spilled : 1;  /* moved to the route's spillover pool */
	unsigned hedged : 1;   /* a copy went (or was tried) to a second backend */
	unsigned sse_hb : 1;	 /* a streaming request on a route with heartbeats */
	unsigned early_head : 1; /* ... whose event-stream head the proxy has sent */
	unsigned wrap_tail : 1;	 /* a Content-Length body relayed as one chunk: end it */
	unsigned wrap_size : 1;	 /* ... whose chunk-size line went out */
	int retry_status; /* what to answer if the retry finds no backend: 502 or 504 */
	unsigned interims;	 /* interim (1xx) responses relayed ... */
	uint32_t interim_bytes; /* ... and their bytes */
	uint64_t body_start_ms; /* the request head was read: the body's clocks start */
	uint64_t rate_mark_ms, rate_mark_bytes; /* the current min_body_rate window began */
	struct waiter wt;  /* waiting in the pool's queue for a slot */
	char reqid[REQUEST_ID_MAX + 1];
	const struct conf_route *route;
	struct pool_rt *pool;
	struct backend *be;
	uint64_t sent_ns;      /* when the request started upstream (connect included) */
	uint64_t last_read_ns; /* the previous read of a streamed response body */
	/* hedging: a copy of the request on a second backend, until one answers */
	struct upconn *hedge;
	struct backend *hedge_be;
	size_t hedge_off; /* bytes of uphead sent on it */
	uint64_t hedge_sent_ns;
	uint64_t hb_next_ms; /* the next heartbeat */
	struct upconn *up;
	uint64_t connect_ms; /* when the current connect began */
	/* the rewritten request head; kept until a response starts, so a retry can resend it */
	struct buf *uphead;
	size_t uphead_off;
	/* request body: client -> s->in -> backend */
	enum http_framing req_framing;
	uint64_t req_left;
	struct http_chunked req_ch;
	uint64_t req_payload; /* payload bytes seen, against limits.max_body_bytes */
	size_t req_ready;     /* bytes at the front of s->in that belong to the body */
	uint64_t req_sent;    /* body bytes written upstream */
	unsigned req_read_done : 1;
	/* response: backend -> up->in -> client */
	unsigned resp_head : 1, resp_read_done : 1, up_reusable : 1, client_keep : 1;
	int status;
	enum http_framing resp_framing;
	uint64_t resp_left;
	struct http_chunked resp_ch;
	size_t resp_ready; /* bytes at the front of up->in that belong to the body */
};

struct session {
	struct loop_io io;
	struct loop_timer timer;
	struct worker *w;
	struct session *prev, *next;
	enum session_state state;
	int readable, writable; /* edge seen, not yet drained / not yet full */
	int hup;		/* the client shut its side (or the socket failed) */
	int hup_checked;	/* ... and client_gone() has looked at it */
	unsigned keep_alive : 1, in_exchange : 1;
	unsigned trusted : 1; /* the client is in trusted_proxies */
	struct buf *in;	 /* bytes from the client */
	struct buf *out; /* heads and proxy-made responses for the client */
	uint64_t phase_ms; /* when the current state or head began */
	uint64_t last_ms;  /* last progress of the exchange */
	size_t head_scanned;
	unsigned served;
	char client_ip[INET6_ADDRSTRLEN];
	uint64_t client_key; /* the address as tenant and hash key: classify_client_key() */
	struct exchange x;
};

struct worker {
	unsigned id;
	char tag[16];
	pthread_t thread;
	struct proxy *px;
	struct loop *loop;
	struct listener *listeners;
	size_t nlisteners;
	struct buf_pool bufs;
	struct buf_pool body_bufs; /* limits.body_buffer_bytes each, for bodies read whole */
	struct idle_list *idle; /* one per backend, indexed by backend id */
	struct session *sessions;
	unsigned nsessions, max_sessions;
	int accept_paused, draining;
	struct loop_timer accept_timer; /* accepting again after running out of descriptors */
	atomic_int drain_requested;
	uint64_t rng;
	struct http_head head; /* parse scratch, for request and response heads alike */
	struct worker_inbox inbox; /* requests granted a slot by other workers */
};

struct proxy {
	const struct conf *conf;
	struct runtime *rt;
	struct worker *workers;
	unsigned nworkers;
	struct loop *main_loop;
	atomic_uint running; /* workers whose loop still runs */
};

/* session.c */
void session_accept(struct worker *w, int fd, const struct sockaddr_storage *peer);
void session_run(struct session *s);
void session_close(struct session *s);

/* upstream.c */
struct upconn *upconn_get(struct worker *w, struct backend *be, int *err);
void upconn_release(struct upconn *up);
void upconn_close(struct upconn *up);
void upconn_close_idle(struct worker *w);

/* worker.c */
void worker_session_gone(struct worker *w);

/* session.c: run the sessions whose queued requests were granted a slot */
void session_take_grants(struct worker *w);

#endif
