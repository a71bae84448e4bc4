/*
 * chattext.c - the pieces the chat formats share (chattext.h): a growable text, the trims of
 * the two Jinja engines that matter (the reference's JavaScript and the engines' Python), and
 * JSON as a template's tojson writes it. Where the two engines would write different text the
 * caller gets -EINVAL and a message, never one engine's text.
 */
#include "tok/chattext.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void chat_text_free(struct chat_text *t)
{
	free(t->p);
	memset(t, 0, sizeof(*t));
}

int chat_put(struct chat_text *t, const char *s, size_t n)
{
	if (n > t->cap - t->len) {
		size_t cap = t->cap ? t->cap : 1024;
		while (cap - t->len < n) {
			if (cap > SIZE_MAX / 2)
				return -ENOMEM;
			cap *= 2;
		}
		char *p = realloc(t->p, cap);
		if (!p)
			return -ENOMEM;
		t->p = p;
		t->cap = cap;
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
	return 0;
}

int chat_puts(struct chat_text *t, const char *s)
{
	return chat_put(t, s, strlen(s));
}

static unsigned ws_kind(unsigned cp)
{
	if ((cp >= 9 && cp <= 13) || cp == ' ' || cp == 0xa0 || cp == 0x1680 ||
	    (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
	    cp == 0x205f || cp == 0x3000)
		return CHAT_WS_JS | CHAT_WS_PY;
	if ((cp >= 0x1c && cp <= 0x1f) || cp == 0x85)
		return CHAT_WS_PY;
	return cp == 0xfeff ? CHAT_WS_JS : 0;
}

/* The length of the character at s (valid UTF-8, n > 0 bytes) when it is white space of
 * <kind>, else 0. */
static size_t ws_len(const unsigned char *s, size_t n, unsigned kind)
{
	unsigned cp;
	size_t len;
	if (s[0] < 0x80)
		cp = s[0], len = 1;
	else if ((s[0] & 0xe0) == 0xc0 && n >= 2)
		cp = (s[0] & 0x1fu) << 6 | (s[1] & 0x3fu), len = 2;
	else if ((s[0] & 0xf0) == 0xe0 && n >= 3)
		cp = (s[0] & 0x0fu) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu), len = 3;
	else
		return 0;
	return ws_kind(cp) & kind ? len : 0;
}

/* s[0..*n) with the white space of <kind> trimmed at both ends: the new start, *n its length. */
const char *chat_trim(const char *s, size_t *n, unsigned kind)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + *n;
	size_t k;
	while (p < end && (k = ws_len(p, (size_t)(end - p), kind)))
		p += k;
	while (end > p) {
		const unsigned char *q = end - 1; /* back to the last character's first byte */
		while (q > p && (*q & 0xc0) == 0x80)
			q--;
		if (ws_len(q, (size_t)(end - q), kind) != (size_t)(end - q))
			break;
		end = q;
	}
	*n = (size_t)(end - p);
	return (const char *)p;
}

int chat_trim_content(json_t *content, size_t i, const char **p, size_t *n, char *err,
		      size_t errlen)
{
	size_t npy = json_string_length(content);
	*n = npy;
	*p = chat_trim(json_string_value(content), n, CHAT_WS_JS);
	if (chat_trim(json_string_value(content), &npy, CHAT_WS_PY) == *p && npy == *n)
		return 0;
	snprintf(err, errlen,
		 "messages[%zu]: content starts or ends with a character that Python's trim and "
		 "JavaScript's disagree on (U+001C-U+001F, U+0085, U+FEFF): which the engine uses "
		 "is not known",
		 i);
	return -EINVAL;
}

/* Message <i>'s role and content, both strings (no other content is supported): 0, or
 * -EINVAL with why in <err>. */
int chat_message_text(json_t *m, size_t i, json_t **role, json_t **content, char *err,
		      size_t errlen)
{
	*role = json_object_get(m, "role");
	*content = json_object_get(m, "content");
	if (json_is_string(*role) && json_is_string(*content))
		return 0;
	snprintf(err, errlen, "messages[%zu]: %s is not a string (only text content is supported)",
		 i, json_is_string(*role) ? "content" : "role");
	return -EINVAL;
}

const char *chat_role_of(json_t *messages, size_t i)
{
	json_t *r = json_object_get(json_array_get(messages, i), "role");
	return json_is_string(r) ? json_string_value(r) : "";
}

