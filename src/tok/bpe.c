/*
 * bpe.c - the merge loop of byte pair encoding (bpe.h). Symbols form a doubly linked list over
 * an array indexed by the byte where each starts; the heap holds candidate merges keyed by
 * (rank, position). An entry popped is checked against the list as it is now (the symbol is
 * alive, has a right neighbour, and that pair still merges at this rank) and skipped when stale;
 * each merge pushes the two pairs it creates. Ordering by position among equal ranks makes it
 * the leftmost-first greedy of the reference implementation.
 */
#include "tok/bpe.h"

#include <errno.h>
#include <stdlib.h>

#define DEAD UINT32_MAX

struct bpe_sym {
	uint32_t id;
	int32_t prev, next;
};

struct bpe_item {
	uint32_t rank;
	uint32_t pos;
};

void bpe_scratch_free(struct bpe_scratch *s)
{
	free(s->sym);
	free(s->heap);
	s->sym = NULL;
	s->heap = NULL;
	s->cap = 0;
}

static int scratch_fit(struct bpe_scratch *s, size_t n)
{
	if (n <= s->cap)
		return 0;
	size_t cap = s->cap ? s->cap : 64;
	while (cap < n)
		cap *= 2;
	struct bpe_sym *sym = realloc(s->sym, cap * sizeof(*sym));
	if (!sym)
		return -ENOMEM;
	s->sym = sym;
	struct bpe_item *heap = realloc(s->heap, 3 * cap * sizeof(*heap));
	if (!heap)
		return -ENOMEM;
	s->heap = heap;
	s->cap = cap;
	return 0;
}

static int item_less(struct bpe_item a, struct bpe_item b)
{
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(struct bpe_item *h, size_t *n, struct bpe_item it)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!item_less(it, h[up]))
			break;
		h[i] = h[up];
		i = up;
	}
	h[i] = it;
}

static struct bpe_item heap_pop(struct bpe_item *h, size_t *n)
{
	struct bpe_item top = h[0], last = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && item_less(h[c + 1], h[c]))
			c++;
		if (!item_less(h[c], last))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = last;
	return top;
}

static void push_pair(const struct vocab *v, struct bpe_scratch *s, size_t *nh, int32_t pos)
{
	int32_t next = s->sym[pos].next;
	uint32_t rank, id;
	if (next >= 0 && vocab_find_merge(v, s->sym[pos].id, s->sym[next].id, &rank, &id))
		heap_push(s->heap, nh, (struct bpe_item){rank, (uint32_t)pos});
}

/* Merges the <n> symbols in the scratch (linked in order) and writes their ids out. */
static void merge_all(const struct vocab *v, struct bpe_scratch *s, size_t n, uint32_t *out,
		      size_t *nout)
{
	struct bpe_sym *sym = s->sym;
	size_t nh = 0;
	for (size_t i = 0; i + 1 < n; i++)
		push_pair(v, s, &nh, (int32_t)i);
	while (nh) {
		struct bpe_item it = heap_pop(s->heap, &nh);
		struct bpe_sym *a = &sym[it.pos];
		if (a->id == DEAD || a->next < 0)
			continue;
		struct bpe_sym *b = &sym[a->next];
		uint32_t rank, id;
		if (!vocab_find_merge(v, a->id, b->id, &rank, &id) || rank != it.rank)
			continue;
		a->id = id;
		a->next = b->next;
		if (b->next >= 0)
			sym[b->next].prev = (int32_t)it.pos;
		b->id = DEAD;
		if (a->prev >= 0)
			push_pair(v, s, &nh, a->prev);
		push_pair(v, s, &nh, (int32_t)it.pos);
	}
	size_t k = 0;
	for (int32_t i = n ? 0 : -1; i >= 0; i = sym[i].next)
		out[k++] = sym[i].id;
	*nout = k;
}

/* Symbol <id> appended as the <k>th of the list. */
static void sym_add(struct bpe_sym *sym, size_t *k, uint32_t id)
{
	sym[*k] = (struct bpe_sym){id, (int32_t)*k - 1, -1};
	if (*k)
		sym[*k - 1].next = (int32_t)*k;
	(*k)++;
}

int bpe_encode_word(const struct vocab *v, struct bpe_scratch *s, const uint8_t *w, size_t n,
		    uint32_t *out, size_t *nout)
{
	if (n > INT32_MAX / 4)
		return -ENOMEM;
	int r = scratch_fit(s, n);
	if (r)
		return r;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (v->byte_id[w[i]] < 0)
			return -ENOENT;
		sym_add(s->sym, &k, (uint32_t)v->byte_id[w[i]]);
	}
	merge_all(v, s, k, out, nout);
	return 0;
}

static size_t char_len(uint8_t b)
{
	return b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
}

int bpe_encode_chars(const struct vocab *v, const struct bpe_chars *c, struct bpe_scratch *s,
		     const uint8_t *w, size_t n, uint32_t *out, size_t *nout)
{
	if (n > INT32_MAX / 4)
		return -ENOMEM;
	int r = scratch_fit(s, n);
	if (r)
		return r;
	/* the reference holds an unknown token back until a known character or the end, fusing
	 * the unknown ones met meanwhile; bytes that fell back go in before it */
	size_t k = 0;
	int unk_held = 0;
	for (size_t i = 0; i < n;) {
		size_t len = char_len(w[i]), j;
		if (len > n - i)
			len = n - i; /* valid UTF-8 never ends short: only a guard */
		int64_t id = vocab_find(v, w + i, len);
		if (id >= 0) {
			if (unk_held)
				sym_add(s->sym, &k, (uint32_t)c->unk);
			unk_held = 0;
			sym_add(s->sym, &k, (uint32_t)id);
			i += len;
			continue;
		}
		for (j = 0; c->byte_fallback && j < len && c->byte_tok[w[i + j]] >= 0; j++)
			;
		if (c->byte_fallback && j == len) {
			for (j = 0; j < len; j++)
				sym_add(s->sym, &k, (uint32_t)c->byte_tok[w[i + j]]);
		} else if (c->unk >= 0) {
			if (unk_held && !c->fuse_unk)
				sym_add(s->sym, &k, (uint32_t)c->unk);
			unk_held = 1;
		}
		i += len;
	}
	if (unk_held)
		sym_add(s->sym, &k, (uint32_t)c->unk);
	merge_all(v, s, k, out, nout);
	return 0;
}
