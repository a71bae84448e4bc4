/*
 * body.c - body framing over arriving bytes (see body.h).
 */
#include "http/body.h"

void http_body_init(struct http_body *b, enum http_framing framing, uint64_t content_length)
{
	b->framing = framing;
	b->left = framing == HTTP_BODY_LENGTH ? content_length : 0;
	http_chunked_init(&b->ch);
	b->payload = 0;
	b->ready = 0;
	b->sent = 0;
	b->done = framing == HTTP_BODY_NONE || (framing == HTTP_BODY_LENGTH && !content_length);
}

static int scan_chunked(struct http_body *b, const char *p, size_t avail, uint64_t limit)
{
	while (avail && !http_chunked_done(&b->ch)) {
		int is_data;
		ssize_t n = http_chunked_scan(&b->ch, p, avail, &is_data);
		if (n < 0)
			return -400;
		if (is_data && limit && (b->payload += (uint64_t)n) > limit)
			return -413;
		/* a chunk declared larger than what the limit leaves is refused at its size
		 * line, before a byte of it goes on (a next hop that cut sizes to 32 bits would
		 * read a short chunk and the rest as another message) */
		if (limit && http_chunked_pending(&b->ch) > limit - b->payload)
			return -413;
		b->ready += (size_t)n;
		p += n;
		avail -= (size_t)n;
	}
	b->done = http_chunked_done(&b->ch);
	return 0;
}

int http_body_scan(struct http_body *b, const char *p, size_t len, uint64_t limit)
{
	size_t avail = len > b->ready ? len - b->ready : 0;
	if (b->done || !avail)
		return 0;
	switch (b->framing) {
	case HTTP_BODY_LENGTH: {
		size_t take = avail < b->left ? avail : (size_t)b->left;
		b->ready += take;
		b->left -= take;
		b->done = b->left == 0;
		return 0;
	}
	case HTTP_BODY_CHUNKED:
		return scan_chunked(b, p + b->ready, avail, limit);
	case HTTP_BODY_CLOSE:
		b->ready += avail;
		return 0;
	case HTTP_BODY_NONE:
		break;
	}
	b->done = 1;
	return 0;
}
