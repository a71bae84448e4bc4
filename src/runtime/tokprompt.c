/*
 * tokprompt.c - a prompt's token ids (see tokprompt.h). The prompt's JSON value is decoded by
 * jansson into the thread's arena; the tokenizer and the chat text work in the thread's
 * scratch.
 */
#include "runtime/tokprompt.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
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
	for (size_t i = 0; i < TOKPROMPT_MODELS; i++)
		if (p->scratch[i].serial)
			tok_scratch_free(&p->scratch[i].tok);
	chat_text_free(&p->chat);
	free(p->arena);
	free(p->given);
	memset(p, 0, sizeof(*p));
}

/* The scratch for <m>'s tokenizer in *out: the one made for it, else a new one in place of
 * an unused or the least recently used. */
static int scratch_for(struct tokprompt *p, const struct tokmodel *m, struct tok_scratch **out)
{
	size_t pick = 0;
	p->calls++;
	for (size_t i = 0; i < TOKPROMPT_MODELS; i++) {
		if (p->scratch[i].serial == m->serial) {
			p->scratch[i].used = p->calls;
			*out = &p->scratch[i].tok;
			return 0;
		}
		if (p->scratch[i].used < p->scratch[pick].used)
			pick = i;
	}
	if (p->scratch[pick].serial)
		tok_scratch_free(&p->scratch[pick].tok);
	p->scratch[pick].serial = 0;
	p->scratch[pick].used = 0;
	int rc = tok_scratch_init(&p->scratch[pick].tok, &m->tok);
	if (rc < 0) {
		tok_scratch_free(&p->scratch[pick].tok);
		return rc;
	}
	p->scratch[pick].serial = m->serial;
	p->scratch[pick].used = p->calls;
	*out = &p->scratch[pick].tok;
	return 0;
}

/* A prompt of token ids ([9707, 11, 1879], as vLLM takes one): the ids as given, at most
 * <max> of them (0: all), copied out of the decoded JSON into p->given. 0; -ENOENT when
 * <list> is empty or holds anything but ids (several prompts: strings or lists), which no one
 * block chain describes; -ENOMEM. */
static int given_ids(struct tokprompt *p, json_t *list, size_t max, const uint32_t **ids, size_t *n)
{
	size_t k = json_array_size(list), i;
	json_t *x;
	if (!json_is_array(list) || !k)
		return -ENOENT;
	json_array_foreach(list, i, x) /* every one an id, past <max> too */
	    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		json_integer_value(x) > (json_int_t)UINT32_MAX) return -ENOENT;
	if (max && k > max)
		k = max;
	if (k > p->given_cap) {
		uint32_t *g = realloc(p->given, k * sizeof(*g));
		if (!g)
			return -ENOMEM;
		p->given = g;
		p->given_cap = k;
	}
	for (i = 0; i < k; i++)
		p->given[i] = (uint32_t)json_integer_value(json_array_get(list, i));
	*ids = p->given;
	*n = k;
	return 0;
}

