/*
 * basic.c - the htpasswd users file and checking Basic credentials (see basic.h).
 */
#include "core/secret.h"
#include "guard/basic.h"
#include "guard/apikeys.h"
#include "guard/b64.h"

#include <crypt.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BASIC_FILE_MAX (16u << 20)
#define BASIC_HASH_MAX 255

struct basic_user {
	char name[APIKEYS_TENANT_MAX + 1];
	char hash[BASIC_HASH_MAX + 1];
	_Atomic uint64_t seen[4]; /* the salted SHA-256 of the last password verified */
};

struct basic_users {
	struct basic_user *v; /* sorted by name */
	size_t n;
	unsigned char salt[32];
};

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct basic_user *)a)->name, ((const struct basic_user *)b)->name);
}

/* The hash families let in, by prefix, with the length of the checksum after the last '$'
 * (crypt's alphabet ./0-9A-Za-z): a truncated or mangled hash is refused at load, not
 * found out at a client's first request. */
static const struct {
	const char *prefix;
	size_t tail;
} strong[] = {
    {"$2y$", 53}, {"$2b$", 53}, {"$y$", 43}, {"$gy$", 43}, {"$7$", 43}, {"$6$", 86},
};

static int crypt_char(char c)
{
	return c == '.' || c == '/' || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
	       (c >= 'a' && c <= 'z');
}

static const char *hash_refusal(const char *h)
{
	for (size_t i = 0; i < sizeof(strong) / sizeof(strong[0]); i++)
		if (strncmp(h, strong[i].prefix, strlen(strong[i].prefix)) == 0) {
			const char *tail = strrchr(h, '$') + 1;
			int salt = crypt_checksalt(h);
			if (salt == CRYPT_SALT_METHOD_LEGACY || salt == CRYPT_SALT_METHOD_DISABLED)
				return "this system's crypt(3) calls this hash method legacy or "
				       "disabled: use htpasswd -B (bcrypt)";
			int ok = strlen(tail) == strong[i].tail && salt == CRYPT_SALT_OK;
			for (const char *c = tail; ok && *c; c++)
				ok = crypt_char(*c);
			return ok ? NULL
				  : "the hash is cut short or mangled: make it again with htpasswd";
		}
	if (strncmp(h, "$5$", 3) == 0)
		return "sha256crypt ($5$) is a legacy method here: use htpasswd -B (bcrypt)";
	if (strncmp(h, "$1$", 3) == 0 || strncmp(h, "$apr1$", 6) == 0)
		return "an MD5 hash ($1$, $apr1$) is too weak: use htpasswd -B (bcrypt)";
	if (strncmp(h, "{SHA}", 5) == 0)
		return "a SHA-1 hash ({SHA}) is too weak: use htpasswd -B (bcrypt)";
	if (strncmp(h, "$2a$", 4) == 0)
		return "a $2a$ bcrypt hash may be the buggy variant: make it again with htpasswd "
		       "-B";
	if (h[0] != '$' && strlen(h) == 13)
		return "a DES crypt hash is too weak: use htpasswd -B (bcrypt)";
	return "expected a bcrypt, yescrypt, scrypt or sha512crypt hash (a plain password "
	       "is never accepted): use htpasswd -B";
}

static const char *parse_line(const char *p, size_t len, struct basic_user *e)
{
	const char *colon = memchr(p, ':', len);
	if (!colon)
		return "expected 'USER:HASH'";
	size_t ul = (size_t)(colon - p), hl = len - ul - 1;
	if (!apikeys_tenant_ok(p, ul))
		return "the user must be 1-64 characters of A-Z a-z 0-9 . _ : @ - (it is the "
		       "tenant)";
	if (!hl || hl > BASIC_HASH_MAX)
		return "the hash is missing or longer than 255 bytes";
	for (size_t i = 0; i < hl; i++)
		if ((unsigned char)colon[1 + i] <= 0x20 || colon[1 + i] == 0x7f)
			return "the hash has a space or control character";
	memcpy(e->name, p, ul);
	e->name[ul] = '\0';
	memcpy(e->hash, colon + 1, hl);
	e->hash[hl] = '\0';
	return hash_refusal(e->hash);
}

