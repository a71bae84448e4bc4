/*
 * usage.h - what an LLM response cost, read from its bytes as they pass: the
 * "prompt_tokens", "completion_tokens" and "total_tokens" of an OpenAI-style "usage" object
 * (a JSON response's, or a stream's final chunk with stream_options.include_usage; the
 * Responses API's "input_tokens" and "output_tokens" alike) and its "cached_tokens" (the
 * prompt tokens the engine's prefix cache held: OpenAI, vLLM), and the number of
 * Server-Sent Events that carry generated text, any of it: content, text, reasoning,
 * refusals, tool-call arguments, the Responses API's deltas (usage.c lists the keys): one
 * token each, the count when no usage comes.
 *
 * The scanner sees the body in pieces of any size and keeps a few bytes of state between
 * them; it does not parse JSON (a key anywhere counts, the last one seen wins). A chunked
 * body's framing is taken off first (usage_scan_chunked), with a chunked scanner of its own,
 * so an event a backend splits across chunks counts once, whole. Nothing here allocates.
 */
#ifndef ACCELNET_HTTP_USAGE_H
#define ACCELNET_HTTP_USAGE_H

#include "http/chunked.h"

#include <stddef.h>
#include <stdint.h>

#define USAGE_NAME_MAX 17 /* the longest key: completion_tokens */

struct usage_scan {
	uint64_t events;     /* data lines with generated text */
	uint64_t total;	     /* the last "total_tokens" seen, when has_total */
	uint64_t prompt;     /* the last "prompt_tokens", when has_prompt */
	uint64_t completion; /* the last "completion_tokens", when has_completion */
	uint64_t cached;     /* the last "cached_tokens", when has_cached */
	unsigned has_total : 1, has_prompt : 1, has_completion : 1, has_cached : 1;
	/* where the scanner is */
	unsigned in_data : 1, line_text : 1;
	unsigned chunked : 1, bad_framing : 1; /* framing to take off; found malformed: stop */
	/* what the next byte may be (usage.c), 0 while nothing is under way: read for every
	 * byte, so one byte written whole (a read of several fields, some just written as
	 * parts, would stall on each write before it) */
	uint8_t mode;
	struct http_chunked ch;
	uint8_t data_pos;	     /* bytes of "data:" matched at the start of a line */
	uint8_t key;		     /* the key matched last (see usage.c) */
	char name[USAGE_NAME_MAX];   /* the bytes since the last quote, ... */
	uint8_t name_len, name_prev; /* ... how many, and how many the previous quote ended */
	uint64_t number;	     /* digits of the number so far */
	uint8_t digits;
};

void usage_scan_init(struct usage_scan *u);
/* The body comes with chunked framing (after usage_scan_init, before any byte). */
void usage_scan_chunked(struct usage_scan *u);
/* Scan the next <len> bytes of the response body (framing and all, when chunked). */
void usage_scan_feed(struct usage_scan *u, const char *p, size_t len);

#endif
