/*
 * added.c - the added tokens' trie (added.h). Each node knows its byte, its first child and
 * its next sibling (children are few past the first byte, so a list is enough), and the id
 * of the token ending there, if any; the first byte is a table. A search walks the trie from
 * each byte of the text whose first byte starts a token, remembering the longest token ended
 * on the way.
 */
#include "tok/added.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NO_ID UINT32_MAX

struct added_node {
	uint32_t child, sibling;
	uint32_t id;
	uint8_t byte;
};

static uint32_t node_new(struct added *a, uint8_t byte)
{
	if (a->n == 0)
		a->n = 1; /* index 0 is "none" */
	if (a->n >= a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 256;
		struct added_node *node = realloc(a->node, cap * sizeof(*node));
		if (!node)
			return 0;
		a->node = node;
		a->cap = cap;
	}
	a->node[a->n] = (struct added_node){0, 0, NO_ID, byte};
	return (uint32_t)a->n++;
}

int added_add(struct added *a, const uint8_t *s, size_t n, uint32_t id)
{
	if (n == 0)
		return -EINVAL;
	uint32_t cur = a->root[s[0]];
	if (!cur) {
		cur = node_new(a, s[0]);
		if (!cur)
			return -ENOMEM;
		a->root[s[0]] = cur;
	}
	for (size_t i = 1; i < n; i++) {
		uint32_t c = a->node[cur].child;
		while (c && a->node[c].byte != s[i])
			c = a->node[c].sibling;
		if (!c) {
			c = node_new(a, s[i]);
			if (!c)
				return -ENOMEM;
			a->node[c].sibling = a->node[cur].child;
			a->node[cur].child = c;
		}
		cur = c;
	}
	if (a->node[cur].id != NO_ID)
		return -EEXIST;
	a->node[cur].id = id;
	a->count++;
	return 0;
}

void added_free(struct added *a)
{
	free(a->node);
	memset(a, 0, sizeof(*a));
}

int added_find(const struct added *a, const uint8_t *t, size_t n, size_t *at, size_t *len,
	       uint32_t *id)
{
	if (!a->count)
		return 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t cur = a->root[t[i]];
		size_t best = 0;
		uint32_t best_id = NO_ID;
		for (size_t j = i + 1; cur; j++) {
			if (a->node[cur].id != NO_ID) {
				best = j - i;
				best_id = a->node[cur].id;
			}
			if (j == n)
				break;
			uint32_t c = a->node[cur].child;
			while (c && a->node[c].byte != t[j])
				c = a->node[c].sibling;
			cur = c;
		}
		if (best) {
			*at = i;
			*len = best;
			*id = best_id;
			return 1;
		}
	}
	return 0;
}
