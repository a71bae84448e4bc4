/*
 * usage.c - token usage read from a response body in passing (see usage.h).
 *
 * Thirteen keys are watched. Six counts: "total_tokens":, "prompt_tokens":, "completion_tokens":
 * and "cached_tokens": (prompt_tokens_details' and input_tokens_details' own: no other usage
 * key has that name), and the Responses API's "input_tokens": and "output_tokens": (read as
 * prompt and completion tokens); each then a whole number: digits and then the end of the
 * value; a fraction, an exponent or a sign is no count, and more digits than 64 bits hold
 * count as the most they hold. Seven carriers of generated text, each then a string whose
 * first byte is not its closing quote: "content": (chat), "text": (completions),
 * "reasoning_content": and "reasoning": (a reasoning model's thinking, as vLLM, SGLang and
 * DeepSeek stream it), "refusal":, "arguments": (tool_calls' and the older function_call's)
 * and "delta": (every delta event of the Responses API: output text, reasoning, refusal,
 * function-call arguments; chat's "delta" is an object, no string, so it counts nothing by
 * itself). Every token a model generates reaches the client through one of them, so a stream
 * that thinks or calls tools without a word of content still counts. Every quote may open a
 * key: the bytes after it are gathered, up to the longest key's length, and the next quote closes
 * them; when a colon follows that quote at once, the gathered name is looked up (by its length,
 * then its bytes) and a key's value is read. Being no JSON parser, it treats every quote alike, so
 * a closing quote opens the next name, as an opening one does. While nothing is gathered (past the
 * longest key), no value read and no line begun, the bytes up to the next quote or line end are
 * passed over in one tight loop, as they can change nothing. Lines are the SSE lines, ended by CR,
 * LF or CRLF as the event-stream format allows (CRLF reads as a line and an empty one, which counts
 * nothing); no name runs on past a line's end. One that starts with "data:" and holds a
 * non-empty text counts as an event when it ends. A chunked body passes
 * through http_chunked_scan() first and only its payload bytes are looked at; framing the
 * scanner finds malformed stops the count where it is (the relay refuses such a body
 * anyway).
 */
#include "http/usage.h"

#include <string.h>

/* the counts first (a whole number follows), then the carriers of generated text (a string) */
static const char *const keys[] = {"total_tokens",  "prompt_tokens", "completion_tokens",
				   "cached_tokens", "input_tokens",  "output_tokens",
				   "content",	    "text",	     "reasoning_content",
				   "reasoning",	    "refusal",	     "arguments",
				   "delta"};
enum {
	K_TOTAL,
	K_PROMPT,
	K_COMPLETION,
	K_CACHED,
	K_INPUT,
	K_OUTPUT,
	K_CONTENT, /* the first carrier */
	NKEYS = 13,
};
_Static_assert(sizeof(keys) / sizeof(keys[0]) == NKEYS, "a name for each key");
enum { K_NONE = 0xff };
enum { A_NONE, A_NUMBER, A_STRING_OPEN, A_STRING_FIRST };

/* u->mode: its low two bits what follows a key (A_*), then these flags */
enum {
	M_AFTER = 3,
	M_LINE_START = 4, /* at the start of a line: "data:" may come */
	M_GATHERING = 8,  /* the bytes since the last quote are kept in u->name */
	M_CLOSED = 16,	  /* the byte before was a quote that ended a name */
};

static inline unsigned after_of(const struct usage_scan *u)
{
	return u->mode & M_AFTER;
}

static inline void set_after(struct usage_scan *u, unsigned a)
{
	u->mode = (uint8_t)((u->mode & ~M_AFTER) | a);
}

static inline int has(const struct usage_scan *u, unsigned flag)
{
	return (u->mode & flag) != 0;
}

static inline void set(struct usage_scan *u, unsigned flag, int on)
{
	u->mode = (uint8_t)(on ? u->mode | flag : u->mode & ~flag);
}

void usage_scan_init(struct usage_scan *u)
{
	memset(u, 0, sizeof(*u));
	set(u, M_LINE_START, 1);
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
	case K_INPUT:
		u->prompt = u->number;
		u->has_prompt = 1;
		break;
	case K_CACHED:
		u->cached = u->number;
		u->has_cached = 1;
		break;
	default: /* K_COMPLETION, K_OUTPUT */
		u->completion = u->number;
		u->has_completion = 1;
	}
}

