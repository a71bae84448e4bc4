/*
 * chat.c - the chat formats (chat.h): which template a tokenizer_config.json holds, and the
 * two first families, Llama 3 and Qwen 3 (the others each have a file: chat_deepseek.c,
 * chat_mistral.c, chat_gemma.c; what they share is in chattext.c). A template is known by the
 * xxh3 of its exact text: a template that differs by one character (a newer revision of a
 * model's, with tools or a date line) is another template, refused until it is written here
 * and checked against the reference (tests/integration/test_tokenize.py and
 * test_tokenize_chat.py render the model's own template with @huggingface/jinja and encode
 * it with `tokenizers`).
 *
 * Llama 3 (and 3.1, whose template adds the generation prompt only when asked, as accelnet
 * always asks): for each message, "<|start_header_id|>ROLE<|end_header_id|>\n\n", its content
 * with white space trimmed at both ends, "<|eot_id|>"; the BOS before the first; then the
 * assistant's header. Neither template writes tools: a request with tools is refused.
 *
 * Its `trim` is where Jinja engines part: @huggingface/jinja (the reference here) trims as
 * JavaScript does, the engines' Python jinja2 as str.strip() does. They agree but on U+001C
 * to U+001F and U+0085 (Python's white space only) and U+FEFF (JavaScript's only): a content
 * that starts or ends with one of those is refused, rather than given the ids of one engine
 * when the model may be served by the other.
 *
 * Qwen 3: ChatML. The first system message (or, with tools, a system turn listing them),
 * then each user or later system message as "<|im_start|>ROLE\nCONTENT<|im_end|>\n"; tool
 * results gathered into one user turn; an assistant turn split at "</think>" into reasoning
 * and answer, the reasoning kept (in a <think> block) only after the last real user query
 * (one that is not a <tool_response> alone), its tool_calls after its content. The template
 * strips '\n' around the tags; the reference's strip ignores its argument and strips all
 * white space: where the two give different text the message is refused, as for Llama 3's
 * trim.
 */
#include "tok/chat.h"

#include "tok/chat_deepseek.h"
#include "tok/chat_gemma.h"
#include "tok/chat_mistral.h"
#include "tok/chattext.h"
#include "tok/tokjson.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NEEDS_BOS 1
#define NEEDS_EOS 2

/* Each template accelnet renders: its xxh3 and length, its family, the tokens it writes. */
static const struct {
	uint64_t hash;
	size_t len;
	enum chat_format format;
	const char *name; /* the package whose tokenizer_config.json holds it */
	unsigned needs;
} known[] = {
    {0xb97891b7adc1beb8ull, 348, CHAT_LLAMA3, "llama3", NEEDS_BOS},
    {0x9799ad6e2dea0594ull, 389, CHAT_LLAMA3, "llama3_1", NEEDS_BOS},
    {0x0283f874ff58d644ull, 4116, CHAT_QWEN3, "qwen3", 0},
    {0x6878d9ac13b3ef51ull, 2301, CHAT_DEEPSEEK3, "deepseek_v3", NEEDS_BOS},
    {0x1a382f7b55f0b080ull, 3778, CHAT_MISTRAL, "mistral_nemo", NEEDS_BOS | NEEDS_EOS},
    {0x6d23022eb1773ed6ull, 1532, CHAT_GEMMA3, "gemma3", NEEDS_BOS},
};

int chat_load(const char *path, const char *format, struct chat *c, char *err, size_t errlen)
{
	int r;
	/* model_max_length is often 1e30 written as an integer: read integers as reals */
	json_t *root = tokjson_read_file(path, JSON_DECODE_INT_AS_REAL, &r, err, errlen);
	memset(c, 0, sizeof(*c));
	if (!root)
		return r;
	r = -EINVAL;
	json_t *tpl = json_object_get(root, "chat_template");
	json_t *bos = json_object_get(root, "bos_token"), *eos = json_object_get(root, "eos_token");
	char names[128] = "";
	size_t k, used = 0;
	if (json_is_object(bos))
		bos = json_object_get(bos, "content");
	if (json_is_object(eos))
		eos = json_object_get(eos, "content");
	if (format) { /* chosen by name: the template's text is not compared */
		for (k = 0; k < sizeof(known) / sizeof(known[0]); k++) {
			if (!strcmp(known[k].name, format))
				break;
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
						 k ? ", " : "", known[k].name);
		}
		if (k == sizeof(known) / sizeof(known[0])) {
			snprintf(err, errlen,
				 "chat_format: '%s' is not one accelnet renders; known: %s", format,
				 names);
			goto fail;
		}
		goto found;
	}
	if (!json_is_string(tpl)) {
		snprintf(err, errlen, "%s: chat_template: %s", path,
			 tpl ? "not one string (a list of named templates is not supported)"
			     : "missing");
		r = -ENOTSUP;
		goto fail;
	}
	uint64_t h = XXH3_64bits(json_string_value(tpl), json_string_length(tpl));
	for (k = 0; k < sizeof(known) / sizeof(known[0]); k++) {
		if (known[k].hash == h && known[k].len == json_string_length(tpl))
			break;
		used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", k ? ", " : "",
					 known[k].name);
	}
	if (k == sizeof(known) / sizeof(known[0])) {
		snprintf(err, errlen,
			 "%s: chat_template: not one accelnet knows (%zu bytes, xxh3 "
			 "%016llx); known: the templates of %s",
			 path, json_string_length(tpl), (unsigned long long)h, names);
		r = -ENOTSUP;
		goto fail;
	}
