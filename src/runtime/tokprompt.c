/*
 * tokprompt.c - a prompt's token ids (see tokprompt.h). The prompt's JSON value is decoded by
 * jansson; the tokenizer and the chat text work in the thread's scratch.
 */
#include "runtime/tokprompt.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <xxhash.h>

void tokprompt_free(struct tokprompt *p)
{
	if (p->serial)
		tok_scratch_free(&p->tok);
	chat_text_free(&p->chat);
	memset(p, 0, sizeof(*p));
}

/* The scratch, made for <m>'s tokenizer (again when the thread last served another). */
static int scratch_for(struct tokprompt *p, const struct tokmodel *m)
{
	if (p->serial == m->serial)
		return 0;
	if (p->serial)
		tok_scratch_free(&p->tok);
	p->serial = 0;
	int rc = tok_scratch_init(&p->tok, &m->tok);
	if (rc < 0)
		return rc;
	p->serial = m->serial;
	return 0;
}

int tokprompt_ids(struct tokprompt *p, const struct tokmodel *m, const char *body, size_t len,
		  const struct json_view *v, const uint32_t **ids, size_t *n)
{
	char err[160];
	int rc = -ENOENT;
	if (!v->prompt.e || v->prompt.e > len || (v->messages && !m->has_chat))
		return -ENOENT;
	json_t *j = json_loadb(body + v->prompt.s, v->prompt.e - v->prompt.s,
			       JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (!j)
		return -ENOENT;
	const char *text;
	size_t tlen;
	if (v->messages) {
		if ((rc = chat_render(&m->chat, j, &p->chat, err, sizeof(err))) < 0)
			goto out;
		text = p->chat.p;
		tlen = p->chat.len;
	} else if (json_is_string(j)) {
		text = json_string_value(j);
		tlen = json_string_length(j);
	} else {
		goto out; /* a list: token ids or several prompts */
	}
	if ((rc = scratch_for(p, m)) < 0)
		goto out;
	rc = tok_encode(&p->tok, text, tlen, !v->messages, ids, n);
	if (rc < 0)
		rc = rc == -ENOMEM ? rc : -EINVAL;
out:
	json_decref(j);
	return rc;
}

uint64_t tokprompt_seed(const char *body, const struct json_view *v)
{
	uint64_t seed = TOKMODEL_CHAIN_SEED;
	if (v->cache_salt.e)
		seed ^= XXH3_64bits(body + v->cache_salt.s, v->cache_salt.e - v->cache_salt.s);
	return seed;
}
