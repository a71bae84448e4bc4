/*
 * jwt.c - verifying a JWT (see jwt.h).
 *
 * The JSON of a token is parsed by jansson, whose allocator is the process's (jansson has
 * one, set once here): while a thread verifies a token its allocations come from that
 * thread's fixed arena, reset for each part, and frees inside the arena are no-ops;
 * outside a verification (a JWKS file at load) they go to malloc and free as usual. So a
 * request costs no heap allocation for its JSON and a hostile token cannot grow memory: a
 * part that needs more than the arena is refused as malformed.
 */
#include "guard/jwt.h"
#include "guard/apikeys.h"
#include "guard/b64.h"

#include <jansson.h>
#include <math.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define JWT_ARENA_BYTES (64u << 10)
#define JWT_PART_MAX (JWT_TOKEN_MAX / 4 * 3)

/* --- the arena jansson allocates from while a token is verified --- */

static _Thread_local struct {
	int on;
	size_t used;
	_Alignas(16) unsigned char mem[JWT_ARENA_BYTES];
} arena;

static void *arena_malloc(size_t n)
{
	if (!arena.on)
		return malloc(n);
	n = (n + 15) & ~(size_t)15;
	if (n > JWT_ARENA_BYTES - arena.used)
		return NULL; /* jansson fails the parse */
	void *p = arena.mem + arena.used;
	arena.used += n;
	return p;
}

static void arena_free(void *p)
{
	unsigned char *c = p;
	if (c >= arena.mem && c < arena.mem + JWT_ARENA_BYTES)
		return;
	free(p);
}

static pthread_once_t alloc_once = PTHREAD_ONCE_INIT;

static void alloc_init(void)
{
	json_set_alloc_funcs(arena_malloc, arena_free);
	json_object_seed(0); /* now, not inside a worker's first verification */
}

void jwt_init(void)
{
	pthread_once(&alloc_once, alloc_init);
}

/* Parse base64url part <s>[0..len) as a JSON object; NULL if it is not one. */
static json_t *part_json(const char *s, size_t len)
{
	unsigned char raw[JWT_PART_MAX];
	long n = b64_decode(B64_URL, s, len, raw, sizeof(raw));
	if (n <= 0)
		return NULL;
	arena.used = 0;
	json_t *o = json_loadb((const char *)raw, (size_t)n, JSON_REJECT_DUPLICATES, NULL);
	if (o && !json_is_object(o)) {
		json_decref(o);
		o = NULL;
	}
	return o;
}

/* --- signatures --- */

/* ECDSA's raw r||s (RFC 7518 3.4) as the DER SEQUENCE OpenSSL verifies; its length. */
static size_t ecdsa_der(const unsigned char rs[64], unsigned char out[72])
{
	size_t o = 2;
	for (int half = 0; half < 2; half++) {
		const unsigned char *v = rs + 32 * half;
		size_t skip = 0;
		while (skip < 31 && !v[skip])
			skip++;
		size_t n = 32 - skip, pad = v[skip] & 0x80 ? 1 : 0;
		out[o++] = 0x02;
		out[o++] = (unsigned char)(n + pad);
		if (pad)
			out[o++] = 0;
		memcpy(out + o, v + skip, n);
		o += n;
	}
	out[0] = 0x30;
	out[1] = (unsigned char)(o - 2);
	return o;
}

static int verify_with(const struct jwt_key *k, const char *signed_part, size_t slen,
		       const unsigned char *sig, size_t siglen)
{
	if (k->alg == CONF_JWT_HS256) {
		unsigned char mac[EVP_MAX_MD_SIZE];
		unsigned int mlen = 0;
		if (siglen != 32 || !HMAC(EVP_sha256(), k->secret, (int)k->secret_len,
					  (const unsigned char *)signed_part, slen, mac, &mlen))
			return 0;
		return mlen == 32 && CRYPTO_memcmp(mac, sig, 32) == 0;
	}
	unsigned char der[72];
	if (k->alg == CONF_JWT_ES256) {
		if (siglen != 64)
			return 0;
		siglen = ecdsa_der(sig, der);
		sig = der;
	}
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ok = md && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, k->pkey) == 1 &&
		 EVP_DigestVerify(md, sig, siglen, (const unsigned char *)signed_part, slen) == 1;
	EVP_MD_CTX_free(md);
	return ok;
}

/* --- claims --- */

static int alg_of(const char *s, enum conf_jwt_alg *alg)
{
	static const char *const names[] = {
#define ALG_NAME(name) #name,
	    CONF_JWT_ALGS(ALG_NAME)
#undef ALG_NAME
	};
	for (unsigned a = 0; s && a < CONF_JWT_NALGS; a++)
		if (strcmp(s, names[a]) == 0) {
			*alg = (enum conf_jwt_alg)a;
			return 1;
		}
	return 0;
}

/* A NumericDate claim: 1 with *t, 0 when absent, -1 when not a number. */
static int numeric_date(json_t *o, const char *name, double *t)
{
	json_t *v = json_object_get(o, name);
	if (!v)
		return 0;
	if (!json_is_number(v))
		return -1;
	*t = json_number_value(v);
	return isfinite(*t) ? 1 : -1;
}