found:
	c->format = known[k].format;
	if (((known[k].needs & NEEDS_BOS) &&
	     (!json_is_string(bos) || json_string_length(bos) >= sizeof(c->bos))) ||
	    ((known[k].needs & NEEDS_EOS) &&
	     (!json_is_string(eos) || json_string_length(eos) >= sizeof(c->eos)))) {
		snprintf(err, errlen, "%s: %s: missing, or not a short string", path,
			 (known[k].needs & NEEDS_BOS) && !json_is_string(bos) ? "bos_token"
									      : "eos_token");
		c->format = 0;
		goto fail;
	}
	if (json_is_string(bos) && json_string_length(bos) < sizeof(c->bos))
		memcpy(c->bos, json_string_value(bos), json_string_length(bos) + 1);
	if (json_is_string(eos) && json_string_length(eos) < sizeof(c->eos))
		memcpy(c->eos, json_string_value(eos), json_string_length(eos) + 1);
	r = 0;
fail:
	json_decref(root);
	return r;
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
		if (chat_message_text(m, i, &role, &content, err, errlen) < 0)
			return -EINVAL;
		const char *text;
		size_t n;
		if (chat_trim_content(content, i, &text, &n, err, errlen))
			return -EINVAL;
		if ((i == 0 && (r = chat_puts(out, c->bos))) ||
		    (r = chat_puts(out, "<|start_header_id|>")) ||
		    (r = chat_put(out, json_string_value(role), json_string_length(role))) ||
		    (r = chat_puts(out, "<|end_header_id|>\n\n")) || (r = chat_put(out, text, n)) ||
		    (r = chat_puts(out, "<|eot_id|>")))
			return r;
	}
	return chat_puts(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
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
	const char *j = chat_trim(s, &jn, CHAT_WS_JS);
	ja = end != 1 ? (size_t)(j - s) : 0;
	jb = end != 0 ? (size_t)(j - s) + jn : *n;
	if (end == 1 && jn == 0)
		jb = 0; /* all white space: chat_trim() put its start at the end */
	if (end == 0 && jn == 0)
		ja = *n;
	if (a != ja || b != jb)
		return -1;
	*p = s + a;
	*n = b - a;
	return 0;
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

/* The system turn of a request with tools: each tool's tojson, between Qwen's words. */
static int qwen3_tools(json_t *messages, json_t *tools, struct chat_text *out, char *err,
		       size_t errlen)
{
	int r;
	size_t i;
	json_t *tool;
	char where[32];
	if ((r = chat_puts(out, "<|im_start|>system\n")))
		return r;
	if (json_array_size(messages) && !strcmp(chat_role_of(messages, 0), "system")) {
		json_t *c0 = json_object_get(json_array_get(messages, 0), "content");
		if ((r = chat_put(out, json_string_value(c0), json_string_length(c0))) ||
		    (r = chat_puts(out, "\n\n")))
			return r;
	}
	if ((r = chat_puts(out, "# Tools\n\nYou may call one or more functions to assist with the "
				"user query.\n\nYou are provided with function signatures within "
				"<tools></tools> XML tags:\n<tools>")))
		return r;
	json_array_foreach(tools, i, tool)
	{
		snprintf(where, sizeof(where), "tools[%zu]", i);
		if ((r = chat_puts(out, "\n")) ||
		    (r = chat_tojson(out, tool, where, err, errlen, 0)))
			return r;
	}
	return chat_puts(out, "\n</tools>\n\nFor each function call, return a json object with "
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
		if (((i || cn) && (r = chat_puts(out, "\n"))) ||
		    (r = chat_puts(out, "<tool_call>\n{\"name\": \"")) ||
		    (r = chat_put(out, json_string_value(name), json_string_length(name))) ||
		    (r = chat_puts(out, "\", \"arguments\": ")))
			return r;
		if (json_is_string(args))
			r = chat_put(out, json_string_value(args), json_string_length(args));
		else
			r = chat_tojson(out, args, where, err, errlen, 0);
		if (r || (r = chat_puts(out, "}\n</tool_call>")))
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
		if (chat_message_text(m, i, &role, &content, err, errlen) < 0)
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
		if (!strcmp(chat_role_of(messages, i), "user") && !wrapped) {
			last_query = i;
			break;
		}
	}
	if (json_array_size(tools)) {
		if ((r = qwen3_tools(messages, tools, out, err, errlen)))
			return r;
	} else if (n && !strcmp(chat_role_of(messages, 0), "system")) {
		json_t *c0 = json_object_get(json_array_get(messages, 0), "content");
		if ((r = chat_puts(out, "<|im_start|>system\n")) ||
		    (r = chat_put(out, json_string_value(c0), json_string_length(c0))) ||
		    (r = chat_puts(out, "<|im_end|>\n")))
			return r;
	}
	json_array_foreach(messages, i, m)
	{
		const char *role = chat_role_of(messages, i);
		json_t *cj = json_object_get(m, "content");
		const char *c = json_string_value(cj);
		size_t cn = json_string_length(cj);
		if (!strcmp(role, "user") || (!strcmp(role, "system") && i)) {
			if ((r = chat_puts(out, "<|im_start|>")) || (r = chat_puts(out, role)) ||
			    (r = chat_puts(out, "\n")) || (r = chat_put(out, c, cn)) ||
			    (r = chat_puts(out, "<|im_end|>\n")))
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
				if ((r = chat_puts(out, "<|im_start|>assistant\n<think>\n")) ||
				    (r = chat_put(out, rs, rn)) ||
				    (r = chat_puts(out, "\n</think>\n\n")) ||
				    (r = chat_put(out, c, cn)))
					return r;
			} else if ((r = chat_puts(out, "<|im_start|>assistant\n")) ||
				   (r = chat_put(out, c, cn))) {
				return r;
			}
			json_t *calls = json_object_get(m, "tool_calls");
			if (json_array_size(calls) &&
			    (r = qwen3_tool_calls(calls, cn_var, i, out, err, errlen)))
				return r;
			if ((r = chat_puts(out, "<|im_end|>\n")))
				return r;
		} else if (!strcmp(role, "tool")) {
			if ((i == 0 || strcmp(chat_role_of(messages, i - 1), "tool")) &&
			    (r = chat_puts(out, "<|im_start|>user")))
				return r;
			if ((r = chat_puts(out, "\n<tool_response>\n")) ||
			    (r = chat_put(out, c, cn)) ||
			    (r = chat_puts(out, "\n</tool_response>")))
				return r;
			if ((i == n - 1 || strcmp(chat_role_of(messages, i + 1), "tool")) &&
			    (r = chat_puts(out, "<|im_end|>\n")))
				return r;
		}
	}
	return chat_puts(out, "<|im_start|>assistant\n");
}

int chat_render(const struct chat *c, json_t *messages, json_t *tools, struct chat_text *out,
		char *err, size_t errlen)
{
	out->len = 0;
	if (!json_is_array(messages)) {
		snprintf(err, errlen, "messages: not an array");
		return -EINVAL;
	}
	if (c->format != CHAT_QWEN3 && c->format != CHAT_MISTRAL && json_array_size(tools)) {
		snprintf(err, errlen,
			 "tools: not supported with this chat format (its template "
			 "writes none)");
		return -EINVAL;
	}
	switch (c->format) {
	case CHAT_QWEN3:
		return render_qwen3(messages, tools, out, err, errlen);
	case CHAT_DEEPSEEK3:
		return chat_render_deepseek(c->bos, messages, out, err, errlen);
	case CHAT_MISTRAL:
		return chat_render_mistral(c->bos, c->eos, messages, tools, out, err, errlen);
	case CHAT_GEMMA3:
		return chat_render_gemma(c->bos, messages, out, err, errlen);
	default:
		return render_llama3(c, messages, out, err, errlen);
	}
}