int tokprompt_ids(struct tokprompt *p, const struct tokmodel *m, const char *body, size_t len,
		  const struct json_view *v, size_t max_text, const uint32_t **ids, size_t *n,
		  int *cut)
{
	char err[160];
	int rc = -ENOENT;
	if (!v->prompt.e || v->prompt.e > len)
		return -ENOENT;
	if (v->messages && !m->has_chat)
		return -ENOTSUP;
	arena_begin(p);
	/* a chat completion's whole body: its tools too */
	json_t *j = v->messages ? json_loadb(body, len, JSON_ALLOW_NUL, NULL)
				: json_loadb(body + v->prompt.s, v->prompt.e - v->prompt.s,
					     JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (!j) { /* (the strict view took it: deeper than jansson goes, or out of memory) */
		arena_end(p);
		return -EBADMSG;
	}
	const char *text;
	size_t tlen;
	if (v->messages) {
		if ((rc = chat_render(&m->chat, json_object_get(j, "messages"),
				      json_object_get(j, "tools"), &p->chat, err, sizeof(err))) <
		    0) {
			rc = rc == -ENOMEM ? rc : -EINVAL;
			goto out;
		}
		text = p->chat.p;
		tlen = p->chat.len;
	} else if (json_is_string(j)) {
		text = json_string_value(j);
		tlen = json_string_length(j);
	} else {
		rc = given_ids(p, j, max_text, ids, n); /* (a token: at least a byte of text) */
		rc = rc == -ENOENT ? -EBADMSG : rc;
		*cut = 0;
		goto out;
	}
	struct tok_scratch *ts;
	if ((rc = scratch_for(p, m, &ts)) < 0)
		goto out;
	*cut = max_text && tlen > max_text;
	if (*cut) { /* at a character's first byte */
		tlen = max_text;
		while (tlen && ((unsigned char)text[tlen] & 0xc0) == 0x80)
			tlen--;
	}
	rc = tok_encode(ts, text, tlen, !v->messages, ids, n);
	if (rc < 0)
		rc = rc == -ENOMEM ? rc : -EIO;
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

/* A number field of <j> into *out: 1 when given, 0 when not (or null), -1 when not one. */
static int number_of(json_t *j, const char *key, double *out)
{
	json_t *v = json_object_get(j, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return -1;
	*out = json_number_value(v);
	return 1;
}

static int refuse(char *why, size_t whylen, const char *what)
{
	snprintf(why, whylen, "%s", what);
	return -EINVAL;
}

/* The sampling fields of request <j> into *r. 0, or -EINVAL with why. */
static int engine_sampling(json_t *j, struct engine_req *r, char *why, size_t whylen)
{
	double d = 0;
	json_t *v = json_object_get(j, "stream");
	if (v && !json_is_null(v) && !json_is_boolean(v))
		return refuse(why, whylen, "'stream' must be a boolean");
	r->stream = json_is_true(v);
	v = json_object_get(j, "n");
	if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 1))
		return refuse(why, whylen, "only n: 1 is served by a gRPC engine pool");
	r->max_tokens = -1;
	const char *const mt[] = {"max_tokens", "max_completion_tokens"};
	for (int i = 0; i < 2; i++) {
		int k = number_of(j, mt[i], &d);
		if (k < 0 || (k && (d < 0 || d > INT32_MAX || d != (double)(long)d)))
			return refuse(why, whylen,
				      "'max_tokens' must be a whole number from 0 to 2^31-1");
		if (k && (long)d > r->max_tokens)
			r->max_tokens = (long)d;
	}
	int k = number_of(j, "temperature", &d);
	if (k < 0 || (k && (d < 0 || d > 2)))
		return refuse(why, whylen, "'temperature' must be a number from 0 to 2");
	r->has_temperature = k > 0;
	r->temperature = (float)d;
	k = number_of(j, "top_p", &d);
	if (k < 0 || (k && (d <= 0 || d > 1)))
		return refuse(why, whylen, "'top_p' must be a number above 0, at most 1");
	r->has_top_p = k > 0;
	r->top_p = (float)d;
	v = json_object_get(j, "stop");
	r->nstop = 0;
	if (json_is_string(v)) {
		r->stop[r->nstop++] =
		    (struct engine_str){json_string_value(v), json_string_length(v)};
	} else if (json_is_array(v)) {
		size_t i;
		json_t *s;
		if (json_array_size(v) > ENGINE_STOP_MAX)
			return refuse(why, whylen, "'stop' holds too many strings (16 at most)");
		json_array_foreach(v, i, s)
		{
			if (!json_is_string(s))
				return refuse(why, whylen, "'stop' must be a string or strings");
			r->stop[r->nstop++] =
			    (struct engine_str){json_string_value(s), json_string_length(s)};
		}
	} else if (v && !json_is_null(v)) {
		return refuse(why, whylen, "'stop' must be a string or strings");
	}
	return 0;
}

long tokprompt_engine(struct tokprompt *p, const struct tokmodel *m, const char *body, size_t len,
		      int chat, struct engine_req *r, uint8_t *out, size_t outcap, char *model,
		      size_t cap, char *why, size_t whylen)
{
	char err[160];
	long rc;
	const char *text;
	size_t tlen;
	model[0] = '\0';
	arena_begin(p);
	json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(j)) {
		rc = refuse(why, whylen, "the body is not a JSON object");
		goto out;
	}
	json_t *mv = json_object_get(j, "model");
	if (json_is_string(mv))
		snprintf(model, cap, "%s", json_string_value(mv));
	if ((rc = engine_sampling(j, r, why, whylen)) < 0)
		goto out;
	if (chat) {
		if (!m->has_chat) {
			rc = refuse(why, whylen, "the model's tokenizer has no chat template");
			goto out;
		}
		if ((rc = chat_render(&m->chat, json_object_get(j, "messages"),
				      json_object_get(j, "tools"), &p->chat, err, sizeof(err))) <
		    0) {
			snprintf(why, whylen, "messages: %s", err);
			rc = rc == -ENOMEM ? rc : -EINVAL;
			goto out;
		}
		text = p->chat.p;
		tlen = p->chat.len;
	} else {
		json_t *pr = json_object_get(j, "prompt");
		if (!json_is_string(pr)) {
			rc = refuse(why, whylen, "'prompt' must be a string");
			goto out;
		}
		text = json_string_value(pr);
		tlen = json_string_length(pr);
	}
	struct tok_scratch *ts;
	if ((rc = scratch_for(p, m, &ts)) < 0)
		goto out;
	rc = tok_encode(ts, text, tlen, !chat, &r->ids, &r->nids);
	if (rc < 0 && rc != -ENOMEM)
		rc = refuse(why, whylen, "the prompt is not text the tokenizer takes (UTF-8)");
	if (rc == 0)
		rc = engine_pb_write(r, out, outcap); /* (-ENOSPC: the caller's buffer is short) */
out:
	r->nstop = 0; /* its strings were the decoded body's */
	json_decref(j);
	arena_end(p);
	return rc;
}