/* A line ends (CR, LF, or both: an SSE stream may use any): no name spans it. */
static void line_end(struct usage_scan *u)
{
	if (u->in_data && u->line_text)
		u->events++;
	u->in_data = u->line_text = 0;
	u->mode = M_LINE_START; /* no value under way: after_key() saw the line's end first */
	u->data_pos = 0;
}

/* The byte <c> after a key: a number's digit, or a string's opening and first byte. */
static int after_key(struct usage_scan *u, char c)
{
	int ws = c == ' ' || c == '\t';
	switch (after_of(u)) {
	case A_NUMBER:
		if (c >= '0' && c <= '9') {
			if (u->digits < 19) { /* 19 digits always fit in 64 bits */
				u->number = u->number * 10 + (uint64_t)(c - '0');
				u->digits++;
			} else { /* more: as many as there can be, never the first 19 of them */
				u->number = UINT64_MAX;
			}
			return 1;
		}
		if (ws && !u->digits)
			return 1;
		/* a whole number only: 1e300 is not 1, 12.5 not 12, -5 nothing */
		if (u->digits && (ws || c == ',' || c == '}' || c == ']' || c == '\r' || c == '\n'))
			number_end(u);
		break;
	case A_STRING_OPEN:
		if (ws)
			return 1;
		if (c == '"') {
			set_after(u, A_STRING_FIRST);
			return 1;
		}
		break;
	case A_STRING_FIRST:
		if (c != '"')
			u->line_text = 1;
		break;
	}
	set_after(u, A_NONE);
	return 0;
}

/* The key named by the <n> gathered bytes, or K_NONE. */
static uint8_t key_named(const char *name, size_t n)
{
	static const uint8_t len[NKEYS] = {12, 13, 17, 13, 12, 13, 7, 4, 17, 9, 7, 9, 5};
	for (uint8_t k = 0; k < NKEYS; k++)
		if (len[k] == n && memcmp(keys[k], name, n) == 0)
			return k;
	return K_NONE;
}

/* A byte of no line prefix and no value: a quote closes and opens names; a colon right
 * after a closing quote makes the name a key; other bytes are gathered. */
static void match_keys(struct usage_scan *u, char c)
{
	int closed = has(u, M_CLOSED);
	set(u, M_CLOSED, 0);
	if (c == '"') {
		set(u, M_CLOSED, has(u, M_GATHERING));
		u->name_prev = u->name_len;
		u->name_len = 0; /* and the next name may start here */
		set(u, M_GATHERING, 1);
		return;
	}
	if (c == ':' && closed) {
		uint8_t k = key_named(u->name, u->name_prev);
		set(u, M_GATHERING, 0);
		if (k == K_NONE)
			return;
		set_after(u, k < K_CONTENT ? A_NUMBER : A_STRING_OPEN);
		u->key = k;
		u->number = 0;
		u->digits = 0;
		return;
	}
	if (!has(u, M_GATHERING))
		return;
	if (u->name_len == USAGE_NAME_MAX) {
		set(u, M_GATHERING,
		    0); /* longer than any key: nothing to gather until the next quote */
		return;
	}
	u->name[u->name_len++] = c;
}

static void scan_bytes(struct usage_scan *u, const char *p, size_t len)
{
	static const char data[] = "data:";
	static const uint8_t stops[256] = {['"'] = 1, ['\n'] = 1, ['\r'] = 1};
	for (size_t i = 0; i < len; i++) {
		if (!u->mode) {
			/* between keys and lines only a quote or a line end can change anything */
			while (i < len && !stops[(unsigned char)p[i]])
				i++;
			if (i == len)
				break;
		}
		char c = p[i];
		if (after_of(u) && after_key(u, c))
			continue;
		if (c == '\n' || c == '\r') {
			line_end(u);
			continue;
		}
		if (has(u, M_LINE_START)) {
			if (c == data[u->data_pos]) {
				if (++u->data_pos == sizeof(data) - 1) {
					u->in_data = 1;
					set(u, M_LINE_START, 0);
				}
				continue;
			}
			set(u, M_LINE_START, 0);
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
