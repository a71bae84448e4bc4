/*
 * chat.h - chat formats: an OpenAI `messages` array turned into the prompt text the model's
 * engine builds from it, with the generation prompt added, ready for tok_encode() (without
 * the post-processor's ids: the template writes its own BOS), as Hugging Face's
 * apply_chat_template does. accelnet runs no Jinja: it recognises a model's template, read
 * from the tokenizer_config.json beside its tokenizer.json, by its exact text, and renders
 * that format in C. A template it does not know is refused by name, never rendered as
 * another. Known today: Meta Llama 3's and 3.1's (without tools: their templates write none),
 * Qwen 3's (with tools), DeepSeek V3's (with its tool calls and outputs), Mistral Nemo's (with
 * tools, tool calls and results) and Gemma 3's.
 */
#ifndef ACCELNET_TOK_CHAT_H
#define ACCELNET_TOK_CHAT_H

#include "tok/chattext.h"

#include <jansson.h>
#include <stddef.h>

enum chat_format {
	CHAT_LLAMA3 = 1,
	CHAT_QWEN3,
	CHAT_DEEPSEEK3,
	CHAT_MISTRAL,
	CHAT_GEMMA3,
};

struct chat {
	enum chat_format format;
	char bos[128]; /* the bos_token the template writes (all but Qwen 3) */
	char eos[128]; /* the eos_token it writes (Mistral) */
};

/*
 * The format of the tokenizer_config.json at <path>: 0, or -errno with a message naming the
 * file and the field in err: -ENOTSUP for a file with no chat_template or one accelnet does
 * not know, -EINVAL for a file that is not JSON or a known template's bos_token or eos_token
 * that is not a string, -ENOENT for no such file. <format> (NULL: by the template) names the
 * format instead (the names the "known:" list gives): the template's text is then not read,
 * only the file's bos_token and eos_token; a name accelnet does not render is -EINVAL.
 */
int chat_load(const char *path, const char *format, struct chat *c, char *err, size_t errlen);

/*
 * The prompt for <messages> (a JSON array of objects with a string role and a string content)
 * and <tools> (the request's "tools", a list; NULL or null: none) into *out, replacing what
 * it held. Qwen 3: a non-empty tools list makes the system turn that lists them (each as the
 * template's tojson writes it), and an assistant turn's tool_calls follow its content (a
 * null content of such a turn is read as "", as vLLM reads it: *messages is changed so).
 * The other families: see docs/tokenizers.md "Chat formats". Where the template would raise
 * an exception (Mistral's and Gemma's role order, Mistral's tool call ids), where the
 * reference Jinja and Python's jinja2 would render differently, and what is not supported,
 * the render is refused. 0, -EINVAL with a message naming the message and field that is
 * refused (the template's own message where it raises), or -ENOMEM.
 */
int chat_render(const struct chat *c, json_t *messages, json_t *tools, struct chat_text *out,
		char *err, size_t errlen);

#endif
