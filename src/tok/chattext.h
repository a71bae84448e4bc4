/*
 * chattext.h - the prompt text a chat format writes (struct chat_text), and what the formats
 * (chat.c and chat_*.c) share to write it: appending, the two Jinja trims, JSON written as a
 * template's tojson writes it, a message's role and content.
 */
#ifndef ACCELNET_TOK_CHATTEXT_H
#define ACCELNET_TOK_CHATTEXT_H

#include <jansson.h>
#include <stddef.h>

/* A growable text, reused from one render to the next. */
struct chat_text {
	char *p;
	size_t len, cap;
};

void chat_text_free(struct chat_text *t);

int chat_put(struct chat_text *t, const char *s, size_t n);
int chat_puts(struct chat_text *t, const char *s);

#define CHAT_WS_JS 1 /* white space to JavaScript's trim (the reference Jinja's) */
#define CHAT_WS_PY 2 /* white space to Python's str.strip (jinja2's trim, the engines') */

/* s[0..*n) with the white space of <kind> trimmed at both ends: the new start, *n its length. */
const char *chat_trim(const char *s, size_t *n, unsigned kind);

/*
 * Message <i>'s content (a string) as a template's `| trim` gives it: *p, *n. -EINVAL with why
 * in err when Python's trim and JavaScript's would give different text (U+001C-U+001F, U+0085
 * and U+FEFF at an end): which the engine uses is not known.
 */
int chat_trim_content(json_t *content, size_t i, const char **p, size_t *n, char *err,
		      size_t errlen);

/* Message <i>'s role and content, both strings (no other content is supported): 0, or
 * -EINVAL with why in <err>. */
int chat_message_text(json_t *m, size_t i, json_t **role, json_t **content, char *err,
		      size_t errlen);

/* The role of messages[i], "" when it has none that is a string. */
const char *chat_role_of(json_t *messages, size_t i);

/* s[0..n) as a JSON string literal, as Python's json.dumps (ensure_ascii false) and
 * JavaScript's JSON.stringify both write it. */
int chat_put_quoted(struct chat_text *t, const char *s, size_t n);

/* Whether JavaScript orders key <k> before the others whatever their order (an array index:
 * the reference's objects keep insertion order but for those). */
int chat_index_like(const char *k);

/* -EINVAL with <err> saying why when <key> (in <where>) is index-like (the two engines would
 * order it differently), else 0. */
int chat_refuse_index_key(const char *where, const char *key, char *err, size_t errlen);

/*
 * <v> as the template's tojson writes it: Python's json.dumps with its default separators
 * (", ", ": "), keys in their order, non-ASCII as it is; the reference's tojson writes the
 * same. What the two would write differently is refused: a real number (Python writes 1.0,
 * JavaScript 1), an integer past 2^53 (JavaScript rounds it), an array-index key (JavaScript
 * puts those first). 0, -EINVAL with why in err (<where> names the value), or -ENOMEM.
 */
int chat_tojson(struct chat_text *t, json_t *v, const char *where, char *err, size_t errlen,
		int depth);

#endif
