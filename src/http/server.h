/*
 * server.h - a small HTTP/1.1 origin server on an event loop, for the simulator and the
 * admin endpoint (not for the proxy path, which relays exchanges without buffering them).
 *
 * It reads a whole request (head through the strict parser, body up to 1 MiB, chunked or
 * not), hands it to the handler, and writes whatever the handler answers, now or later:
 * a whole response, or a chunked stream written piece by piece (Server-Sent Events). Keep-
 * alive and pipelining work; the next pipelined request is read only once the current
 * response is complete. If the client goes away before the response is complete, the
 * handler's abort callback runs so that it can release what it held for the request.
 * <req> and <body> given to the handler are valid until it answers or returns.
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

/* Listen on <addr> (port 0 picks a free port, see hsrv_port). 0 or -errno. */
int hsrv_start(struct loop *loop, const struct net_addr *addr, hsrv_handler_fn fn, void *arg,
	       struct hsrv **out);
int hsrv_port(const struct hsrv *srv);
/* Close the listener and every connection (abort callbacks run). */
void hsrv_stop(struct hsrv *srv);
/* Connections accepted since start. */
unsigned long hsrv_connections(const struct hsrv *srv);

/*
 * Answer the current request of <c> with a whole response. <headers> is "" or lines each
 * ending in CRLF. The connection is kept alive unless the request asked otherwise.
 */
void hsrv_respond(struct hsrv_conn *c, int status, const char *content_type,
		  const char *headers, const char *body, size_t len);
/* Start a chunked response; then hsrv_stream_write() any number of times, hsrv_stream_end(). */
int hsrv_stream_begin(struct hsrv_conn *c, int status, const char *content_type,
		      const char *headers);
/* -1 when the client is gone: the abort callback has run, forget the request. */
int hsrv_stream_write(struct hsrv_conn *c, const char *data, size_t len);
void hsrv_stream_end(struct hsrv_conn *c);
/* Run <fn>(<arg>) if the client disconnects before the response is complete. */
void hsrv_on_abort(struct hsrv_conn *c, hsrv_abort_fn fn, void *arg);

#endif
