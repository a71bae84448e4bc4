/*
 * chat.c - the chat formats (chat.h). A template is known by the xxh3 of its exact text: a
 * template that differs by one character (a newer revision of a model's, with tools or a
 * date line) is another template, refused until it is written here and checked against the
 * reference (tests/integration/test_tokenize.py renders the model's own template with
 * @huggingface/jinja and encodes it with `tokenizers`).
 *
 * Llama 3: for each message, "<|start_header_id|>ROLE<|end_header_id|>\n\n", its content
 * with white space trimmed at both ends, "<|eot_id|>"; the BOS before the first; then the
 * assistant's header, always (the template adds the generation prompt unasked).
 *
 * Its `trim` is where Jinja engines part: @huggingface/jinja (the reference here) trims as
 * JavaScript does, the engines' Python jinja2 as str.strip() does. They agree but on U+001C
 * to U+001F and U+0085 (Python's white space only) and U+FEFF (JavaScript's only): a content
 * that starts or ends with one of those is refused, rather than given the ids of one engine
 * when the model may be served by the other.
 */
#include "tok/chat.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const struct {
	uint64_t hash;
	size_t len;
	enum chat_format format;
	const char *name;
} known[] = {
    {0xb97891b7adc1beb8ull, 348, CHAT_LLAMA3, "llama3"},
};

void chat_text_free(struct chat_text *t)
{
	free(t->p);
	memset(t, 0, sizeof(*t));
}

int chat_load(const char *path, struct chat *c, char *err, size_t errlen)
{
	json_error_t je;
	/* model_max_length is often 1e30 written as an integer: read integers as reals */
	json_t *root = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
	int r = -EINVAL;
	memset(c, 0, sizeof(*c));
	if (!root) {
		if (je.line < 0)
			snprintf(err, errlen, "%s", je.text);
		else
			snprintf(err, errlen, "%s:%d:%d: %s", path, je.line, je.column, je.text);
		return json_error_code(&je) == json_error_cannot_open_file ? -ENOENT : -EINVAL;
	}
	json_t *tpl = json_object_get(root, "chat_template");
	json_t *bos = json_object_get(root, "bos_token");
	if (json_is_object(bos))
		bos = json_object_get(bos, "content");
	if (!json_is_string(tpl)) {
		snprintf(err, errlen, "%s: chat_template: %s", path,
			 tpl ? "not one string (a list of named templates is not supported)"
			     : "missing");
		goto fail;
	}
	uint64_t h = XXH3_64bits(json_string_value(tpl), json_string_length(tpl));
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (known[i].hash == h && known[i].len == json_string_length(tpl))
			c->format = known[i].format;
	if (!c->format) {
		snprintf(err, errlen,
			 "%s: chat_template: not one accelnet knows (%zu characters, xxh3 "
			 "%016llx); known: llama3",
			 path, json_string_length(tpl), (unsigned long long)h);
		goto fail;
	}
	if (!json_is_string(bos) || json_string_length(bos) >= sizeof(c->bos)) {
		snprintf(err, errlen, "%s: bos_token: missing, or not a short string", path);
		goto fail;
	}
	memcpy(c->bos, json_string_value(bos), json_string_length(bos) + 1);
	r = 0;
fail:
	json_decref(root);
	return r;
}

static int put(struct chat_text *t, const char *s, size_t n)
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

static int puts_(struct chat_text *t, const char *s)
{
	return put(t, s, strlen(s));
}

#define WS_JS 1 /* white space to JavaScript's trim (the reference Jinja's) */
#define WS_PY 2 /* white space to Python's str.strip (jinja2's trim, the engines') */

static unsigned ws_kind(unsigned cp)
{
	if ((cp >= 9 && cp <= 13) || cp == ' ' || cp == 0xa0 || cp == 0x1680 ||
	    (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
	    cp == 0x205f || cp == 0x3000)
		return WS_JS | WS_PY;
	if ((cp >= 0x1c && cp <= 0x1f) || cp == 0x85)
		return WS_PY;
	return cp == 0xfeff ? WS_JS : 0;
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
static const char *trim(const char *s, size_t *n, unsigned kind)
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

int chat_render(const struct chat *c, json_t *messages, struct chat_text *out, char *err,
		size_t errlen)
{
	out->len = 0;
	if (!json_is_array(messages)) {
		snprintf(err, errlen, "messages: not an array");
		return -EINVAL;
	}
	size_t i;
	json_t *m;
	int r = 0;
	json_array_foreach(messages, i, m)
	{
		json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
		if (!json_is_string(role) || !json_is_string(content)) {
			snprintf(err, errlen,
				 "messages[%zu]: %s is not a string (only text content is "
				 "supported)",
				 i, json_is_string(role) ? "content" : "role");
			return -EINVAL;
		}
		size_t n = json_string_length(content), npy = n;
		const char *text = trim(json_string_value(content), &n, WS_JS);
		if (trim(json_string_value(content), &npy, WS_PY) != text || npy != n) {
			snprintf(
			    err, errlen,
			    "messages[%zu]: content starts or ends with a character that "
			    "Python's trim and JavaScript's disagree on (U+001C-U+001F, U+0085, "
			    "U+FEFF): which the engine uses is not known",
			    i);
			return -EINVAL;
		}
		if ((i == 0 && (r = puts_(out, c->bos))) ||
		    (r = puts_(out, "<|start_header_id|>")) ||
		    (r = put(out, json_string_value(role), json_string_length(role))) ||
		    (r = puts_(out, "<|end_header_id|>\n\n")) || (r = put(out, text, n)) ||
		    (r = puts_(out, "<|eot_id|>")))
			return r;
	}
	return puts_(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}
