/*
 * h2head.h - an HTTP/2 request's header list written as the HTTP/1.1 head it stands for.
 *
 * The proxy's stages, its rewrite and its HTTP/1 upstream half read a parsed HTTP/1 head
 * (http/parse.h). An HTTP/2 stream's header list (HPACK-decoded by nghttp2, which has checked
 * it against RFC 9113 section 8.2: lower-case names, no connection-specific fields, the
 * pseudo-header fields first and once) is written into one buffer as the head an HTTP/1.1
 * client would have sent -- request line from :method and :path, Host from :authority (a
 * host field is left out when :authority is given), the fields in order, the framing of the
 * body -- and then read by the same strict parser as every HTTP/1 head, so one set of rules
 * judges both protocols. Cookie fields, which HTTP/2 may split (RFC 9113 8.2.3), are joined
 * into one. Trailers (a header section after the body) cross between the protocols field by
 * field: h2head_trailer_ok() says which may, and h2head_trailer_line() writes one as the
 * field line of a chunked body's trailer section. Fields going out as HTTP/2 have their
 * names lowered (h2head_lower), and those the proxy writes anew for each message are never
 * indexed by HPACK (h2head_unique_field). Pure: no sockets, no clocks.
 */
#ifndef ACCELNET_HTTP_H2HEAD_H
#define ACCELNET_HTTP_H2HEAD_H

#include <stddef.h>
#include <stdint.h>

struct h2head {
	char *p;		/* the head being written ... */
	size_t cap, len;	/* ... its room and length */
	unsigned has_auth : 1;	/* :authority was given: a host field is dropped */
	unsigned line : 1;	/* the request line is written */
	unsigned has_cl : 1;	/* a content-length field was given */
	unsigned bodyless : 1;	/* the method carries no body by custom (GET, HEAD ...) */
	size_t cookie_at;	/* where the Cookie line's CRLF is, once one is written */
	unsigned cookie : 1;	/* ... and there is one */
	unsigned websocket : 1; /* an extended CONNECT written as a WebSocket handshake */
	int err;		/* the first failure: -400, -431 */
};

/* Start the head of a request of :method <m>, :path <path>, :authority <auth> (NULL: none)
 * into p[0..cap). 0, or -400 (no method or path), -431 (no room). */
int h2head_begin(struct h2head *hh, char *p, size_t cap, const char *m, size_t mlen,
		 const char *path, size_t plen, const char *auth, size_t alen);
/*
 * An extended CONNECT (RFC 8441) with :protocol websocket is written as the HTTP/1.1 opening
 * handshake it stands for (RFC 6455 4.1), so the stages and the backend read one kind of
 * WebSocket request: call after h2head_begin() with the method "GET". It adds Connection:
 * Upgrade, Upgrade: websocket and Sec-WebSocket-Key: <key> (the proxy's own: an HTTP/2 client
 * sends none, and the proxy checks the backend's answer to it); a sec-websocket-key field the
 * client sends is dropped. End the head with h2head_end(hh, 1): the handshake has no body,
 * whatever DATA follows is the tunnel's. 0, or -431.
 */
int h2head_websocket(struct h2head *hh, const char *key, size_t klen);
/* One regular field. 0, or -431 (no room), -400 (a byte no HTTP/1 line may carry). */
int h2head_field(struct h2head *hh, const char *name, size_t nlen, const char *value, size_t vlen);
/* The end of the head: the body's framing (<end_stream>: none will come; else its
 * content-length as given, or chunked) and the blank line. Its length, or -431. */
int h2head_end(struct h2head *hh, int end_stream);
/* The end of the head of a request whose whole body, <length> bytes, came without a
 * content-length field: Content-Length: LENGTH (none for an empty body of a bodyless method),
 * and the blank line. Its length, or -431. */
int h2head_end_sized(struct h2head *hh, uint64_t length);

/*
 * May a trailer field <name> (any case) cross the proxy, either way? Not the fields that frame
 * or route a message, nor those that say who asks or that the proxy writes itself in the head
 * (RFC 9110 6.5.1: a recipient may merge trailers into the head, so a client's trailer must
 * not stand in for a field the proxy controls). 1 or 0.
 */
int h2head_trailer_ok(const char *name, size_t nlen);
/*
 * Is <name> (lower case) a field the proxy writes anew for every message, its value never
 * repeated (x-request-id, traceparent)? An HPACK encoder should never index it (RFC 7541
 * 7.1.3's never-indexed literal): indexed, each value would take a place in the dynamic table,
 * push out a field that does repeat (server, content-type ...), and make the encoder compare
 * every later one with each value still in the table (libnghttp2 chains entries by name).
 * 1 or 0.
 */
