/*
 * parse.h - the strict HTTP/1.1 message-head parser (RFC 9112), in place.
 *
 * The parser never copies: every string in struct http_head points into the caller's buffer,
 * which must stay put while the head is in use. It accepts only what is unambiguous and
 * rejects the rest with the status the peer should see, because a proxy that reads a message
 * differently from the server behind it is a request-smuggling hole. Rejected:
 *   - Content-Length together with Transfer-Encoding; more than one Content-Length field or
 *     value ("5, 5" too: RFC 9112 lets a recipient take it, the strictest servers refuse it);
 *     a Transfer-Encoding other than a single final "chunked"; Transfer-Encoding in HTTP/1.0;
 *   - a request whose Connection field names Content-Length, Transfer-Encoding or Host (a
 *     proxy that dropped them as hop-by-hop would forward a body framed by nothing), or
 *     more than HTTP_MAX_CONN_TOKENS options; a response's such tokens are ignored instead
 *     (its framing is regenerated from what was parsed, so they can do no harm);
 *   - HTTP versions other than 1.0 and 1.1 (505), HTTP/1.2-1.9 included;
 *   - obs-fold (a line starting with SP/HTAB), whitespace between field name and colon,
 *     a bare CR or bare LF, control characters, a missing or repeated Host in HTTP/1.1;
 *   - heads longer than the configured limit or with too many fields (431).
 * Leading empty lines before a request line are skipped, as RFC 9112 section 2.2 allows.
 * The target is taken as sent (any byte from '!' to '~'); the proxy then brings its path to
 * one normal form, in the same buffer (http/target.h).
 */
#ifndef ACCELNET_HTTP_PARSE_H
#define ACCELNET_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#define HTTP_MAX_HEADERS 96
#define HTTP_MAX_CONN_TOKENS 16 /* Connection options a message may name */

struct http_str {
	const char *p;
	uint32_t len;
};

struct http_header {
	struct http_str name, value;
};

enum http_method {
	HTTP_OTHER,
	HTTP_GET,
	HTTP_HEAD,
	HTTP_POST,
	HTTP_PUT,
	HTTP_DELETE,
	HTTP_OPTIONS,
	HTTP_TRACE,
	HTTP_PATCH,
	HTTP_CONNECT,
};

enum http_framing {
	HTTP_BODY_NONE,	   /* no body follows the head */
	HTTP_BODY_LENGTH,  /* exactly content_length bytes */
	HTTP_BODY_CHUNKED, /* chunked transfer coding */
	HTTP_BODY_CLOSE,   /* responses only: the body ends when the server closes */
};

enum http_flag {
	HTTP_F_CLOSE = 1u << 0,		  /* the sender will not keep the connection */
	HTTP_F_EXPECT_CONTINUE = 1u << 1, /* Expect: 100-continue */
	HTTP_F_UPGRADE = 1u << 2,	  /* Connection: upgrade */
	HTTP_F_HAS_CL = 1u << 3,	  /* a Content-Length field was given */
	HTTP_F_HAS_TE = 1u << 4,	  /* Transfer-Encoding: chunked was given */
};

struct http_head {
	/* request line */
	struct http_str method, target, path; /* path: target without scheme and authority */
	enum http_method meth;
	/* status line */
	int status;
	struct http_str reason;

	int minor; /* the 1 of HTTP/1.1 */
	struct http_header headers[HTTP_MAX_HEADERS];
	unsigned nheaders;
	struct http_str host; /* Host field, or the authority of an absolute-form target */
	uint32_t head_len;    /* bytes of the head, final CRLF included */
	enum http_framing framing;
	uint64_t content_length;
	unsigned flags;
	/* the options of every Connection field, in order: the hop-by-hop fields it names */
	struct http_str conn_tokens[HTTP_MAX_CONN_TOKENS];
	unsigned nconn_tokens;
};

