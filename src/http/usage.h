/*
 * usage.h - what an LLM response cost, read from its bytes as they pass: the "total_tokens"
 * of an OpenAI-style "usage" object (a JSON response's, or a stream's final chunk with
 * stream_options.include_usage), and the number of Server-Sent Events that carry generated
 * text ("content" or "text" not empty): one token each, the count when no usage comes.
 *
 * The scanner sees the body in pieces of any size and keeps a few bytes of state between
 * them; it does not parse JSON (a "total_tokens" key anywhere counts, the last one seen
 * wins) and does not undo chunked framing (a backend that splits one event across chunks
 * may have it miscounted). Nothing here allocates.
 */
#ifndef ACCELNET_HTTP_USAGE_H
#define ACCELNET_HTTP_USAGE_H

#include <stddef.h>
#include <stdint.h>

struct usage_scan {
	uint64_t events; /* data lines with generated text */
	uint64_t total;	 /* the last "total_tokens" seen, when has_total */
	unsigned has_total : 1;
	/* where the scanner is */
	unsigned line_start : 1, in_data : 1, line_text : 1;
	uint8_t data_pos;   /* bytes of "data:" matched at the start of a line */
	uint8_t key;	    /* which key matched last (see usage.c) */
	uint8_t key_pos[3]; /* bytes matched of each key */
	uint8_t after;	    /* after a key: what is expected next */
	uint64_t number;    /* digits of total_tokens so far */
	uint8_t digits;
};

void usage_scan_init(struct usage_scan *u);
/* Scan the next <len> bytes of the response body. */
void usage_scan_feed(struct usage_scan *u, const char *p, size_t len);

#endif
