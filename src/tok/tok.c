/*
 * tok.c - encoding text into ids (tok.h): the steps in order, the scratch and its pre-token
 * cache. The cache is direct-mapped on the xxh3 of the pre-token's bytes: an entry keeps
 * pre-tokens of up to 30 bytes that encode to at most 6 ids (nearly every word of prose and
 * code), a newer one overwriting an older in its slot. It belongs to one scratch, hence one
 * thread: nothing is shared or locked on the hot path. Single bytes go straight to their id.
 *
 * Above it, the segment cache (segcache.h): tok_encode() chains a hash over the text as it
 * cuts it at added tokens, each segment's key the hash of the segment seeded with the chain
 * so far, the chain then carried on over the added token's bytes; a segment the cache holds
 * under that key, with the same bytes and the same place at the start or not, is copied.
 */
#include "tok/tok.h"

#include "tok/spm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define CACHE_SLOTS 4096 /* a power of two: 256 KiB per scratch */
#define CACHE_KEY 30
#define CACHE_IDS 6

struct tok_cache_entry {
	uint64_t hash;
	uint8_t klen, nids;
	uint8_t key[CACHE_KEY];
	uint32_t ids[CACHE_IDS];
};

void tok_free(struct tok *t)
{
	vocab_free(&t->vocab);
	added_free(&t->raw);
	added_free(&t->norm);
	pretok_free(&t->pre);
	if (t->spm)
		spm_free(t->spm);
	t->spm = NULL;
	free(t->named);
	free(t->named_text);
	t->named = NULL;
	t->named_text = NULL;
	t->nnamed = t->named_len = 0;
}

int tok_scratch_init(struct tok_scratch *s, const struct tok *t)
{
	memset(s, 0, sizeof(*s));
	s->tok = t;
	s->md = pretok_match_data_new();
	s->cache = calloc(CACHE_SLOTS, sizeof(*s->cache));
	s->cap = 256;
	s->ids = malloc(s->cap * sizeof(*s->ids));	      /* never NULL, even for no ids */
	segcache_init(&s->seg, t->spm ? 0 : SEGCACHE_BUDGET); /* (its memory at its first put) */
	if (!s->md || !s->cache || !s->ids)
		return -ENOMEM;
	return 0;
}

void tok_scratch_free(struct tok_scratch *s)
{
	bpe_scratch_free(&s->bpe);
	norm_scratch_free(&s->norm);
	norm_scratch_free(&s->meta);
	if (s->md)
		pretok_match_data_free(s->md);
	free(s->ids);
	free(s->cache);
	segcache_free(&s->seg);
	memset(s, 0, sizeof(*s));
}

void tok_scratch_segment_budget(struct tok_scratch *s, size_t bytes)
{
	segcache_free(&s->seg);
	segcache_init(&s->seg, s->tok->spm ? 0 : bytes);
}

