/*
 * body.h - where an HTTP/1 message body ends: its framing tracked over the bytes that arrive.
 *
 * The proxy relays bodies as they are; it needs to know which bytes at the front of a buffer
 * belong to the body ("ready" to relay), when the body is complete, and that its framing is
 * sound. http_body_scan() is fed the buffer each time more arrived and extends the ready
 * count over the new bytes: a Content-Length body up to its length, a chunked body through
 * the chunked scanner (http/chunked.h) with the payload counted against a limit, a body
 * that ends when the server closes (responses only) wholly. Whoever relays the ready bytes
 * says so with http_body_sent(). Pure: no sockets, no clocks.
 */
#ifndef ACCELNET_HTTP_BODY_H
#define ACCELNET_HTTP_BODY_H

#include "http/chunked.h"
#include "http/parse.h"

#include <stddef.h>
#include <stdint.h>

struct http_body {
	enum http_framing framing;
	uint64_t left;		/* HTTP_BODY_LENGTH: bytes not yet scanned */
	struct http_chunked ch; /* HTTP_BODY_CHUNKED */
	uint64_t payload;	/* chunked payload bytes seen, against the limit */
	size_t ready;		/* bytes at the front of the buffer that belong to the body */
	uint64_t sent;		/* body bytes relayed so far */
	unsigned done : 1;	/* the whole body has been scanned */
};

/* Start tracking a body of <framing> (and <content_length> for HTTP_BODY_LENGTH). */
void http_body_init(struct http_body *b, enum http_framing framing, uint64_t content_length);

/*
 * Extend b->ready over the bytes of p[0..len) past it (<p> is the front of the buffer the
 * body is read into). <limit>: the most chunked payload accepted (0: no limit); a chunk
 * whose declared size would pass it is refused at its size line, before any of it is
 * relayed. Returns 0, -400 for malformed framing, or -413 when the limit is passed.
 */
int http_body_scan(struct http_body *b, const char *p, size_t len, uint64_t limit);

/* <n> ready bytes went on (and left the front of the buffer). */
static inline void http_body_sent(struct http_body *b, size_t n)
{
	b->ready -= n;
	b->sent += n;
}

#endif