int h2head_unique_field(const char *name, size_t nlen);
/* The field name src[0..n) into dst[0..n) in lower case, as HTTP/2 carries names (ASCII
 * letters lowered, every other byte as it is), eight bytes at a time. */
void h2head_lower(char *dst, const char *src, size_t n);
/*
 * Write the trailer field <name>: <value> as a field line (CRLF-ended) into p[0..cap). Its
 * length, or -1: no room, or a byte no HTTP/1 line may carry.
 */
int h2head_trailer_line(char *p, size_t cap, const char *name, size_t nlen, const char *value,
			size_t vlen);

/* One field of a trailer section. */
struct h2head_field {
	const char *name, *value;
	size_t nlen, vlen;
};
/*
 * The fields of a chunked body's trailer section p[0..len) (field lines the chunked scanner
 * found sound, then the final CRLF), names lowered in place, values without their leading and
 * trailing whitespace, those h2head_trailer_ok() refuses left out: at most <max> into out[].
 * Returns how many.
 */
size_t h2head_trailer_fields(char *p, size_t len, struct h2head_field *out, size_t max);

/*
 * The other way (proxy/up_h2.c): an HTTP/2 response written as the HTTP/1.1 bytes a backend
 * would have sent: its status line and fields (interim heads first, each ended), the final
 * head's framing (the backend's content-length kept, else chunked, or Content-Length: 0 when
 * the head ends the stream), the body's chunk framing, and its trailers as the trailer
 * section (none when the body has a content-length). Each call writes into p[0..cap) and
 * returns its length, or -1: no room, a field no HTTP/1 line may carry, or a 101 (no tunnel
 * over HTTP/2).
 */
/* gRPC-Web's trailer message (h2resp.grpc_web): its fields at most this long. */
#define H2RESP_WEB_TRAILERS 1024
struct h2resp {
	int status;	       /* the head's :status */
	unsigned has_cl : 1;   /* the final head gave content-length */
	unsigned head_in : 1;  /* the final head is written: what follows is body, trailers */
	unsigned trailers : 1; /* the trailer section has begun */
	/* set by the caller: the response goes to a gRPC-Web client (routes.grpc_web): its
	 * content-type application/grpc... becomes application/grpc-web..., and its trailers the
	 * body's last message (flag 0x80, a 4-byte length, "name:value\r\n" lines) written at
	 * h2resp_end(), where a chunked body has its trailer section; fields past
	 * H2RESP_WEB_TRAILERS are dropped, room kept for grpc-status whenever it comes; the
	 * backend's content-length is dropped too (the body goes chunked: that message grows it) */
	unsigned grpc_web : 1;
	/* set by the caller with grpc_web: the client speaks gRPC-Web's text mode
	 * (application/grpc-web-text): the content-type becomes application/grpc-web-text...,
	 * and then (web_text_body) the caller writes the body's messages in base64
	 * (grpc_web.h) and h2resp_end() the trailer message */
	unsigned grpc_web_text : 1;
	unsigned web_text_body : 1;
	unsigned web_status : 1; /* grpc-status is in web[] */
	uint16_t web_len;
	char web[H2RESP_WEB_TRAILERS];
};
/* One field of a head or of the trailers (:status makes the status line; other pseudo-header
 * fields and trailers that may not cross, h2head_trailer_ok(), write nothing). */
int h2resp_field(struct h2resp *r, char *p, size_t cap, const char *name, size_t nlen,
		 const char *value, size_t vlen);
/* A head's end (<end_stream>: it ends the response). */
int h2resp_head_end(struct h2resp *r, char *p, size_t cap, int end_stream);
/* What goes before <len> body bytes (a chunk's size line), and after them (its CRLF). */
int h2resp_data_begin(const struct h2resp *r, char *p, size_t cap, size_t len);
int h2resp_data_end(const struct h2resp *r, char *p, size_t cap, size_t len);
/* Body bytes data[0..add) joined to the chunk at <chunk> (its size line, <len> bytes of
 * payload and its CRLF: *total bytes), which may take <cap> bytes from <chunk>: the size line
 * rewritten (the payload moved when it grows by a digit), the bytes and the CRLF after the
 * payload. 0 with *total the chunk's new length, or -1 when it does not fit (nothing
 * changed). Many tiny DATA frames so cost one chunk's framing, not one each. */
int h2resp_data_join(char *chunk, size_t *total, size_t len, const char *data, size_t add,
		     size_t cap);
/* The response's end: a chunked body's last chunk, or its trailer section's end (gRPC-Web: the
 * trailer message as a chunk of its own before the last). */
int h2resp_end(struct h2resp *r, char *p, size_t cap);

#endif