/* Room for <more> ids past those held. */
static int ids_room(struct tok_scratch *s, size_t more)
{
	if (more <= s->cap - s->nids)
		return 0;
	size_t cap = s->cap ? s->cap : 256;
	while (cap - s->nids < more) {
		if (cap > SIZE_MAX / 2 / sizeof(uint32_t))
			return -ENOMEM;
		cap *= 2;
	}
	uint32_t *ids = realloc(s->ids, cap * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	s->ids = ids;
	s->cap = cap;
	return 0;
}

static int word_emit(void *arg, const uint8_t *w, size_t n)
{
	struct tok_scratch *s = arg;
	const struct tok *t = s->tok;
	int r = ids_room(s, n);
	if (r)
		return r;
	uint32_t *out = s->ids + s->nids;
	if (n == 1 && t->vocab.byte_id[w[0]] >= 0) {
		*out = (uint32_t)t->vocab.byte_id[w[0]];
		s->nids++;
		return 0;
	}
	struct tok_cache_entry *e = NULL;
	uint64_t h = 0;
	if (n <= CACHE_KEY) {
		h = XXH3_64bits(w, n);
		e = &s->cache[h & (CACHE_SLOTS - 1)];
		if (e->hash == h && e->klen == n && !memcmp(e->key, w, n)) {
			memcpy(out, e->ids, e->nids * sizeof(*out));
			s->nids += e->nids;
			s->hits++;
			return 0;
		}
		s->misses++;
	}
	size_t k;
	int64_t whole = t->ignore_merges ? vocab_find(&t->vocab, w, n) : -1;
	if (whole >= 0) {
		*out = (uint32_t)whole;
		k = 1;
	} else if ((r = t->chars ? bpe_encode_chars(&t->vocab, &t->start, &s->bpe, w, n, out, &k)
				 : bpe_encode_word(&t->vocab, &s->bpe, w, n, out, &k))) {
		return r;
	}
	if (e && k <= CACHE_IDS) {
		e->hash = h;
		e->klen = (uint8_t)n;
		e->nids = (uint8_t)k;
		memcpy(e->key, w, n);
		memcpy(e->ids, out, k * sizeof(*out));
	}
	s->nids += k;
	return 0;
}

static int push_id(struct tok_scratch *s, uint32_t id)
{
	int r = ids_room(s, 1);
	if (!r)
		s->ids[s->nids++] = id;
	return r;
}

/* Normalized text p[0..n) between added tokens (<first>: the one the text starts with),
 * through Metaspace where there is one, then the pre-tokenizer's steps. */
static int split_piece(struct tok_scratch *s, const uint8_t *p, size_t n, int first)
{
	const struct tok *t = s->tok;
	if (t->meta.on && n) {
		const struct norm_step *rs = &t->meta.replace;
		struct norm m = {.n = 1};
		m.step[0] = *rs;
		int starts = p[0] == ' ' || (n >= rs->nto && !memcmp(p, rs->to, rs->nto));
		if (!starts && (t->meta.scheme == TOK_META_ALWAYS ||
				(t->meta.scheme == TOK_META_FIRST && first)))
			m.step[m.n++] = t->meta.prepend;
		int r = norm_apply(&m, &s->meta, p, n, &p, &n);
		if (r)
			return r;
	}
	return pretok_split(&t->pre, s->md, p, n, word_emit, s);
}

/* A piece between the added tokens matched on the text as given (<first>: at its start). */
static int encode_piece(struct tok_scratch *s, const uint8_t *p, size_t n, int first)
{
	const struct tok *t = s->tok;
	int r;
	if (t->normalizer.n && (r = norm_apply(&t->normalizer, &s->norm, p, n, &p, &n)))
		return r;
	size_t at, len;
	uint32_t id;
	while (added_find(&t->norm, p, n, &at, &len, &id)) {
		if ((r = split_piece(s, p, at, first)) || (r = push_id(s, id)))
			return r;
		p += at + len;
		n -= at + len;
		first = 0;
	}
	return split_piece(s, p, n, first);
}

#define CHAIN_SEED 0x746f6b7365676d31ull

/* Segment p[0..n) (<first>: at the text's start) from the segment cache under the chain's
 * <key>, else encoded and kept there. */
static int encode_segment(struct tok_scratch *s, const uint8_t *p, size_t n, int first,
			  uint64_t key)
{
	const uint32_t *got;
	size_t k, before = s->nids;
	int r;
	if (!segcache_keeps(&s->seg, n))
		return encode_piece(s, p, n, first);
	if (segcache_find(&s->seg, key, first, p, n, &got, &k)) {
		if ((r = ids_room(s, k)))
			return r;
		memcpy(s->ids + s->nids, got, k * sizeof(*got));
		s->nids += k;
		return 0;
	}
	if ((r = encode_piece(s, p, n, first)))
		return r;
	r = segcache_put(&s->seg, key, first, p, n, s->ids + before, s->nids - before);
	return r == -E2BIG || r == -ENOMEM ? 0 : r; /* (not kept: the ids stand) */
}

static int utf8_valid(const uint8_t *p, size_t n)
{
	const uint8_t *end = p + n;
	while (p < end) {
		if (*p < 0x80) {
			p++;
			continue;
		}
		size_t len;
		uint32_t cp, min;
		if ((*p & 0xe0) == 0xc0) {
			len = 2, cp = *p & 0x1fu, min = 0x80;
		} else if ((*p & 0xf0) == 0xe0) {
			len = 3, cp = *p & 0x0fu, min = 0x800;
		} else if ((*p & 0xf8) == 0xf0) {
			len = 4, cp = *p & 0x07u, min = 0x10000;
		} else {
			return 0;
		}
		if ((size_t)(end - p) < len)
			return 0;
		for (size_t i = 1; i < len; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (p[i] & 0x3fu);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		p += len;
	}
	return 1;
}

int tok_encode(struct tok_scratch *s, const char *text, size_t n, int add_special,
	       const uint32_t **ids, size_t *nids)
{
	const struct tok *t = s->tok;
	const uint8_t *p = (const uint8_t *)text;
	int r;
	s->nids = 0;
	if (!utf8_valid(p, n))
		return -EILSEQ;
	for (size_t i = 0; add_special && i < t->nprefix; i++)
		if ((r = push_id(s, t->prefix[i])))
			return r;
	if (t->spm) { /* the library's encoding, into the room left */
		size_t got;
		while ((r = spm_encode(t->spm, text, n, s->ids + s->nids, s->cap - s->nids,
				       &got)) == -ENOSPC)
			if ((r = ids_room(s, got)))
				return r;
		if (r)
			return r;
		s->nids += got;
		*ids = s->ids;
		*nids = s->nids;
		return 0;
	}
	size_t at, len;
	uint32_t id;
	const uint8_t *start = p;
	uint64_t chain = CHAIN_SEED, key = 0;
	int keyed = s->seg.budget != 0; /* (no hashing when the cache is off) */
	while (added_find(&t->raw, p, n, &at, &len, &id)) {
		if (keyed)
			key = XXH3_64bits_withSeed(p, at, chain);
		if ((r = encode_segment(s, p, at, p == start, key)) || (r = push_id(s, id)))
			return r;
		if (keyed)
			chain = XXH3_64bits_withSeed(p + at, len, key);
		p += at + len;
		n -= at + len;
	}
	if (keyed)
		key = XXH3_64bits_withSeed(p, n, chain);
	if ((r = encode_segment(s, p, n, p == start, key)))
		return r;
	for (size_t i = 0; add_special && i < t->nsuffix; i++)
		if ((r = push_id(s, t->suffix[i])))
			return r;
	*ids = s->ids;
	*nids = s->nids;
	return 0;
}
