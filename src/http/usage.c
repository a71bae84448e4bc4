/*
 * usage.c - token usage read from a response body in passing (see usage.h).
 *
 * Three keys are watched byte by byte: "total_tokens": (then a number), "content": and
 * "text": (then a string whose first byte is not its closing quote). Each key has its own
 * match position; a mismatch restarts it (at 1 when the byte is the key's first, a quote,
 * which none of the keys holds again before its end). Lines are the SSE lines: one that
 * starts with "data:" and holds a non-empty text counts as an event when it ends.
 */
#include "http/usage.h"

#include <string.h>

static const char *const keys[] = {"\"total_tokens\":", "\"content\":", "\"text\":"};
enum { K_TOTAL, K_CONTENT, K_TEXT, NKEYS };
enum { A_NONE, A_NUMBER, A_STRING_OPEN, A_STRING_FIRST };

void usage_scan_init(struct usage_scan *u)
{
	memset(u, 0, sizeof(*u));
	u->line_start = 1;
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
		if (u->digits) {
			u->total = u->number;
			u->has_total = 1;
		}
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
			u->after = k == K_TOTAL ? A_NUMBER : A_STRING_OPEN;
			u->number = 0;
			u->digits = 0;
		}
		u->key_pos[k] = pos;
	}
}

void usage_scan_feed(struct usage_scan *u, const char *p, size_t len)
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