/* s[0..n) as a JSON string literal, as Python's json.dumps (ensure_ascii false) and
 * JavaScript's JSON.stringify both write it: ", \ and the five short escapes, other control
 * bytes as \u00xx, everything else as it is. */
int chat_put_quoted(struct chat_text *t, const char *s, size_t n)
{
	char num[8];
	size_t from = 0;
	int r;
	if ((r = chat_puts(t, "\"")))
		return r;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		const char *esc = ch == '"'    ? "\\\""
				  : ch == '\\' ? "\\\\"
				  : ch == '\n' ? "\\n"
				  : ch == '\r' ? "\\r"
				  : ch == '\t' ? "\\t"
				  : ch == '\b' ? "\\b"
				  : ch == '\f' ? "\\f"
					       : NULL;
		if (!esc && ch >= 0x20)
			continue;
		if (!esc) {
			snprintf(num, sizeof(num), "\\u%04x", ch);
			esc = num;
		}
		if ((r = chat_put(t, s + from, i - from)) || (r = chat_puts(t, esc)))
			return r;
		from = i + 1;
	}
	if ((r = chat_put(t, s + from, n - from)))
		return r;
	return chat_puts(t, "\"");
}

/* A key JavaScript orders before the others whatever their order (an array index: the
 * reference's objects keep insertion order but for those). */
int chat_index_like(const char *k)
{
	size_t n = strlen(k);
	if (!n || n > 10 || (k[0] == '0' && n > 1) || strspn(k, "0123456789") != n)
		return 0;
	return strtoull(k, NULL, 10) < 4294967295ull;
}

int chat_refuse_index_key(const char *where, const char *key, char *err, size_t errlen)
{
	if (!chat_index_like(key))
		return 0;
	snprintf(err, errlen,
		 "%s: a key that is an array index (\"%s\"): JavaScript orders it first, Python "
		 "does not",
		 where, key);
	return -EINVAL;
}

/* <v> as the template's tojson writes it: Python's json.dumps with its default separators
 * (", ", ": "), keys in their order, non-ASCII as it is; the reference's tojson writes the
 * same. What the two would write differently is refused: a real number (Python writes 1.0,
 * JavaScript 1), an integer past 2^53 (JavaScript rounds it), an array-index key (JavaScript
 * puts those first). 0, -EINVAL with why in err (<where> names the value), or -ENOMEM. */
int chat_tojson(struct chat_text *t, json_t *v, const char *where, char *err, size_t errlen,
		int depth)
{
	char num[32];
	int r = 0;
	size_t i = 0;
	const char *key;
	json_t *x;
	if (depth > 64) {
		snprintf(err, errlen, "%s: nested deeper than 64", where);
		return -EINVAL;
	}
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		if ((r = chat_puts(t, "{")))
			return r;
		json_object_foreach(v, key, x)
		{
			if ((r = chat_refuse_index_key(where, key, err, errlen)))
				return r;
			if ((i++ && (r = chat_puts(t, ", "))) ||
			    (r = chat_put_quoted(t, key, strlen(key))) ||
			    (r = chat_puts(t, ": ")) ||
			    (r = chat_tojson(t, x, where, err, errlen, depth + 1)))
				return r;
		}
		return chat_puts(t, "}");
	case JSON_ARRAY:
		if ((r = chat_puts(t, "[")))
			return r;
		for (i = 0; i < json_array_size(v); i++)
			if ((i && (r = chat_puts(t, ", "))) ||
			    (r = chat_tojson(t, json_array_get(v, i), where, err, errlen,
					     depth + 1)))
				return r;
		return chat_puts(t, "]");
	case JSON_STRING:
		return chat_put_quoted(t, json_string_value(v), json_string_length(v));
	case JSON_INTEGER:
		if (json_integer_value(v) > (1ll << 53) || json_integer_value(v) < -(1ll << 53)) {
			snprintf(err, errlen,
				 "%s: an integer past 2^53 (JavaScript would round it)", where);
			return -EINVAL;
		}
		snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
		return chat_puts(t, num);
	case JSON_REAL:
		snprintf(err, errlen,
			 "%s: a number with a fraction or exponent (Python and JavaScript write "
			 "them differently)",
			 where);
		return -EINVAL;
	case JSON_TRUE:
		return chat_puts(t, "true");
	case JSON_FALSE:
		return chat_puts(t, "false");
	default:
		return chat_puts(t, "null");
	}
}
