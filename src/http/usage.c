/*
 * usage.c - token usage read from a response body in passing (see usage.h).
 *
 * Five keys are watched byte by byte: "total_tokens":, "prompt_tokens": and
 * "completion_tokens": (then a number), "content": and "text": (then a string whose first
 * byte is not its closing quote). Each key has its own match position; a mismatch restarts
 * it (at 1 when the byte is the key's first, a quote, which none of the keys holds again
 * before its end). Lines are the SSE lines: one that starts with "data:" and holds a
 * non-empty text counts as an event when it ends. A chunked body passes through
 * http_chunked_scan() first and only its payload bytes are looked at; framing the scanner
 * finds malformed stops the count where it is (the relay refuses such a body anyway).
 */
#include "http/usage.h"

#include <string.h>

static const char *const keys[] = {"\"total_tokens\":", "\"prompt_tokens\":",
				   "\"completion_tokens\":", "\"content\":", "\"text\":"};
enum { K_TOTAL, K_PROMPT, K_COMPLETION, K_CONTENT, K_TEXT, NKEYS };
enum { A_NONE, A_NUMBER, A_STRING_OPEN, A_STRING_FIRST };

void usage_scan_init(struct usage_scan *u)
{
	memset(u, 0, sizeof(*u));
	u->line_start = 1;
}

void usage_scan_chunked(struct usage_scan *u)
{
	u->chunked = 1;
	http_chunked_init(&u->ch);
}

/* The number after key u->key is complete. */
static void number_end(struct usage_scan *u)
{
	switch (u->key) {
	case K_TOTAL:
		u->total = u->number;
		u->has_total = 1;
		break;
	case K_PROMPT:
		u->prompt = u->number;
		u->has_prompt = 1;
		break;
	default:
		u->completion = u->number;
		u->has_completion = 1;
	}
}

static void line_end(struct usage_scan *u)
{
	if (u->in_data && u->line_text)
		u->events++;
	u->in_data = u->line_text = 0;
	u->line_start = 1;
	u->data_pos = 0;
}

/* The byte <c> after a key: a number's digit, or a string's opening and first byte. */
static int after_key(struct usage_scan *u, char c)
{
	int ws = c == ' ' || c == '\t';
	switch (u->after) {
	case A_NUMBER:
		if (c >= '0' && c <= '9' && u->digits < 19) {
			u->number = u->number * 10 + (uint64_t)(c - '0');
			u->digits++;
			return 1;
		}
		if (ws && !u->digits)
			return 1;
		if (u->digits)
			number_end(u);
		break;
	case A_STRING_OPEN:
		if (ws)
			return 1;
		if (c == '"') {
			u->after = A_STRING_FIRST;
			return 1;
		}
		break;
	case A_STRING_FIRST:
		if (c != '"')
			u->line_text = 1;
		break;
	}
	u->after = A_NONE;
	return 0;
}

static void match_keys(struct usage_scan *u, char c)
{
	for (int k = 0; k < NKEYS; k++) {
		const char *key = keys[k];
		uint8_t pos = u->key_pos[k];
		if (key[pos] == c)
			pos++;
		else
			pos = c == '"';
		if (!key[pos]) {
			pos = 0;
			u->after = k < K_CONTENT ? A_NUMBER : A_STRING_OPEN;
			if (k < K_CONTENT)
				u->key = (uint8_t)k;
			u->number = 0;
			u->digits = 0;
		}
		u->key_pos[k] = pos;
	}
}

static void scan_bytes(struct usage_scan *u, const char *p, size_t len)
{
	static const char data[] = "data:";
	for (size_t i = 0; i < len; i++) {
		char c = p[i];
		if (u->after && after_key(u, c))
			continue;
		if (c == '\n') {
			line_end(u);
			continue;
		}
		if (u->line_start) {
			if (c == '\r')
				continue;
			if (c == data[u->data_pos]) {
				if (++u->data_pos == sizeof(data) - 1) {
					u->in_data = 1;
					u->line_start = 0;
				}
				continue;
			}
			u->line_start = 0;
		}
		match_keys(u, c);
	}
}

void usage_scan_feed(struct usage_scan *u, const char *p, size_t len)
{
	if (!u->chunked) {
		scan_bytes(u, p, len);
		return;
	}
	while (len && !u->bad_framing) {
		int is_data = 0;
		ssize_t n = http_chunked_scan(&u->ch, p, len, &is_data);
		if (n <= 0) {
			u->bad_framing = n < 0;
			return; /* malformed, or the body's end: nothing after it is payload */
		}
		if (is_data)
			scan_bytes(u, p, (size_t)n);
		p += n;
		len -= (size_t)n;
	}
}