/*
 * Parse a request head from buf[0..len). Returns the head length (> 0) once the whole head is
 * there, 0 when more bytes are needed, or a negative HTTP status: -400 malformed, -431 too
 * large, -501 unsupported (CONNECT, unknown transfer coding), -505 version, -417 expectation.
 */
int http_parse_request(const char *buf, size_t len, size_t max_head, struct http_head *h);

/*
 * Parse a response head. <req_meth> is the method of the request it answers (HEAD and
 * CONNECT change framing). Returns as http_parse_request(), with -502 for anything malformed.
 */
int http_parse_response(const char *buf, size_t len, size_t max_head, enum http_method req_meth,
			struct http_head *h);

/*
 * Cheap test run before parsing: can buf[0..len) contain a complete head, given that
 * buf[0..old_len) did not? Looks only at the new bytes (and three before), so a head arriving
 * byte by byte costs O(n), not O(n^2).
 */
int http_head_may_be_complete(const char *buf, size_t old_len, size_t len);

/*
 * Reading a request head as its bytes arrive (the server side of every HTTP/1 connection:
 * the proxy's clients, the admin endpoint, the simulator). http_head_read() parses buf[0..len)
 * only when the head may be complete, and while the request line is short enough that junk
 * (a TLS hello on a plain port) is refused at once. Returns the head's length (> 0, parsed
 * into <h>), 0 when more is needed, or -status (400, 431, 501, 505 ...). Clear <r> (or call
 * http_head_reader_reset) before each head.
 */
struct http_head_reader {
	size_t scanned; /* bytes looked at by an earlier call */
};

static inline void http_head_reader_reset(struct http_head_reader *r)
{
	r->scanned = 0;
}

int http_head_read(struct http_head_reader *r, const char *buf, size_t len, size_t max,
		   struct http_head *h);

/* <a> and <b>, <n> bytes each, equal but for the case of ASCII letters (no locale: what
 * strncasecmp() does in the C locale, without its call and its locale table per byte). */
static inline int http_ascii_caseeq(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
		if (x != y && ((x | 0x20) != (y | 0x20) || (unsigned char)((x | 0x20) - 'a') > 25))
			return 0;
	}
	return 1;
}

/*
 * Case-insensitive comparison of a parsed string with a C string. Inline so that, with a
 * literal, the length is known at compile time and most fields are rejected on length alone
 * (it runs several times per header of every proxied request).
 */
static inline int http_str_eq(struct http_str s, const char *lit)
{
	size_t n = strlen(lit);
	return s.len == n && http_ascii_caseeq(s.p, lit, n);
}
/* The first header named <name> (case-insensitive), or NULL. */
const struct http_header *http_find_header(const struct http_head *h, const char *name);
/* The header named <name> when <h> has exactly one, else NULL (none, or several: a field whose
 * sender may not repeat it, repeated, is believed in neither copy). */
const struct http_header *http_find_only_header(const struct http_head *h, const char *name);
/* Is <h> the head of an event stream (Content-Type text/event-stream, parameters aside)? */
int http_is_event_stream(const struct http_head *h);
/* Is <c> a tchar, a character of an RFC 9110 token (field names, methods)? */
int http_is_tchar(unsigned char c);
/* The end of the list member that starts at <p>: the next comma outside a quoted-string
 * (a backslash escapes the byte after it inside one), or <end>. */
const char *http_list_member_end(const char *p, const char *end);
/* Is <token> one of the comma-separated tokens of <list> (case-insensitive)? */
int http_list_has(struct http_str list, const char *token, size_t toklen);
/* Does a Connection field of <h> name the field <name> (hop-by-hop)? */
int http_conn_names(const struct http_head *h, struct http_str name);

static inline int http_method_idempotent(enum http_method m)
{
	return m == HTTP_GET || m == HTTP_HEAD || m == HTTP_PUT || m == HTTP_DELETE ||
	       m == HTTP_OPTIONS || m == HTTP_TRACE;
}

#endif
