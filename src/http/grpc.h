/*
 * grpc.h - gRPC over HTTP/2 as the proxy sees it: which requests are gRPC, the gRPC status
 * code each of the proxy's own HTTP answers stands for, the grpc-message that carries its
 * detail, and a request's grpc-timeout.
 *
 * A gRPC client reads only grpc-status and grpc-message (in the trailers, or in a
 * trailers-only response); an HTTP status of its own means little to it. So the proxy's own
 * answers to a gRPC request (no backend, a deadline, a limit, auth, no route) go out as
 * trailers-only responses with the code that says the same thing (docs/http2.md, "gRPC").
 * gRPC-Web (routes.grpc_web) is the same calls from browsers, over HTTP/1.1 or HTTP/2: its
 * content-type says so, and its trailers come as the body's last message, flagged 0x80
 * (http/h2head.h writes that frame); its text mode's bodies are base64 (http/grpc_web.h).
 * Pure: no sockets, no clocks.
 */
#ifndef ACCELNET_HTTP_GRPC_H
#define ACCELNET_HTTP_GRPC_H

#include <stddef.h>
#include <stdint.h>

/* Is the content-type value v[0..len) gRPC's ("application/grpc", or "+proto" and the like,
 * parameters after ';' aside, in any case; not gRPC-Web)? 1 or 0. */
int http_grpc_is(const char *v, size_t len);

enum http_grpc_web {
	HTTP_GRPC_WEB_NONE,
	HTTP_GRPC_WEB_BINARY, /* application/grpc-web */
	HTTP_GRPC_WEB_TEXT,   /* application/grpc-web-text: the body in base64 (grpc_web.h) */
};
/* Is it gRPC-Web's ("application/grpc-web" or "application/grpc-web-text", then nothing, a
 * "+proto" and the like, or parameters after ';', in any case), and which? *rest: where what
 * follows the type begins (its suffix and parameters, which gRPC keeps). */
enum http_grpc_web http_grpc_web_kind(const char *v, size_t len, size_t *rest);

/* The gRPC status code (0-16) that the proxy's own HTTP answer <status> stands for. */
int http_grpc_status(int status);

/* The HTTP status an OpenAI client gets for an engine's gRPC status <code> (not 0): 400 for
 * a request the engine refused as such, 401, 403, 404, 429, 501, 503, 504 as their meanings
 * go, 500 for the engine's own failures. */
int http_grpc_to_http(int code);

/* <text> as a grpc-message value into out[0..cap) (bytes outside printable ASCII, and '%',
 * percent-encoded; cut at a whole character when it does not fit). Its length. */
size_t http_grpc_message(char *out, size_t cap, const char *text);

/* A grpc-timeout value v[0..len) (1 to 8 digits and a unit: H M S m u n) in milliseconds,
 * rounded up, into *ms: 0; or -1 when it is malformed. */
int http_grpc_timeout_ms(const char *v, size_t len, uint64_t *ms);

#endif
