/*
 * up_h2.h - HTTP/2 to backends (pools[].protocol: h2, h2c): a few connections to each backend
 * per worker (pools[].http2_connections), each request a stream of one of them.
 *
 * What works on an upstream connection -- the attempt (attempt.h), the HTTP/1 upstream half
 * (up_h1.h) with its response scan, retries, deadlines, both client codecs -- works on a
 * struct upconn. A stream stands for one: the attempt holds a struct upconn whose h2s points
 * to the stream and whose conn is none (fd -1); the upstream half writes the rewritten
 * request into it as into a socket (up_h2_writev) and takes the response from it as from one
 * (up_h2_pull, through the reading callbacks it started on up->conn). The stream reads the
 * request it is given as HTTP/1.1 and sends it as HEADERS and DATA (a chunked body's framing
 * dropped, its trailer section sent as trailers), and writes the response it gets as the
 * HTTP/1.1 bytes a backend would have sent: the head, the body chunked unless the backend gave
 * a content-length, trailers in the chunked body's trailer section. One copy each way, and
 * everything above stays as it is. For a pool that speaks its engine's own gRPC API
 * (pools[].engine) the stream gathers the whole request and sends the engine's call in its
 * place, and writes the engine's answer as the OpenAI response (engine_grpc.h).
 *
 * A gRPC-Web request (routes.grpc_web: up->grpc_web) goes as gRPC (content-type without
 * "-web"), and its answer is written as gRPC-Web (h2resp.grpc_web: the trailers as the body's
 * last message), so either client codec relays it as it is. In text mode ("-web-text") the
 * request body is decoded from base64 as it is written and the answer's body encoded as it
 * comes (http/grpc_web.h); a body that is not base64 is answered by the stream itself, in
 * gRPC's terms, its backend stream reset.
 *
 * A connection that fails before a stream's response began fails the stream as a refused or
 * reset connection fails an attempt (the attempt machinery retries it); within a response,
 * the response is cut. GOAWAY from the backend: the streams it did not take end as reset
 * before their response (retried), the others finish, and new streams go to another
 * connection. The backend's SETTINGS_MAX_CONCURRENT_STREAMS is kept: a stream past it waits
 * in nghttp2 until one ends, on the least busy connection once all http2_connections are open.
 */
#ifndef ACCELNET_PROXY_UP_H2_H
#define ACCELNET_PROXY_UP_H2_H

#include "proxy/upstream.h"

#include <sys/types.h>
#include <sys/uio.h>

/* A new stream to <be> (its pool's protocol is h2 or h2c) on one of its connections, opened
 * if need be; connecting while that connection is. NULL with *err = -errno. */
struct upconn *up_h2_get(struct worker *w, struct backend *be, int *err);

/* The attempt lets the stream go: reset (CANCEL) unless its exchange is over, its buffers
 * back. */
void up_h2_put(struct upconn *up);

/* The request's bytes, HTTP/1.1 as a socket would take them: all of the head, and of the body
 * what the stream has room for. A count, -EAGAIN (no room now: up->writable is cleared, and
 * set again with a wake when there is), or -errno. */
ssize_t up_h2_writev(struct upconn *up, const struct iovec *iov, int n);

/* Move what the stream has of the response into the room of the reader registered on up->conn
 * (net_conn_read_start), without its ready: 1 when anything went, else 0. */
int up_h2_pull(struct upconn *up);

/* Draining: close the connections with no stream; the others go once their streams end. */
void up_h2_close_idle(struct worker *w);

#endif
