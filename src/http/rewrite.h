/*
 * rewrite.h - the HTTP/1 heads the proxy writes: the request it sends upstream, the response head
 * it sends the client, and its own short error responses. The response head's rules also walk
 * field by field (rewrite_response_fields), for the HTTP/2 codec, which carries fields.
 *
 * Pure functions from a parsed head to bytes in a caller's buffer, so the unit tests check
 * exactly what goes on the wire. Hop-by-hop fields (RFC 9110 section 7.6.1: Connection and
 * every field it names, Keep-Alive, Proxy-Connection, TE, Upgrade) never cross the proxy:
 * a WebSocket handshake the proxy tunnels (routes.websocket) gets its own "Connection:
 * Upgrade" and "Upgrade: websocket", written here, never the client's or backend's.
 * Framing is never copied from the message: one Transfer-Encoding: chunked or Content-Length
 * field is written from what the parser decided, so no Connection option, duplicate or list
 * can make the next hop frame the body differently from us (request smuggling). Bodies are
 * relayed with that framing untouched -- except after an early event-stream head
 * (heartbeats), where the proxy has already promised the client a chunked body.
 *
 * X-Forwarded-For, X-Real-IP and Forwarded are believed only from trusted_proxies: for any
 * other client X-Forwarded-For is replaced by its address and the other two are dropped.
 *
 * What a route or pool configures (proxy/forward.h) comes in already checked: the target and
 * Host to send in place of the client's, and an edit of fields to drop, set and add
 * (struct rewrite_edit), applied in the same pass; values are written with every byte
 * outside printable ASCII as '?', so no value can end a field.
 *
 * One request id per request, the one the proxy logs: the backend gets it as X-Request-Id
 * (the client's field is never copied), and the client gets it on every response, relayed
 * ones too (a backend's own X-Request-Id is replaced), and in the proxy's own error bodies.
 * Likewise the trace context: the backend gets the proxy's traceparent, and the client's
 * tracestate only along a traceparent the proxy took (traceparent.h).
 */
#ifndef ACCELNET_HTTP_REWRITE_H
#define ACCELNET_HTTP_REWRITE_H

#include "http/parse.h"

#include <stddef.h>

#define REQUEST_ID_MAX 64

/* A field the proxy sets itself (TLS facts, the client certificate): see rewrite_request. */
struct rewrite_field {
	const char *name;  /* a header name */
	const char *value; /* NULL: the field is only dropped from the client's request */
};

/* Fields a route or pool edits (request_headers, response_headers): every field of the
 * message named in set is dropped, then each set one with a value and each add one written,
 * bytes outside printable ASCII as '?'. Names compare as same_field_for_cgi does ('_' is
 * '-'), so a client cannot slip one past as X_Name. */
struct rewrite_edit {
	const struct rewrite_field *set; /* value NULL: only removed */
	unsigned nset;
	const struct rewrite_field *add;
	unsigned nadd;
};

struct rewrite_request_info {
	const char *client_ip;
	const char *request_id;	 /* the id to send: kept from the client or generated */
	const char *traceparent; /* the traceparent to send (the proxy's span), or NULL */
	int pass_tracestate;	 /* the client's traceparent was taken: its tracestate goes on */
	int upstream_minor;	 /* HTTP/1.<minor> upstream: 1, or 0 for HTTP/1.0 clients */
	int trusted;		 /* the client is in trusted_proxies */
	int tls;		 /* the client came over TLS: X-Forwarded-Proto: https */
	/* an authenticated identity (routes.auth): sent as "<identity_header>: <identity>", and
	 * any field of that name from the client dropped, '_' taken for '-' (CGI backends read
	 * both alike), and X_API_Key too (the guard never read it); NULL: none (no auth) */
	const char *identity_header, *identity;
	int strip_credentials; /* drop Authorization and X-API-Key (with identity_header) */
	/* fields only the proxy may set: every client field of such a name dropped, then each
	 * with a value sent, its bytes outside printable ASCII sent as '?' (no CR, LF or other
	 * control byte reaches the backend) */
	const struct rewrite_field *set;
	unsigned nset;
	int upgrade; /* a WebSocket handshake to tunnel: Connection: Upgrade, Upgrade: websocket */
	const struct rewrite_edit *edit; /* request_headers; NULL: none */
	struct http_str path; /* the target sent (routes.rewrite); p NULL: the client's */
	const char *host;     /* the Host sent (rewrite.host); NULL: the client's */
};

