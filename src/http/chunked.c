/*
 * chunked.c - the chunked-coding scanner, a byte-at-a-time state machine except over
 * payload, which it skips in one step.
 */
#include "http/chunked.h"
#include "core/hex.h"
#include "http/parse.h"

enum {
	CH_SIZE,	/* hex digits of chunk-size */
	CH_SIZE_BWS,	/* whitespace after the size, before ';' */
	CH_EXT,		/* chunk extensions, up to CR */
	CH_SIZE_LF,	/* LF after the size line */
	CH_DATA,	/* payload */
	CH_DATA_CR,	/* CR after payload */
	CH_DATA_LF,	/* LF after payload */
	CH_TRAILER,	/* start of a trailer line (or of the final CRLF) */
	CH_TRAILER_IN,	/* inside a trailer field's name */
	CH_TRAILER_VAL, /* inside its value */
	CH_TRAILER_LF,	/* LF ending a trailer line */
	CH_FINAL_LF,	/* LF of the final CRLF */
	CH_DONE,
};

#define CH_MAX_EXTRA (16 * 1024)

int http_chunked_done(const struct http_chunked *c)
{
	return c->state == CH_DONE;
}

int http_chunked_in_trailers(const struct http_chunked *c)
{
	return c->state >= CH_TRAILER && c->state <= CH_FINAL_LF;
}

uint64_t http_chunked_pending(const struct http_chunked *c)
{
	return c->state == CH_DATA ? c->remaining : 0;
}

ssize_t http_chunked_scan(struct http_chunked *c, const char *p, size_t n, int *is_data)
{
	size_t i = 0;
	*is_data = 0;
	if (c->state == CH_DATA && n) {
		size_t take = c->remaining < n ? (size_t)c->remaining : n;
		c->remaining -= take;
		if (!c->remaining)
			c->state = CH_DATA_CR;
		*is_data = 1;
		return (ssize_t)take;
	}
	while (i < n) {
		unsigned char ch = (unsigned char)p[i];
		switch (c->state) {
		case CH_SIZE: {
			int v = hex_value(ch);
			if (v >= 0) {
				if (++c->digits > 16)
					return -1;
				c->remaining = (c->remaining << 4) | (uint64_t)v;
				break;
			}
			if (!c->digits)
				return -1;
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			else if (ch == ';')
				c->state = CH_EXT;
			else if (ch == ' ' || ch == '\t')
				c->state = CH_SIZE_BWS;
			else
				return -1;
			break;
		}
		case CH_SIZE_BWS:
			if (ch == ';')
				c->state = CH_EXT;
			else if (ch != ' ' && ch != '\t')
				return -1;
			break;
		case CH_EXT:
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			else if ((ch < 0x20 && ch != '\t') || ch >= 0x7f ||
				 ++c->extra > CH_MAX_EXTRA)
				return -1;
			break;
		case CH_SIZE_LF:
			if (ch != '\n')
				return -1;
			c->digits = 0;
			if (c->remaining == 0) {
				/* stop here too: what follows is the trailer section */
				c->state = CH_TRAILER;
				return (ssize_t)(i + 1);
			}
			c->state = CH_DATA;
			/* stop here: the payload that follows is returned on its own */
			return (ssize_t)(i + 1);
		case CH_DATA_CR:
			if (ch != '\r')
				return -1;
			c->state = CH_DATA_LF;
			break;
		case CH_DATA_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_SIZE;
			c->remaining = 0;
			break;
		case CH_TRAILER:
			if (ch == '\r') {
				c->state = CH_FINAL_LF;
				break;
			}
			if (!http_is_tchar(ch))
				return -1; /* a trailer is a field line: token ":" value */
			c->state = CH_TRAILER_IN;
			/* fall through */
		case CH_TRAILER_IN:
			if (ch == ':')
				c->state = CH_TRAILER_VAL;
			else if (!http_is_tchar(ch))
				return -1;
			if (++c->extra > CH_MAX_EXTRA)
				return -1;
			break;
		case CH_TRAILER_VAL:
			if (ch == '\r')
				c->state = CH_TRAILER_LF;
			else if ((ch < 0x20 && ch != '\t') || ch == 0x7f ||
				 ++c->extra > CH_MAX_EXTRA)
				return -1;
			break;
		case CH_TRAILER_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_TRAILER;
			break;
		case CH_FINAL_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_DONE;
			return (ssize_t)(i + 1);
		case CH_DONE:
			return (ssize_t)i;
		default:
			return -1;
		}
		i++;
	}
	return (ssize_t)i;
}
