/*
 * prompt.c - the affinity key of an OpenAI-style JSON request body (see prompt.h).
 *
 * The scanner walks only the top level of the JSON object: keys are read as strings
 * (escapes honoured), other values are skipped with string-aware bracket counting, so a
 * "prompt" inside another field's value is never taken for the prompt. It does not decode
 * the value: the raw bytes are hashed, and they are the same for the same prompt.
 */
#include "http/prompt.h"

#include <string.h>
#include <xxhash.h>

enum { MORE = 0, BAD = -1 };

static size_t skip_ws(const char *b, size_t i, size_t len)
{
	while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
		i++;
	return i;
}

/* b[i] is '"': the index just past the closing quote, or len when it is not in yet. */
static size_t string_end(const char *b, size_t i, size_t len)
{
	for (i++; i < len; i++) {
		if (b[i] == '\\')
			i++;
		else if (b[i] == '"')
			return i + 1;
	}
	return len;
}

/*
 * The index just past the value starting at b[i], or len when it is not all in yet.
 * *bad is set for a byte no JSON value starts with.
 */
static size_t value_end(const char *b, size_t i, size_t len, int *bad)
{
	if (b[i] == '"')
		return string_end(b, i, len);
	if (b[i] == '{' || b[i] == '[') {
		unsigned depth = 0;
		while (i < len) {
			char ch = b[i];
			if (ch == '"') {
				i = string_end(b, i, len);
				continue;
			}
			if (ch == '{' || ch == '[')
				depth++;
			else if ((ch == '}' || ch == ']') && --depth == 0)
				return i + 1;
			i++;
		}
		return len;
	}
	if (!strchr("-0123456789tfn", b[i])) {
		*bad = 1;
		return len;
	}
	while (i < len && !strchr(",}] \t\r\n", b[i]))
		i++;
	return i;
}

static int key_is(const char *b, size_t start, size_t end, const char *name)
{
	size_t n = strlen(name);
	return end - start == n + 2 && memcmp(b + start + 1, name, n) == 0;
}

/* Does the top-level key buf[ks..ke) (quotes included), with a value starting <first>, count? */
typedef int field_pred(const char *buf, size_t ks, size_t ke, char first);

/*
 * Find the first top-level field of the JSON object in buf[0..len) that <want> accepts.
 * 1: its value is buf[*vs..*ve) (*ve == len when it may go on); 0: more bytes needed;
 * -1: not there, or not a JSON object.
 */
static int top_field(const char *buf, size_t len, int complete, field_pred *want, size_t *vs,
		     size_t *ve)
{
	int result = complete ? BAD : MORE; /* what running out of bytes means */
	size_t i = skip_ws(buf, 0, len);
	if (i == len)
		return result;
	if (buf[i] != '{')
		return BAD;
	i++;
	for (;;) {
		i = skip_ws(buf, i, len);
		if (i == len)
			return result;
		if (buf[i] == '}')
			return BAD; /* the end of the object, and no such field */
		if (buf[i] != '"')
			return BAD;
		size_t kstart = i, kend = string_end(buf, i, len);
		if (kend == len)
			return result;
		i = skip_ws(buf, kend, len);
		if (i == len)
			return result;
		if (buf[i] != ':')
			return BAD;
		i = skip_ws(buf, i + 1, len);
		if (i == len)
			return result;
		int bad = 0;
		size_t vend = value_end(buf, i, len, &bad);
		if (bad)
			return BAD;
		if (want(buf, kstart, kend, buf[i])) {
			*vs = i;
			*ve = vend;
			return 1;
		}
		if (vend == len)
			return result;
		i = skip_ws(buf, vend, len);
		if (i == len)
			return result;
		if (buf[i] == ',')
			i++;
		else if (buf[i] != '}')
			return BAD;
	}
}

static int is_prompt(const char *buf, size_t ks, size_t ke, char first)
{
	return (key_is(buf, ks, ke, "prompt") && (first == '"' || first == '[')) ||
	       (key_is(buf, ks, ke, "messages") && first == '[');
}

static int is_stream(const char *buf, size_t ks, size_t ke, char first)
{
	(void)first;
	return key_is(buf, ks, ke, "stream");
}

int http_prompt_key(const char *buf, size_t len, int complete, size_t prefix_bytes, uint64_t *key)
{
	size_t vs, ve;
	int r = top_field(buf, len, complete, is_prompt, &vs, &ve);
	if (r != 1)
		return r;
	size_t have = ve - vs;
	if (have < prefix_bytes && ve == len && !complete)
		return MORE; /* the value goes on: wait for the prefix */
	*key = XXH3_64bits(buf + vs, have < prefix_bytes ? have : prefix_bytes);
	return 1;
}

int http_wants_stream(const char *buf, size_t len)
{
	size_t vs, ve;
	return top_field(buf, len, 0, is_stream, &vs, &ve) == 1 && ve - vs >= 4 &&
	       memcmp(buf + vs, "true", 4) == 0;
}

static int is_max_tokens(const char *buf, size_t ks, size_t ke, char first)
{
	return (key_is(buf, ks, ke, "max_tokens") ||
		key_is(buf, ks, ke, "max_completion_tokens")) &&
	       first >= '0' && first <= '9';
}

long http_max_tokens(const char *buf, size_t len)
{
	size_t vs, ve;
	if (top_field(buf, len, 1, is_max_tokens, &vs, &ve) != 1 || ve == len || ve - vs > 10)
		return -1;
	long n = 0;
	for (size_t i = vs; i < ve; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return -1; /* 1.5, 1e3: not a count */
		n = n * 10 + (buf[i] - '0');
	}
	return n < 0x7fffffffL ? n : -1;
}