/*
 * Write the upstream request head for <req>. Returns its length, or -1 if it does not fit in
 * <cap> bytes.
 */
int rewrite_request(char *out, size_t cap, const struct http_head *req,
		    const struct rewrite_request_info *info);

/*
 * Write the client response head for the upstream response <resp>. <keep_alive>: whether the
 * client connection stays open after this response; a 101 (only ever passed for a tunnelled
 * WebSocket handshake) says Connection: Upgrade, Upgrade: websocket instead. <request_id> (or NULL)
 * replaces any X-Request-Id of the backend's; <timing> (or NULL) is the X-Accelnet-Timing value,
 * and the backend's own field of that name never passes, nor its X-Accelnet-Llm (the proxy's
 * own, proxy/llm_explain.h). Returns its length or -1.
 */
int rewrite_response(char *out, size_t cap, const struct http_head *resp, int keep_alive,
		     const char *request_id, const char *timing);
/* ... with the response_headers <edit> (NULL: none) applied. */
int rewrite_response_edit(char *out, size_t cap, const struct http_head *resp, int keep_alive,
			  const char *request_id, const char *timing,
			  const struct rewrite_edit *edit);

/*
 * The same head as fields, for a codec that carries fields rather than lines (HTTP/2): the
 * rules of rewrite_response_edit() -- which of the backend's fields pass, the edit, the
 * framing, the request id, the timing -- hand each field it would write, in the same order,
 * to <put>. <kind> says what the value is; name and value last only for the call. The
 * status line is the caller's. Returns 0, or the first non-zero <put> returned (which stops
 * the walk).
 */
enum rewrite_kind {
	REWRITE_RELAYED, /* the backend's field, as it came */
	REWRITE_SAFE,	 /* a configured value: bytes outside printable ASCII go as '?' */
	REWRITE_OWN,	 /* the proxy's own (Content-Length, X-Request-Id, X-Accelnet-Timing) */
	REWRITE_HOP,	 /* of this HTTP/1 hop alone (Transfer-Encoding, Connection, Upgrade) */
};
typedef int rewrite_field_fn(void *ctx, enum rewrite_kind kind, const char *name, size_t nlen,
			     const char *value, size_t vlen);
int rewrite_response_fields(const struct http_head *resp, int keep_alive, const char *request_id,
			    const char *timing, const struct rewrite_edit *edit,
			    rewrite_field_fn *put, void *ctx);
/* src[0..n) into dst[0..n), each byte outside printable ASCII as '?' (REWRITE_SAFE). */
void rewrite_safe_copy(char *dst, const char *src, size_t n);

/*
 * The field lines p[0..len) (each ending in LF) less those <edit> sets or removes, then its
 * own, written in place (p has <cap> bytes): a head the proxy did not parse, as a stored
 * response's. Returns the new length, or -1 when it does not fit.
 */
int rewrite_edit_fields(char *p, size_t len, size_t cap, const struct rewrite_edit *edit);

/* A response the proxy makes itself. */
struct rewrite_error_info {
	int status;
	const char *detail; /* a short text of the proxy's own, never a client's bytes */
	int keep_alive;
	const char *request_id;	  /* NULL: none; else in a header and in the body */
	unsigned retry_after_s;	  /* not 0: Retry-After */
	unsigned challenges;	  /* a 401's WWW-Authenticate: REWRITE_CHALLENGE_* (0: Bearer) */
	int openai;		  /* routes.api openai: the OpenAI error JSON, not text/plain */
	const char *openai_type;  /* ... its "type" in place of the status's (a token limit's
				     429: "tokens"), or NULL */
	const char *more_headers; /* whole CRLF-ended header lines, or NULL */
	const char *timing;	  /* the X-Accelnet-Timing value, or NULL */
	const char *openai_code;  /* the OpenAI "code", in place of the status's; NULL: its */
	const char *openai_param; /* the OpenAI "param" (a field name, never a client's bytes);
				     NULL: null */
	int head_only;		  /* the answer to a HEAD: the head alone (RFC 9110 9.3.2) */
};
#define REWRITE_CHALLENGE_BEARER 1u
#define REWRITE_CHALLENGE_BASIC 2u