int basic_parse(const char *name, const char *text, size_t len, struct basic_users **out, char *err,
		size_t errlen)
{
	struct basic_users *u = calloc(1, sizeof(*u));
	size_t cap = 0, line = 0;
	const char *p = text, *end = text + len;
	if (!u || RAND_bytes(u->salt, sizeof(u->salt)) != 1)
		goto nomem;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		const char *l = p;
		p += n + (nl ? 1 : 0);
		line++;
		if (n && l[n - 1] == '\r')
			n--;
		if (!n || l[0] == '#')
			continue;
		if (u->n == cap) {
			struct basic_user *v =
			    realloc(u->v, (cap = cap ? cap * 2 : 16) * sizeof(*v));
			if (!v)
				goto nomem;
			u->v = v;
		}
		struct basic_user *e = &u->v[u->n];
		memset(e, 0, sizeof(*e));
		const char *why = parse_line(l, n, e);
		if (why) {
			snprintf(err, errlen, "%s:%zu: %s", name, line, why);
			basic_free(u);
			return -EINVAL;
		}
		u->n++;
	}
	if (!u->n) {
		snprintf(err, errlen, "%s: no users: every request would be refused", name);
		basic_free(u);
		return -EINVAL;
	}
	qsort(u->v, u->n, sizeof(*u->v), by_name);
	for (size_t i = 1; i < u->n; i++)
		if (strcmp(u->v[i].name, u->v[i - 1].name) == 0) {
			snprintf(err, errlen, "%s: user '%s' is given twice", name, u->v[i].name);
			basic_free(u);
			return -EINVAL;
		}
	*out = u;
	return 0;
nomem:
	snprintf(err, errlen, "%s: out of memory", name);
	basic_free(u);
	return -ENOMEM;
}

int basic_load(const char *path, struct basic_users **out, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	int rc = secret_file_read(path, BASIC_FILE_MAX, &buf, &len, err, errlen);
	if (rc < 0)
		return rc;
	rc = basic_parse(path, buf, len, out, err, errlen);
	secret_file_free(buf, len);
	return rc;
}

void basic_free(struct basic_users *u)
{
	if (!u)
		return;
	if (u->v)
		OPENSSL_cleanse(u->v, u->n * sizeof(*u->v));
	free(u->v);
	OPENSSL_cleanse(u->salt, sizeof(u->salt));
	free(u);
}

size_t basic_count(const struct basic_users *u)
{
	return u->n;
}

/* crypt(3) of <pass> with <hash>'s setting equals <hash>? The full, slow verification. */
static int crypt_matches(const char *pass, const char *hash)
{
	struct crypt_data cd;
	memset(&cd, 0, sizeof(cd));
	const char *out = crypt_rn(pass, hash, &cd, sizeof(cd));
	size_t hl = strlen(hash);
	int ok = out && out[0] != '*' && strlen(out) == hl && CRYPTO_memcmp(out, hash, hl) == 0;
	OPENSSL_cleanse(&cd, sizeof(cd));
	return ok;
}

enum basic_result basic_check(struct basic_users *u, const char *b64, size_t len, char *user,
			      size_t cap)
{
	unsigned char raw[BASIC_CRED_MAX + 1];
	enum basic_result r = BASIC_MALFORMED;
	long n = b64_decode(B64_STD, b64, len, raw, BASIC_CRED_MAX);
	if (n <= 0)
		goto out;
	raw[n] = '\0';
	unsigned char *colon = memchr(raw, ':', (size_t)n);
	if (!colon || memchr(raw, '\0', (size_t)n))
		goto out;
	size_t ul = (size_t)(colon - raw);
	const char *pass = (const char *)colon + 1;
	if (!ul || ul > APIKEYS_TENANT_MAX || !*pass)
		goto out;
	*colon = '\0';
	struct basic_user probe;
	memcpy(probe.name, raw, ul + 1);
	struct basic_user *e = bsearch(&probe, u->v, u->n, sizeof(*u->v), by_name);
	r = BASIC_INVALID;
	if (!e) {
		(void)crypt_matches(pass, u->v[0].hash); /* as long as for a known user */
		goto out;
	}
	/* the salted digest of user and password: remembered once a verification passed */
	unsigned char salted[sizeof(u->salt) + BASIC_CRED_MAX], d[32];
	memcpy(salted, u->salt, sizeof(u->salt));
	memcpy(salted + sizeof(u->salt), raw, (size_t)n);
	int dig = SHA256(salted, sizeof(u->salt) + (size_t)n, d) != NULL;
	OPENSSL_cleanse(salted, sizeof(salted));
	uint64_t w[4], seen[4];
	if (dig) {
		memcpy(w, d, 32);
		for (int i = 0; i < 4; i++)
			seen[i] = atomic_load_explicit(&e->seen[i], memory_order_relaxed);
		if (CRYPTO_memcmp(w, seen, 32) == 0) {
			r = BASIC_OK;
			goto found;
		}
	}
	if (!crypt_matches(pass, e->hash))
		goto wipe;
	r = BASIC_OK;
	if (dig)
		for (int i = 0; i < 4; i++)
			atomic_store_explicit(&e->seen[i], w[i], memory_order_relaxed);
found:
	if (ul < cap)
		memcpy(user, raw, ul + 1);
	else
		r = BASIC_INVALID;
wipe:
	OPENSSL_cleanse(d, sizeof(d));
	OPENSSL_cleanse(w, sizeof(w));
out:
	OPENSSL_cleanse(raw, sizeof(raw));
	return r;
}