static int audience_has(json_t *aud, const char *want)
{
	if (json_is_string(aud))
		return strcmp(json_string_value(aud), want) == 0;
	size_t i;
	json_t *v;
	if (json_is_array(aud))
		json_array_foreach(aud, i, v) if (json_is_string(v) &&
						  strcmp(json_string_value(v), want) == 0) return 1;
	return 0;
}

static enum jwt_result check_claims(json_t *c, const struct jwt_policy *p, int64_t now,
				    char *tenant, size_t cap)
{
	double exp, nbf;
	int has = numeric_date(c, "exp", &exp);
	if (has <= 0)
		return has < 0 ? JWT_MALFORMED : JWT_EXPIRED; /* a token that never expires: no */
	if (exp + p->leeway_s <= (double)now)
		return JWT_EXPIRED;
	has = numeric_date(c, "nbf", &nbf);
	if (has < 0)
		return JWT_MALFORMED;
	if (has && nbf > (double)now + p->leeway_s)
		return JWT_NOT_YET;
	if (p->audience && !audience_has(json_object_get(c, "aud"), p->audience))
		return JWT_BAD_AUDIENCE;
	if (p->issuer) {
		const char *iss = json_string_value(json_object_get(c, "iss"));
		if (!iss || strcmp(iss, p->issuer) != 0)
			return JWT_BAD_ISSUER;
	}
	json_t *t = json_object_get(c, p->tenant_claim);
	size_t tl = json_string_length(t);
	if (!json_is_string(t) || !apikeys_tenant_ok(json_string_value(t), tl) || tl >= cap)
		return JWT_BAD_TENANT;
	memcpy(tenant, json_string_value(t), tl + 1);
	return JWT_OK;
}

/* --- the token --- */

static enum jwt_result verify(const struct jwt_keys *keys, const struct jwt_policy *p,
			      const char *tok, size_t len, int64_t now, char *tenant, size_t cap)
{
	if (!len || len > JWT_TOKEN_MAX)
		return JWT_MALFORMED;
	const char *d1 = memchr(tok, '.', len);
	const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - tok)) : NULL;
	if (!d2 || d1 == tok || d2 == d1 + 1 || d2 + 1 == tok + len ||
	    memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - tok)))
		return JWT_MALFORMED;

	json_t *h = part_json(tok, (size_t)(d1 - tok));
	if (!h)
		return JWT_MALFORMED;
	enum conf_jwt_alg alg = CONF_JWT_HS256;
	int alg_ok = alg_of(json_string_value(json_object_get(h, "alg")), &alg);
	json_t *kid_v = json_object_get(h, "kid");
	int crit = json_object_get(h, "crit") != NULL, kid_bad = kid_v && !json_is_string(kid_v);
	char kid[JWKS_KID_MAX + 1] = "";
	if (json_is_string(kid_v) && json_string_length(kid_v) <= JWKS_KID_MAX)
		memcpy(kid, json_string_value(kid_v), json_string_length(kid_v) + 1);
	else if (kid_v)
		kid_bad = 1;
	json_decref(h);
	if (crit || kid_bad)
		return JWT_MALFORMED;
	if (!alg_ok || !(p->algorithms & (1u << alg)))
		return JWT_BAD_ALG;

	unsigned char sig[512];
	long slen = b64_decode(B64_URL, d2 + 1, len - (size_t)(d2 + 1 - tok), sig, sizeof(sig));
	if (slen <= 0)
		return JWT_MALFORMED;
	int tried = 0, ok = 0;
	for (size_t i = 0; !ok && i < jwks_count(keys); i++) {
		const struct jwt_key *k = jwks_key(keys, i);
		if (k->alg != alg || (kid[0] && strcmp(k->kid, kid) != 0))
			continue;
		tried = 1;
		ok = verify_with(k, tok, (size_t)(d2 - tok), sig, (size_t)slen);
	}
	if (!tried)
		return JWT_BAD_ALG;
	if (!ok)
		return JWT_BAD_SIGNATURE;

	json_t *c = part_json(d1 + 1, (size_t)(d2 - d1 - 1));
	if (!c)
		return JWT_MALFORMED;
	enum jwt_result r = check_claims(c, p, now, tenant, cap);
	json_decref(c);
	return r;
}

enum jwt_result jwt_verify(const struct jwt_keys *keys, const struct jwt_policy *p, const char *tok,
			   size_t len, int64_t now, char *tenant, size_t cap)
{
	jwt_init();
	arena.on = 1;
	enum jwt_result r = verify(keys, p, tok, len, now, tenant, cap);
	arena.on = 0;
	arena.used = 0;
	return r;
}

const char *jwt_result_text(enum jwt_result r)
{
	switch (r) {
	case JWT_OK:
		return "the token is valid";
	case JWT_MALFORMED:
		return "the token is malformed";
	case JWT_BAD_ALG:
		return "the token's algorithm or key id is not accepted here";
	case JWT_BAD_SIGNATURE:
		return "the token's signature is not valid";
	case JWT_EXPIRED:
		return "the token has expired (or has no exp)";
	case JWT_NOT_YET:
		return "the token is not valid yet (nbf)";
	case JWT_BAD_AUDIENCE:
		return "the token is not for this audience (aud)";
	case JWT_BAD_ISSUER:
		return "the token is not from the expected issuer (iss)";
	case JWT_BAD_TENANT:
		return "the token names no usable tenant";
	}
	return "the token is not valid";
}
