/*
 * server.h - a small HTTP/1.1 origin server on an event loop, for the simulator and the
 * admin endpoint (not for the proxy path, which relays exchanges without buffering them).
 *
 * It reads a whole request (head through the strict parser, body up to a limit, chunked or
 * not), hands it to the handler, and writes whatever the handler answers, now or later:
 * a whole response, or a chunked stream written piece by piece (Server-Sent Events). Keep-
 * alive and pipelining work; the next pipelined request is read only once the current
 * response is complete. If the client goes away before the response is complete, the
 * handler's abort callback runs so that it can release what it held for the request.
 * <req> and <body> given to the handler are valid until it answers or returns.
 *
 * A client cannot make it hold much: while more than a small bound of answers waits unread,
 * nothing more is read or answered on that connection; struct hsrv_limits caps connections
 * (more are answered 503 and closed) and bounds how long a request may take to arrive and
 * how long a connection may sit idle or leave its answers unread.
 */
#ifndef ACCELNET_HTTP_SERVER_H
#define ACCELNET_HTTP_SERVER_H

#include "core/loop.h"
#include "http/parse.h"
#include "net/addr.h"

#include <stddef.h>

struct hsrv;
struct hsrv_conn;

/* Called once per request. <req> and <body> are valid only during the call. */
typedef void (*hsrv_handler_fn)(void *arg, struct hsrv_conn *c, const struct http_head *req,
				const char *body, size_t body_len);
typedef void (*hsrv_abort_fn)(void *arg);

struct hsrv_limits {
	unsigned max_conns; /* connections held at once; more get 503 and are closed. 0: no cap */
	unsigned header_ms; /* a request must be whole this long after it began (or after the
			       connection opened), else 408 and close. 0: no limit */
	unsigned idle_ms;   /* close a connection with no request for this long, or whose client
			       has read nothing of its pending answer for this long. 0: never */
	size_t max_body;    /* largest request body (its Content-Length, or its chunked payload,
			       refused at the chunk size line that would pass it): a larger one
			       gets 413. At least 1 */
};

/*
 * Listen on <addr> (port 0 picks a free port, see hsrv_port) with <lim>. 0 or -errno
 * (-EINVAL: lim->max_body is 0). The server lives on <loop> alone: a thread that runs its
 * own loop (loop_create, hsrv_start, loop_run) may serve with it; every call on <srv> and on
 * its connections is made from that loop's thread.
 */
int hsrv_start(struct loop *loop, const struct net_addr *addr, const struct hsrv_limits *lim,
	       hsrv_handler_fn fn, void *arg, struct hsrv **out);
/* The same on <fd>, a listening socket, which it owns from now on (closed on failure). */
int hsrv_start_fd(struct loop *loop, int fd, const struct hsrv_limits *lim, hsrv_handler_fn fn,
		  void *arg, struct hsrv **out);
int hsrv_port(const struct hsrv *srv);
/* Its listening socket (-1 once it stopped listening), e.g. for a successor to dup(). */
int hsrv_listen_fd(const struct hsrv *srv);
/* Close the listener only: idle connections close now, the others after their answer (or
 * at hsrv_stop()), each answer saying Connection: close. */
void hsrv_stop_listening(struct hsrv *srv);
/* Close the listener and every connection (abort callbacks run). */
void hsrv_stop(struct hsrv *srv);
/* Connections accepted since start. */
unsigned long hsrv_connections(const struct hsrv *srv);

/*
 * Answer the current request of <c> with a whole response. <headers> is "" or lines each
 * ending in CRLF. The connection is kept alive unless the request asked otherwise.
 */
void hsrv_respond(struct hsrv_conn *c, int status, const char *content_type, const char *headers,
		  const char *body, size_t len);
/* Start a chunked response; then hsrv_stream_write() any number of times, hsrv_stream_end(). */
int hsrv_stream_begin(struct hsrv_conn *c, int status, const char *content_type,
		      const char *headers);
/* -1 when the client is gone: the abort callback has run, forget the request. */
int hsrv_stream_write(struct hsrv_conn *c, const char *data, size_t len);
void hsrv_stream_end(struct hsrv_conn *c);
/* Close the connection once the answer to its current request is written. */
void hsrv_close_after(struct hsrv_conn *c);
/* The client's address as "HOST:PORT" in <out> ("?" when unknown); returns <out>. */
char *hsrv_peer(const struct hsrv_conn *c, char *out, size_t len);
/* Run <fn>(<arg>) if the client disconnects before the response is complete. */
void hsrv_on_abort(struct hsrv_conn *c, hsrv_abort_fn fn, void *arg);

#endif
