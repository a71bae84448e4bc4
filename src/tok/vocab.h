/*
 * vocab.h - a BPE model's two tables, built once at load and read-only after: the vocabulary
 * (the raw bytes of a token -> its id) and the merges (a pair of ids -> the merge's rank, its
 * place in the file's list, lower first, and the id of the merged token). Open addressing
 * on xxh3, sized at init for the counts the file declares, so lookups never allocate.
 */
#ifndef ACCELNET_TOK_VOCAB_H
#define ACCELNET_TOK_VOCAB_H

#include <stddef.h>
#include <stdint.h>

struct vocab {
	/* tokens: slot -> id + 1 (0 empty); the bytes of an id at arena + off[id], len[id] */
	uint32_t *slots;
	size_t mask;
	uint32_t *off, *len;
	uint32_t nids; /* ids 0 .. nids-1 may be named */
	char *arena;
	size_t arena_len, arena_cap;
	/* merges: slot -> key (a << 32 | b) + 1 (0 empty), with its rank and merged id */
	uint64_t *mkey;
	uint32_t *mrank, *mid;
	size_t mmask;
	int32_t byte_id[256]; /* the id of each single byte, -1 where the vocabulary lacks it */
};

/* Room for tokens with ids below <nids> (<bytes> of token text in all) and <nmerges>
 * merges. 0 or -ENOMEM; vocab_free() either way. */
int vocab_init(struct vocab *v, uint32_t nids, size_t bytes, size_t nmerges);
void vocab_free(struct vocab *v);

/* Adds token <id> (below the init's nids) with bytes s[0..n): 0, -EEXIST when those bytes
 * or that id are named already (the caller says which), -ENOMEM. */
int vocab_add(struct vocab *v, const uint8_t *s, size_t n, uint32_t id);
/* The id of the token with bytes s[0..n), or -1. */
int64_t vocab_find(const struct vocab *v, const uint8_t *s, size_t n);

/* Merge (a, b) -> id at <rank>; a pair listed twice keeps its later rank, as the reference
 * implementation does. 0 or -ENOMEM. */
int vocab_add_merge(struct vocab *v, uint32_t a, uint32_t b, uint32_t rank, uint32_t id);
/* 1 and the merge's rank and id when (a, b) merges, else 0. */
static inline int vocab_find_merge(const struct vocab *v, uint32_t a, uint32_t b, uint32_t *rank,
				   uint32_t *id)
{
	uint64_t key = ((uint64_t)a << 32 | b) + 1;
	uint64_t h = key * 0x9e3779b97f4a7c15ull;
	for (size_t i = (size_t)(h >> 20) & v->mmask;; i = (i + 1) & v->mmask) {
		if (v->mkey[i] == key) {
			*rank = v->mrank[i];
			*id = v->mid[i];
			return 1;
		}
		if (!v->mkey[i])
			return 0;
	}
}

#endif
