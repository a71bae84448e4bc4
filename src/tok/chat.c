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
 *
 * Qwen 3: ChatML. The first system message, then each user or later system message as
 * "<|im_start|>ROLE\nCONTENT<|im_end|>\n"; tool results gathered into one user turn; an
 * assistant turn split at "</think>" into reasoning and answer, the reasoning kept (in a
 * <think> block) only after the last real user query (one that is not a <tool_response>
 * alone). The template strips '\n' around the tags; the reference's strip ignores its argument
 * and strips all white space: where the two give different text the message is refused, as
 * for Llama 3's trim. Tools and tool calls are not rendered: tool_calls is refused.
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
    {0x0283f874ff58d644ull, 4116, CHAT_QWEN3, "qwen3"},
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
			 "%s: chat_template: not one accelnet knows (%zu bytes, xxh3 "
			 "%016llx); known: llama3, qwen3",
			 path, json_string_length(tpl), (unsigned long long)h);
		goto fail;
	}
	if (c->format == CHAT_LLAMA3 &&
	    (!json_is_string(bos) || json_string_length(bos) >= sizeof(c->bos))) {
		snprintf(err, errlen, "%s: bos_token: missing, or not a short string", path);
		goto fail;
	}
	if (json_is_string(bos) && json_string_length(bos) < sizeof(c->bos))
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

/* Message <i>'s role and content, both strings (no other content is supported): 0, or
 * -EINVAL with why in <err>. */
