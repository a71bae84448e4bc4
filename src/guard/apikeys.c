/*
 * apikeys.c - the keys file and lookups by digest (see apikeys.h).
 */
#include "core/hex.h"
#include "core/secret.h"
#include "guard/apikeys.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define APIKEYS_FILE_MAX (16u << 20)

struct apikey {
	unsigned char digest[32];
	char tenant[APIKEYS_TENANT_MAX + 1];
};

struct apikeys {
	struct apikey *v; /* sorted by digest */
	size_t n;
};

static int sha256(const void *p, size_t len, unsigned char out[32])
{
	unsigned int n = 0;
	return EVP_Digest(p, len, out, &n, EVP_sha256(), NULL) == 1 && n == 32 ? 0 : -EIO;
}

static int by_digest(const void *a, const void *b)
{
	return memcmp(((const struct apikey *)a)->digest, ((const struct apikey *)b)->digest, 32);
}

int apikeys_tenant_ok(const char *p, size_t len)
{
	if (!len || len > APIKEYS_TENANT_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == ':' || c == '@' || c == '-'))
			return 0;
	}
	return 1;
}

/* One "TENANT KEY" line into <e>. 0, or a message (never quoting the key). */
static const char *parse_line(const char *p, size_t len, struct apikey *e)
{
	size_t i = 0, t0, t1, k0, k1;
	while (i < len && (p[i] == ' ' || p[i] == '\t'))
		i++;
	for (t0 = i; i < len && p[i] != ' ' && p[i] != '\t'; i++)
		;
	t1 = i;
	while (i < len && (p[i] == ' ' || p[i] == '\t'))
		i++;
	for (k0 = i; i < len && p[i] != ' ' && p[i] != '\t'; i++)
		;
	k1 = i;
	while (i < len && (p[i] == ' ' || p[i] == '\t'))
		i++;
	if (k0 == k1 || i != len)
		return "expected 'TENANT KEY' (two words)";
	if (!apikeys_tenant_ok(p + t0, t1 - t0))
		return "the tenant must be 1-64 characters of A-Z a-z 0-9 . _ : @ -";
	memcpy(e->tenant, p + t0, t1 - t0);
	e->tenant[t1 - t0] = '\0';
	if (k1 - k0 > APIKEYS_KEY_MAX)
		return "the key is longer than 512 bytes";
	for (size_t j = k0; j < k1; j++)
		if ((unsigned char)p[j] < 0x21 || p[j] == 0x7f)
			return "the key has a control character: no client could send it";
	if (k1 - k0 >= 7 && memcmp(p + k0, "sha256:", 7) == 0) {
		if (k1 - k0 != 7 + 64)
			return "a sha256: key needs exactly 64 hex digits";
		for (size_t j = 0; j < 32; j++) {
			int hi = hex_value(p[k0 + 7 + 2 * j]), lo = hex_value(p[k0 + 8 + 2 * j]);
			if (hi < 0 || lo < 0)
				return "a sha256: key needs exactly 64 hex digits";
			e->digest[j] = (unsigned char)(hi << 4 | lo);
		}
		return NULL;
	}
	if (k1 - k0 < 16)
		return "the key is shorter than 16 bytes: too easy to guess";
	return sha256(p + k0, k1 - k0, e->digest) ? "cannot hash the key" : NULL;
}

int apikeys_parse(const char *name, const char *text, size_t len, struct apikeys **out, char *err,
		  size_t errlen)
{
	struct apikeys *k = calloc(1, sizeof(*k));
	size_t cap = 0, line = 0;
	const char *p = text, *end = text + len;
	if (!k)
		goto nomem;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		const char *l = p;
		p += n + (nl ? 1 : 0);
		line++;
		if (n && l[n - 1] == '\r')
			n--;
		size_t s = 0;
		while (s < n && (l[s] == ' ' || l[s] == '\t'))
			s++;
		if (s == n || l[s] == '#')
			continue;
		if (k->n == cap) {
			struct apikey *v = realloc(k->v, (cap = cap ? cap * 2 : 16) * sizeof(*v));
			if (!v)
				goto nomem;
			k->v = v;
		}
		const char *why = parse_line(l, n, &k->v[k->n]);
		if (why) {
			snprintf(err, errlen, "%s:%zu: %s", name, line, why);
			apikeys_free(k);
			return -EINVAL;
		}
		k->n++;
	}
	if (!k->n) {
		snprintf(err, errlen, "%s: no keys: every request would be refused", name);
		apikeys_free(k);
		return -EINVAL;
	}
	qsort(k->v, k->n, sizeof(*k->v), by_digest);
	for (size_t i = 1; i < k->n; i++)
		if (memcmp(k->v[i].digest, k->v[i - 1].digest, 32) == 0) {
			snprintf(err, errlen, "%s: one key is given twice (tenants '%s' and '%s')",
				 name, k->v[i - 1].tenant, k->v[i].tenant);
			apikeys_free(k);
			return -EINVAL;
		}
	*out = k;
	return 0;
nomem:
	snprintf(err, errlen, "%s: out of memory", name);
	apikeys_free(k);
	return -ENOMEM;
}

int apikeys_load(const char *path, struct apikeys **out, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	int rc = secret_file_read(path, APIKEYS_FILE_MAX, &buf, &len, err, errlen);
	if (rc < 0)
		return rc;
	rc = apikeys_parse(path, buf, len, out, err, errlen);
	secret_file_free(buf, len);
	return rc;
}

void apikeys_free(struct apikeys *k)
{
	if (!k)
		return;
	if (k->v)
		OPENSSL_cleanse(k->v, k->n * sizeof(*k->v));
	free(k->v);
	free(k);
}

size_t apikeys_count(const struct apikeys *k)
{
	return k->n;
}

const char *apikeys_lookup(const struct apikeys *k, const char *key, size_t len)
{
	struct apikey probe;
	if (!len || len > APIKEYS_KEY_MAX || sha256(key, len, probe.digest))
		return NULL;
	const struct apikey *hit = bsearch(&probe, k->v, k->n, sizeof(*k->v), by_digest);
	/* the search compares digests, which say nothing of the key; the match itself is
	 * confirmed in constant time all the same */
	if (!hit || CRYPTO_memcmp(hit->digest, probe.digest, 32) != 0)
		return NULL;
	return hit->tenant;
}
