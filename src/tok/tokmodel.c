/*
 * tokmodel.c - a model's tokenizer, chat format and block size (see tokmodel.h).
 */
#include "tok/tokmodel.h"
#include "tok/tokspm.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static _Atomic uint64_t serials;

int tokmodel_load(const char *tokenizer, const char *chat_template, const char *chat_format,
		  unsigned block_size, struct tokmodel *m, char *err, size_t errlen)
{
	char beside[4096];
	memset(m, 0, sizeof(*m));
	int rc = tok_load(tokenizer, &m->tok, err, errlen);
	if (rc < 0)
		return rc;
	if (!chat_template) {
		const char *slash = strrchr(tokenizer, '/');
		int dir = slash ? (int)(slash - tokenizer + 1) : 0;
		int n =
		    snprintf(beside, sizeof(beside), "%.*stokenizer_config.json", dir, tokenizer);
		if (n > 0 && (size_t)n < sizeof(beside) && access(beside, F_OK) == 0)
			chat_template = beside;
	}
	if (chat_format && !chat_template) {
		snprintf(err, errlen,
			 "chat_format: needs a tokenizer_config.json (chat_template: PATH, or one "
			 "beside the tokenizer) for the tokens the format writes");
		rc = -EINVAL;
		goto fail;
	}
	if (chat_template) {
		rc = chat_load(chat_template, chat_format, &m->chat, m->chat_skipped,
			       sizeof(m->chat_skipped));
		if (rc < 0 && rc != -ENOTSUP) {
			snprintf(err, errlen, "%s", m->chat_skipped);
			goto fail;
		}
		if (rc == 0)
			m->chat_skipped[0] = 0;
		m->has_chat = rc == 0;
	}
	m->block_size = block_size;
	m->serial = atomic_fetch_add(&serials, 1) + 1;
	return 0;
fail:
	tok_free(&m->tok);
	memset(m, 0, sizeof(*m));
	return rc;
}

void tokmodel_free(struct tokmodel *m)
{
	if (m && m->serial)
		tok_free(&m->tok);
}

uint64_t tokmodel_block_hash(uint64_t prev, const uint32_t *ids, size_t block_size)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	uint32_t le[TOKMODEL_BLOCK_MAX]; /* the ids as little-endian numbers, whatever the host */
	for (size_t i = 0; i < block_size; i++)
		le[i] = __builtin_bswap32(ids[i]);
	ids = le;
#endif
	return XXH3_64bits_withSeed(ids, block_size * sizeof(*ids), prev);
}

size_t tokmodel_blocks(const uint32_t *ids, size_t n, size_t block_size, uint64_t seed,
		       uint64_t *hash, size_t max)
{
	size_t k = 0;
	if (!block_size || block_size > TOKMODEL_BLOCK_MAX)
		return 0;
	for (uint64_t prev = seed; k < max && (k + 1) * block_size <= n; k++)
		prev = hash[k] = tokmodel_block_hash(prev, ids + k * block_size, block_size);
	return k;
}
