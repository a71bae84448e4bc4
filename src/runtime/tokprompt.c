/*
 * tokprompt.c - a prompt's token ids (see tokprompt.h). The prompt's JSON value is decoded by
 * jansson into the thread's arena; the tokenizer and the chat text work in the thread's
 * scratch.
 */
#include "runtime/tokprompt.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define ARENA_FIRST (64u << 10) /* the arena's first size */
#define ARENA_MAX (16u << 20)	/* ... and its largest: a prompt past it costs mallocs */
#define ARENA_ALIGN 16

/* The arena jansson allocates from on this thread now; NULL: malloc and free. */
static _Thread_local struct tokprompt *in_arena;

static int of_arena(const struct tokprompt *p, const void *ptr)
{
	return p->arena && (const char *)ptr >= p->arena && (const char *)ptr < p->arena + p->cap;
}

static void *arena_malloc(size_t n)
{
	struct tokprompt *p = in_arena;
	if (!p)
		return malloc(n);
	size_t need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
	p->wanted += need;
	if (need <= p->cap - p->used) {
		void *ptr = p->arena + p->used;
		p->used += need;
		return ptr;
	}
	return malloc(n); /* the arena grows after this call */
}

static void arena_free(void *ptr)
{
	struct tokprompt *p = in_arena;
	if (!p || !of_arena(p, ptr))
		free(ptr); /* (an arena's block is given back all at once) */
}

/* Before main, so that no thread ever sees the allocator change. */
__attribute__((constructor)) static void arena_install(void)
{
	json_set_alloc_funcs(arena_malloc, arena_free);
}

/* A call decodes into <p>'s arena from here ... */
static void arena_begin(struct tokprompt *p)
{
	p->used = p->wanted = 0;
	in_arena = p;
}

/* ... to here (every value it decoded freed): grown when the call wanted more. */
static void arena_end(struct tokprompt *p)
{
	in_arena = NULL;
	if (p->wanted <= p->cap || p->cap >= ARENA_MAX)
		return;
	size_t cap = p->cap ? p->cap : ARENA_FIRST;
	while (cap < p->wanted && cap < ARENA_MAX)
		cap *= 2;
	char *a = malloc(cap);
	if (!a)
		return; /* the old one still serves */
	free(p->arena);
	p->arena = a;
	p->cap = cap;
}

void tokprompt_free(struct tokprompt *p)
{
	if (p->serial)
		tok_scratch_free(&p->tok);
	chat_text_free(&p->chat);
	free(p->arena);
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
		  const struct json_view *v, size_t max_text, const uint32_t **ids, size_t *n,
		  int *cut)
{
	char err[160];
	int rc = -ENOENT;
	if (!v->prompt.e || v->prompt.e > len || (v->messages && !m->has_chat))
		return -ENOENT;
	arena_begin(p);
	/* a chat completion's whole body: its tools too */
	json_t *j = v->messages ? json_loadb(body, len, JSON_ALLOW_NUL, NULL)
				: json_loadb(body + v->prompt.s, v->prompt.e - v->prompt.s,
					     JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (!j) {
		arena_end(p);
		return -ENOENT;
	}
	const char *text;
	size_t tlen;
	if (v->messages) {
		if ((rc = chat_render(&m->chat, json_object_get(j, "messages"),
				      json_object_get(j, "tools"), &p->chat, err, sizeof(err))) < 0)
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
	*cut = max_text && tlen > max_text;
	if (*cut) { /* at a character's first byte */
		tlen = max_text;
		while (tlen && ((unsigned char)text[tlen] & 0xc0) == 0x80)
			tlen--;
	}
	rc = tok_encode(&p->tok, text, tlen, !v->messages, ids, n);
	if (rc < 0)
		rc = rc == -ENOMEM ? rc : -EINVAL;
out:
	json_decref(j);
	arena_end(p);
	return rc;
}

uint64_t tokprompt_seed(const char *body, const struct json_view *v)
{
	uint64_t seed = TOKMODEL_CHAIN_SEED;
	if (v->cache_salt.e)
		seed ^= XXH3_64bits(body + v->cache_salt.s, v->cache_salt.e - v->cache_salt.s);
	return seed;
}