/*
 * Write a complete short error response: text/plain "STATUS REASON: detail (request id ID)",
 * or on an OpenAI-shaped route {"error": {"message", "type", "param", "code"},
 * "request_id": ID} as application/json
 * (401: invalid_request_error / invalid_api_key; 403: permission_error; 429: requests /
 * rate_limit_exceeded; 5xx: server_error, 503 with code service_unavailable; other 4xx:
 * invalid_request_error). Retry-After when retry_after_s is not 0, a 401's challenges,
 * then more_headers; to a HEAD (head_only) the head alone, its Content-Length that of the
 * body a GET would get. Returns its length or -1.
 */
int rewrite_error(char *out, size_t cap, const struct rewrite_error_info *e);

/* Field lines lines[0..n) (each CRLF-ended) put in before the final CRLF of the head
 * head[0..len) whose room is <cap>: the head's new length, or -1 when they do not fit (the
 * head is left as it was). */
int rewrite_head_lines(char *head, size_t len, size_t cap, const char *lines, size_t n);

/*
 * Early event streams (routes.sse_heartbeat_ms): the proxy answers a streaming request
 * itself before the backend has, with a chunked text/event-stream head and SSE comments, so
 * the client (and any idle timer between) sees life while the request waits for a slot or
 * for the first token. Each returns the bytes written, or -1 if they do not fit.
 */
int rewrite_sse_head(char *out, size_t cap, const char *request_id);
/* One chunk holding an SSE comment line. */
int rewrite_sse_comment(char *out, size_t cap, const char *text);
/* One chunk holding an SSE "error" event for <e> (its detail escaped as a JSON string, so it
 * stays on its data line), then the last chunk: data {"error": OBJECT, "request_id": ID}
 * (no request_id when NULL), OBJECT being the OpenAI error object as rewrite_error() writes
 * it on an OpenAI route, else {"status", "message", "type": "proxy_error"}. Only status,
 * detail, request_id, openai, openai_type and openai_code are read. */
int rewrite_sse_error(char *out, size_t cap, const struct rewrite_error_info *e);
/* The same event alone, unframed (an HTTP/2 stream's DATA carries it as it is). */
int rewrite_sse_error_event(char *out, size_t cap, const struct rewrite_error_info *e);

/*
 * A complete response of the proxy's own with <status> and the JSON body json[0..len)
 * (GET /v1/models): Content-Type application/json, X-Request-Id unless NULL, no-store,
 * Connection: close unless <keep_alive>. Returns its length or -1 when it does not fit.
 */
int rewrite_json(char *out, size_t cap, int status, const char *json, size_t len,
		 const char *request_id, int keep_alive);

/* "100 Continue", answered for the backend (Expect is not forwarded). Length or -1. */
int rewrite_continue(char *out, size_t cap);

/*
 * A Content-Length body relayed as one chunk (after an early event-stream head): its size
 * line, and what ends it -- the chunk's CRLF and the last chunk when <had_size> (a size
 * line went out), or the last chunk alone for an empty body.
 */
int rewrite_chunk_size(char *out, size_t cap, uint64_t n);
const char *rewrite_chunk_tail(int had_size);

/*
 * The X-Request-Id of <req> if there is exactly one and it is 1..64 characters of
 * [A-Za-z0-9._:-], copied to <out> (REQUEST_ID_MAX + 1 bytes); 0 if there is none usable.
 * Whether to believe it (trusted_proxies) is the caller's decision.
 */
int rewrite_incoming_request_id(const struct http_head *req, char *out);

/* Is field <name> of message <h> hop-by-hop (a fixed one, or named by its Connection)? */
int rewrite_is_hop_by_hop(const struct http_head *h, struct http_str name);

#endif
