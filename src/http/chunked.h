/*
 * chunked.h - an incremental scanner for the chunked transfer coding (RFC 9112 section 7.1).
 *
 * The proxy relays chunked bodies byte for byte; it only needs to know where the body ends
 * and that its framing is sound. The scanner is fed whatever bytes arrived, in any split,
 * and tells which of them are payload, so a peer that cannot take chunked (HTTP/1.0) can be
 * given the payload alone. Rejected: sizes without hex digits or over 16 digits, bare CR or
 * LF, control characters or non-ASCII bytes in extensions, trailer lines that are not
 * `token ":" value` (a request line smuggled into the trailer section is not a field),
 * extensions or trailers over 16 KiB.
 */
#ifndef ACCELNET_HTTP_CHUNKED_H
#define ACCELNET_HTTP_CHUNKED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct http_chunked {
	int state;
	unsigned digits;    /* hex digits of the current size */
	uint32_t extra;	    /* bytes of extensions and trailers seen, bounded */
	uint64_t remaining; /* payload bytes left in the current chunk */
};

static inline void http_chunked_init(struct http_chunked *c)
{
	c->state = 0;
	c->digits = 0;
	c->extra = 0;
	c->remaining = 0;
}

/*
 * Scan p[0..n). Returns how many bytes were consumed (stopping early only at the end of the
 * body, at the end of a payload run, or where the trailer section begins), or -1 when the
 * coding is malformed. *is_data is set when the consumed bytes are payload (and nothing
 * else).
 */
ssize_t http_chunked_scan(struct http_chunked *c, const char *p, size_t n, int *is_data);

/* Has the final chunk and its trailer section been seen? */
int http_chunked_done(const struct http_chunked *c);

/* Is the scanner inside the trailer section (the last chunk's line behind it)? The bytes a
 * scan consumes from here on are trailer field lines and the final CRLF. */
int http_chunked_in_trailers(const struct http_chunked *c);

/* Payload bytes the current chunk declared and that have not arrived yet (0 between chunks),
 * so a size line can be refused before its payload is relayed. */
uint64_t http_chunked_pending(const struct http_chunked *c);

#endif