static int message_text(json_t *m, size_t i, json_t **role, json_t **content, char *err,
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

static int render_llama3(const struct chat *c, json_t *messages, struct chat_text *out, char *err,
			 size_t errlen)
{
	size_t i;
	json_t *m;
	int r = 0;
	json_array_foreach(messages, i, m)
	{
		json_t *role, *content;
		if (message_text(m, i, &role, &content, err, errlen) < 0)
			return -EINVAL;
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

/* The text of s[0..n) after <kind> white space is stripped from its start (<end> 0), its end
 * (1) or both (2): *p, *n. Python's strip('\n') and JavaScript's trimStart() and the like
 * (which the reference's strip runs, whatever characters it is given): 0 when both give the
 * same text, -1 when they do not. */
static int strip_nl(const char **p, size_t *n, int end)
{
	size_t a = 0, b = *n, ja, jb;
	const char *s = *p;
	if (end != 1)
		while (a < b && s[a] == '\n')
			a++;
	if (end != 0)
		while (b > a && s[b - 1] == '\n')
			b--;
	size_t jn = *n;
	const char *j = trim(s, &jn, WS_JS);
	ja = end != 1 ? (size_t)(j - s) : 0;
	jb = end != 0 ? (size_t)(j - s) + jn : *n;
	if (end == 1 && jn == 0)
		jb = 0; /* all white space: trim() put its start at the end */
	if (end == 0 && jn == 0)
		ja = *n;
	if (a != ja || b != jb)
		return -1;
	*p = s + a;
	*n = b - a;
	return 0;
}

static const char *role_of(json_t *messages, size_t i)
{
	json_t *r = json_object_get(json_array_get(messages, i), "role");
	return json_is_string(r) ? json_string_value(r) : "";
}

/* Where the reference's assistant turn and the engines' part on white space: refuse. */
static int disagree(char *err, size_t errlen, size_t i)
{
	snprintf(err, errlen,
		 "messages[%zu]: content around <think> or </think> has white space that "
		 "Python's strip('\\n') and the reference Jinja's strip treat differently",
		 i);
	return -EINVAL;
}

/* The last occurrence of <pat> in s[0..n), or NULL. */
static const char *find_last(const char *s, size_t n, const char *pat)
{
	const char *last = NULL, *q = s;
	size_t k = strlen(pat);
	while ((q = memmem(q, n - (size_t)(q - s), pat, k))) {
		last = q;
		q++;
	}
	return last;
}

/* s[0..n) as a JSON string literal, as Python's json.dumps (ensure_ascii false) and
 * JavaScript's JSON.stringify both write it: ", \ and the five short escapes, other control
 * bytes as \u00xx, everything else as it is. */
static int put_quoted(struct chat_text *t, const char *s, size_t n)
{
	char num[8];
	size_t from = 0;
	int r;
	if ((r = puts_(t, "\"")))
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
		if ((r = put(t, s + from, i - from)) || (r = puts_(t, esc)))
			return r;
		from = i + 1;
	}
	if ((r = put(t, s + from, n - from)))
		return r;
	return puts_(t, "\"");
}

/* A key JavaScript orders before the others whatever their order (an array index: the
 * reference's objects keep insertion order but for those). */
static int index_like(const char *k)
{
	size_t n = strlen(k);
	if (!n || n > 10 || (k[0] == '0' && n > 1) || strspn(k, "0123456789") != n)
		return 0;
	return strtoull(k, NULL, 10) < 4294967295ull;
}

/* <v> as the template's tojson writes it: Python's json.dumps with its default separators
 * (", ", ": "), keys in their order, non-ASCII as it is; the reference's tojson writes the
 * same. What the two would write differently is refused: a real number (Python writes 1.0,
 * JavaScript 1), an integer past 2^53 (JavaScript rounds it), an array-index key (JavaScript
 * puts those first). 0, -EINVAL with why in err (<where> names the value), or -ENOMEM. */
static int tojson(struct chat_text *t, json_t *v, const char *where, char *err, size_t errlen,
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
		if ((r = puts_(t, "{")))
			return r;
		json_object_foreach(v, key, x)
		{
			if (index_like(key)) {
				snprintf(err, errlen,
					 "%s: a key that is an array index (\"%s\"): JavaScript "
					 "orders it first, Python does not",
					 where, key);
				return -EINVAL;
			}
			if ((i++ && (r = puts_(t, ", "))) ||
			    (r = put_quoted(t, key, strlen(key))) || (r = puts_(t, ": ")) ||
			    (r = tojson(t, x, where, err, errlen, depth + 1)))
				return r;
		}
		return puts_(t, "}");
	case JSON_ARRAY:
		if ((r = puts_(t, "[")))
			return r;
		for (i = 0; i < json_array_size(v); i++)
			if ((i && (r = puts_(t, ", "))) ||
			    (r = tojson(t, json_array_get(v, i), where, err, errlen, depth + 1)))
				return r;
		return puts_(t, "]");
	case JSON_STRING:
		return put_quoted(t, json_string_value(v), json_string_length(v));
	case JSON_INTEGER:
		if (json_integer_value(v) > (1ll << 53) || json_integer_value(v) < -(1ll << 53)) {
			snprintf(err, errlen,
				 "%s: an integer past 2^53 (JavaScript would round it)", where);
			return -EINVAL;
		}
		snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
		return puts_(t, num);
	case JSON_REAL:
		snprintf(err, errlen,
			 "%s: a number with a fraction or exponent (Python and JavaScript write "
			 "them differently)",
			 where);
		return -EINVAL;
	case JSON_TRUE:
		return puts_(t, "true");
	case JSON_FALSE:
		return puts_(t, "false");
	default:
		return puts_(t, "null");
	}
}

/* The system turn of a request with tools: each tool's tojson, between Qwen's words. */
static int qwen3_tools(json_t *messages, json_t *tools, struct chat_text *out, char *err,
		       size_t errlen)
{
	int r;
	size_t i;
	json_t *tool;
	char where[32];
	if ((r = puts_(out, "<|im_start|>system\n")))
		return r;
	if (json_array_size(messages) && !strcmp(role_of(messages, 0), "system")) {
		json_t *c0 = json_object_get(json_array_get(messages, 0), "content");
		if ((r = put(out, json_string_value(c0), json_string_length(c0))) ||
		    (r = puts_(out, "\n\n")))
			return r;
	}
	if ((r = puts_(out, "# Tools\n\nYou may call one or more functions to assist with the "
			    "user query.\n\nYou are provided with function signatures within "
			    "<tools></tools> XML tags:\n<tools>")))
		return r;
	json_array_foreach(tools, i, tool)
	{
		snprintf(where, sizeof(where), "tools[%zu]", i);
		if ((r = puts_(out, "\n")) || (r = tojson(out, tool, where, err, errlen, 0)))
			return r;
	}
	return puts_(out, "\n</tools>\n\nFor each function call, return a json object with "
			  "function name and arguments within <tool_call></tool_call> XML "
			  "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
			  "<args-json-object>}\n</tool_call><|im_end|>\n");
}

/* An assistant turn's tool_calls (a non-empty array), after its content <cn> bytes long. */
static int qwen3_tool_calls(json_t *calls, size_t cn, size_t m, struct chat_text *out, char *err,
			    size_t errlen)
{
	size_t i;
	json_t *call;
	int r;
	char where[64];
	json_array_foreach(calls, i, call)
	{
		json_t *f = json_object_get(call, "function");
		if (json_is_object(f) && json_object_size(f))
			call = f;
		json_t *name = json_object_get(call, "name"),
		       *args = json_object_get(call, "arguments");
		snprintf(where, sizeof(where), "messages[%zu].tool_calls[%zu]", m, i);
		if (!json_is_string(name) || !args) {
			snprintf(err, errlen, "%s: %s", where,
				 !json_is_string(name) ? "no function name (a string)"
						       : "no arguments");
			return -EINVAL;
		}
		if (((i || cn) && (r = puts_(out, "\n"))) ||
		    (r = puts_(out, "<tool_call>\n{\"name\": \"")) ||
		    (r = put(out, json_string_value(name), json_string_length(name))) ||
		    (r = puts_(out, "\", \"arguments\": ")))
			return r;
		if (json_is_string(args))
			r = put(out, json_string_value(args), json_string_length(args));
		else
			r = tojson(out, args, where, err, errlen, 0);
		if (r || (r = puts_(out, "}\n</tool_call>")))
			return r;
	}
	return 0;
}

static int render_qwen3(json_t *messages, json_t *tools, struct chat_text *out, char *err,
			size_t errlen)
{
	size_t n = json_array_size(messages), i, last_query = n - 1;
	json_t *m;
	int r;
	json_array_foreach(messages, i, m)
	{
		json_t *role, *content;
		json_t *tc = json_object_get(m, "tool_calls");
		if (json_is_array(tc) && json_array_size(tc) &&
		    json_is_null(json_object_get(m, "content")) &&
		    json_object_set_new(m, "content", json_string("")) < 0)
			return -ENOMEM; /* a tool call's null content: "", as vLLM reads it */
		if (message_text(m, i, &role, &content, err, errlen) < 0)
			return -EINVAL;
		if (json_object_get(m, "reasoning_content") ||
		    (tc && !json_is_null(tc) && !json_is_array(tc)) ||
		    (json_array_size(tc) && strcmp(json_string_value(role), "assistant"))) {
			snprintf(err, errlen, "messages[%zu]: %s", i,
				 json_object_get(m, "reasoning_content")
				     ? "reasoning_content is not supported yet"
				     : "tool_calls: a list, on an assistant turn only");
			return -EINVAL;
		}
	}
	if (tools && !json_is_null(tools) && !json_is_array(tools)) {
		snprintf(err, errlen, "tools: not a list");
		return -EINVAL;
	}
	for (i = n; i-- > 0;) {
		json_t *content = json_object_get(json_array_get(messages, i), "content");
		const char *s = json_string_value(content);
		size_t len = json_string_length(content);
		int wrapped = len >= 15 && !memcmp(s, "<tool_response>", 15) && len >= 16 &&
			      !memcmp(s + len - 16, "</tool_response>", 16);
		if (!strcmp(role_of(messages, i), "user") && !wrapped) {
			last_query = i;
			break;
		}
	}
	if (json_array_size(tools)) {
		if ((r = qwen3_tools(messages, tools, out, err, errlen)))
			return r;
	} else if (n && !strcmp(role_of(messages, 0), "system")) {
		json_t *c0 = json_object_get(json_array_get(messages, 0), "content");
		if ((r = puts_(out, "<|im_start|>system\n")) ||
		    (r = put(out, json_string_value(c0), json_string_length(c0))) ||
		    (r = puts_(out, "<|im_end|>\n")))
			return r;
	}
	json_array_foreach(messages, i, m)
	{
		const char *role = role_of(messages, i);
		json_t *cj = json_object_get(m, "content");
		const char *c = json_string_value(cj);
		size_t cn = json_string_length(cj);
		if (!strcmp(role, "user") || (!strcmp(role, "system") && i)) {
			if ((r = puts_(out, "<|im_start|>")) || (r = puts_(out, role)) ||
			    (r = puts_(out, "\n")) || (r = put(out, c, cn)) ||
			    (r = puts_(out, "<|im_end|>\n")))
				return r;
		} else if (!strcmp(role, "assistant")) {
			const char *rs = "";
			size_t rn = 0,
			       cn_var; /* the template's content, before an lstrip on output */
			const char *close = memmem(c, cn, "</think>", 8);
			if (close) {
				const char *after = find_last(c, cn, "</think>") + 8;
				size_t an = cn - (size_t)(after - c);
				if (strip_nl(&after, &an, 0))
					return disagree(err, errlen, i);
				rs = c;
				rn = (size_t)(close - c);
				if (strip_nl(&rs, &rn, 1))
					return disagree(err, errlen, i);
				const char *open = find_last(rs, rn, "<think>");
				if (open) {
					rn -= (size_t)(open + 7 - rs);
					rs = open + 7;
				}
				if (strip_nl(&rs, &rn, 0))
					return disagree(err, errlen, i);
				c = after;
				cn = an;
			}
			cn_var = cn;
			if (i > last_query && (i == n - 1 || rn)) {
				if (strip_nl(&rs, &rn, 2) || strip_nl(&c, &cn, 0))
					return disagree(err, errlen, i);
				if ((r = puts_(out, "<|im_start|>assistant\n<think>\n")) ||
				    (r = put(out, rs, rn)) || (r = puts_(out, "\n</think>\n\n")) ||
				    (r = put(out, c, cn)))
					return r;
			} else if ((r = puts_(out, "<|im_start|>assistant\n")) ||
				   (r = put(out, c, cn))) {
				return r;
			}
			json_t *calls = json_object_get(m, "tool_calls");
			if (json_array_size(calls) &&
			    (r = qwen3_tool_calls(calls, cn_var, i, out, err, errlen)))
				return r;
			if ((r = puts_(out, "<|im_end|>\n")))
				return r;
		} else if (!strcmp(role, "tool")) {
			if ((i == 0 || strcmp(role_of(messages, i - 1), "tool")) &&
			    (r = puts_(out, "<|im_start|>user")))
				return r;
			if ((r = puts_(out, "\n<tool_response>\n")) || (r = put(out, c, cn)) ||
			    (r = puts_(out, "\n</tool_response>")))
				return r;
			if ((i == n - 1 || strcmp(role_of(messages, i + 1), "tool")) &&
			    (r = puts_(out, "<|im_end|>\n")))
				return r;
		}
	}
	return puts_(out, "<|im_start|>assistant\n");
}

int chat_render(const struct chat *c, json_t *messages, json_t *tools, struct chat_text *out,
		char *err, size_t errlen)
{
	out->len = 0;
	if (!json_is_array(messages)) {
		snprintf(err, errlen, "messages: not an array");
		return -EINVAL;
	}
	if (c->format != CHAT_QWEN3 && json_array_size(tools)) {
		snprintf(err, errlen, "tools: not supported with this chat format yet");
		return -EINVAL;
	}
	return c->format == CHAT_QWEN3 ? render_qwen3(messages, tools, out, err, errlen)
				       : render_llama3(c, messages, out, err, errlen);
}
