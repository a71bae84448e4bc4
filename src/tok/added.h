/*
 * added.h - a tokenizer's added tokens (its special tokens, <|im_start|> and the like, and the
 * other added ones): strings that are cut out of the text before any other step and become
 * their own id. Held as a byte trie, so that finding the leftmost, then longest, token in a
 * text costs at most the longest token's length per byte of text, however many tokens there
 * are (DeepSeek V3 has 818).
 */
#ifndef ACCELNET_TOK_ADDED_H
#define ACCELNET_TOK_ADDED_H

#include <stddef.h>
#include <stdint.h>

struct added_node;

struct added {
	struct added_node *node; /* node 0 unused: index 0 means none */
	size_t n, cap;
	uint32_t root[256]; /* the node of each first byte */
	size_t count;	    /* tokens */
};

/* Adds token s[0..n) (n >= 1) with <id>: 0, -EEXIST when the string is there already, or
 * -ENOMEM. added_free() releases all. */
int added_add(struct added *a, const uint8_t *s, size_t n, uint32_t id);
void added_free(struct added *a);

/*
 * The leftmost token in t[0..n), the longest of those starting there: 1 with its offset, length
 * and id, or 0 when t holds none.
 */
int added_find(const struct added *a, const uint8_t *t, size_t n, size_t *at, size_t *len,
	       uint32_t *id);

#endif
