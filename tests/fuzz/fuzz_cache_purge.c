/*
 * fuzz_cache_purge.c - libFuzzer target: the admin purge's parameters and its matching
 * (cache/purge.h) on input that an admin request or a stored object could hold.
 *
 * Input: the parameters, a NUL, a store key, a NUL, a stored head. The parameters are parsed
 * (a refusal must say why, a purge taken must hold only what a request can: a lower-case
 * visible host, a target starting with '/'); the key is split (the parts must lie inside it);
 * the head is searched; and what was taken must match the key built from it the way
 * caching.c builds one, with and without an inference suffix, and a head listing its tag.
 */
#include "cache/key.h"
#include "cache/purge.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct cache_purge P;
static char key[3 * CACHE_PURGE_MAX];

static void check_taken(void)
{
	switch (P.kind) {
	case CACHE_PURGE_ALL:
		return;
	case CACHE_PURGE_TAG: {
		static char head[CACHE_PURGE_MAX + 64];
		int n = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nCache-Tag: x ,%.*s\r\n",
				 (int)P.tag_len, P.tag);
		if (!P.tag_len || P.tag_len >= CACHE_PURGE_MAX || memchr(P.tag, ',', P.tag_len))
			abort();
		if (!cache_purge_test(&P, "0 p h /", 7, head, (size_t)n))
			abort();
		return;
	}
	case CACHE_PURGE_URI:
	case CACHE_PURGE_PREFIX:
		break;
	default:
		abort();
	}
	if (!P.host_len || P.host_len >= CACHE_PURGE_MAX || !P.target_len ||
	    P.target_len >= CACHE_PURGE_MAX || P.target[0] != '/')
		abort();
	for (size_t i = 0; i < P.host_len; i++)
		if (P.host[i] <= ' ' || P.host[i] >= 0x7f || (P.host[i] >= 'A' && P.host[i] <= 'Z'))
			abort();
	for (size_t i = 0; i < P.target_len; i++)
		if (P.target[i] <= ' ' || P.target[i] >= 0x7f || P.target[i] == '#')
			abort();
	int n = snprintf(key, sizeof(key), "3 s %.*s %.*s", (int)P.host_len, P.host,
			 (int)P.target_len, P.target);
	if (!cache_purge_test(&P, key, (size_t)n, NULL, 0))
		abort();
	n += snprintf(key + n, sizeof(key) - (size_t)n, " POST 0123456789abcdef0123456789abcdef");
	if (!cache_purge_test(&P, key, (size_t)n, NULL, 0))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char err[256];
	const char *in = (const char *)data;
	const char *nul = memchr(in, 0, size);
	size_t plen = nul ? (size_t)(nul - in) : size;
	const char *k = nul ? nul + 1 : in + size;
	size_t rest = size - plen - (nul ? 1 : 0);
	const char *nul2 = memchr(k, 0, rest);
	size_t klen = nul2 ? (size_t)(nul2 - k) : rest;
	const char *head = nul2 ? nul2 + 1 : k + rest;
	size_t hlen = rest - klen - (nul2 ? 1 : 0);

	err[0] = '\0';
	int rc = cache_purge_parse(&P, in, plen, err, sizeof(err));
	if (rc < 0 && (!err[0] || !memchr(err, 0, sizeof(err))))
		abort();
	if (rc == 0)
		check_taken();

	const char *h, *t;
	size_t hl, tl;
	if (cache_key_split(k, klen, &h, &hl, &t, &tl) == 0 &&
	    (h < k || h + hl > k + klen || t <= h + hl || t + tl > k + klen || !tl || t[0] != '/'))
		abort();
	if (rc == 0) {
		(void)cache_purge_test(&P, k, klen, head, hlen);
		(void)cache_purge_test(&P, k, klen, NULL, 0);
	}
	(void)cache_purge_head_has_tag(head, hlen, "cache-tag", 9, k, klen);
	return 0;
}
