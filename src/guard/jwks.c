/*
 * jwks.c - loading JWT verification keys: PEM public keys, an HS256 secret, or a JWKS
 * document (see jwks.h). Runs on the main thread at start and on SIGHUP, never per request.
 */
#include "core/secret.h"
#include "guard/jwks.h"
#include "guard/b64.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JWKS_FILE_MAX (1u << 20)
#define JWKS_RSA_MIN_BITS 2048
#define JWKS_RSA_MAX_BITS 4096	/* guard/jwt.c reads signatures of up to 512 bytes */
#define JWKS_RSA_MAX_BYTES 2048 /* a JWK's modulus as read: 16384 bits, refused after */
#define JWKS_SECRET_MIN 32	/* RFC 7518 3.2: at least the hash's size */

struct jwt_keys {
	struct jwt_key v[JWKS_KEYS_MAX];
	size_t n;
};

static void key_clear(struct jwt_key *k)
{
	EVP_PKEY_free(k->pkey);
	if (k->secret) {
		OPENSSL_cleanse(k->secret, k->secret_len);
		free(k->secret);
	}
	memset(k, 0, sizeof(*k));
}

void jwks_free(struct jwt_keys *k)
{
	if (!k)
		return;
	for (size_t i = 0; i < k->n; i++)
		key_clear(&k->v[i]);
	free(k);
}

size_t jwks_count(const struct jwt_keys *k)
{
	return k->n;
}

const struct jwt_key *jwks_key(const struct jwt_keys *k, size_t i)
{
	return i < k->n ? &k->v[i] : NULL;
}

unsigned jwks_algorithms(const struct jwt_keys *k)
{
	unsigned m = 0;
	for (size_t i = 0; i < k->n; i++)
		m |= 1u << k->v[i].alg;
	return m;
}

/* The algorithm a public key serves, or a reason it serves none. */
static const char *pkey_alg(EVP_PKEY *pk, enum conf_jwt_alg *alg)
{
	char group[64];
	size_t glen = 0;
	switch (EVP_PKEY_get_base_id(pk)) {
	case EVP_PKEY_RSA:
		if (EVP_PKEY_get_bits(pk) < JWKS_RSA_MIN_BITS)
			return "an RSA key shorter than 2048 bits";
		if (EVP_PKEY_get_bits(pk) > JWKS_RSA_MAX_BITS)
			return "an RSA key longer than 4096 bits";
		*alg = CONF_JWT_RS256;
		return NULL;
	case EVP_PKEY_EC:
		if (!EVP_PKEY_get_group_name(pk, group, sizeof(group), &glen) ||
		    (strcmp(group, "prime256v1") != 0 && strcmp(group, "P-256") != 0))
			return "an EC key not on P-256 (ES256 needs P-256)";
		*alg = CONF_JWT_ES256;
		return NULL;
	default:
		return "a key that is neither RSA nor EC P-256";
	}
}

static struct jwt_keys *keys_new(void)
{
	return calloc(1, sizeof(struct jwt_keys));
}

/* "NAME: key N: why" (N from 1; 0: the file as a whole); frees <k>, returns <rc>. */
static int fail(struct jwt_keys *k, int rc, char *err, size_t errlen, const char *name,
		size_t keyno, const char *why)
{
	if (keyno)
		snprintf(err, errlen, "%s: key %zu: %s", name, keyno, why);
	else
		snprintf(err, errlen, "%s: %s", name, why);
	jwks_free(k);
	return rc;
}

static size_t count_of(const char *text, size_t len, const char *s)
{
	size_t n = 0, sl = strlen(s);
	for (const char *p = text; (p = memmem(p, len - (size_t)(p - text), s, sl)); p += sl)
		n++;
	return n;
}

/* Whether a would-be HS256 secret is in fact a public key in another spelling: a JWKS or
 * JWK document, an OpenSSH public key, or a DER public key (raw, or base64 without the PEM
 * lines). The issuer publishes those, so as an HMAC secret anyone could sign tokens with it
 * (the HS256/RS256 confusion, made by the configuration). A reason, or NULL. */
static const char *public_key_text(const char *text, size_t len)
{
	size_t i = 0;
	while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
		i++;
	if (i < len && (text[i] == '{' || text[i] == '['))
		return "holds a JSON document, not a secret: give a JWKS document as jwks_file";
	if ((len - i >= 4 && memcmp(text + i, "ssh-", 4) == 0) ||
	    (len - i >= 6 && memcmp(text + i, "ecdsa-", 6) == 0))
		return "holds an OpenSSH public key, not a secret: give a PEM public key";
	unsigned char der[JWKS_SECRET_MAX];
	const unsigned char *p = (const unsigned char *)text;
	ERR_set_mark(); /* a secret that is no DER leaves OpenSSL's reasons: not ours to keep */
	EVP_PKEY *pk = d2i_PUBKEY(NULL, &p, (long)len);
	if (!pk) { /* the base64 body of a PEM block, its lines joined */
		char flat[JWKS_SECRET_MAX];
		size_t n = 0;
		for (size_t j = i; j < len && n < sizeof(flat); j++)
			if (text[j] != '\n' && text[j] != '\r' && text[j] != ' ')
				flat[n++] = text[j];
		long dl = n < sizeof(flat) ? b64_decode(B64_STD, flat, n, der, sizeof(der)) : -1;
		p = der;
		if (dl > 0)
			pk = d2i_PUBKEY(NULL, &p, dl);
		OPENSSL_cleanse(flat, sizeof(flat));
		OPENSSL_cleanse(der, sizeof(der));
	}
	ERR_pop_to_mark();
	int is_key = pk != NULL;
	EVP_PKEY_free(pk);
	return is_key ? "holds a public key (DER or base64), not a secret: give it as a PEM "
			"public key"
		      : NULL;
}

int jwks_parse_keys_file(const char *name, const char *text, size_t len, struct jwt_keys **out,
			 char *err, size_t errlen)
{
	struct jwt_keys *k = keys_new();
	if (!k)
		return fail(k, -ENOMEM, err, errlen, name, 0, "out of memory");
	size_t blocks = count_of(text, len, "-----BEGIN ");
	if (!blocks) { /* an HS256 secret */
		/* the whole file: a DER key may end in a byte that reads as a line end */
		const char *pub = public_key_text(text, len);
		if (pub)
			return fail(k, -EINVAL, err, errlen, name, 0, pub);
		while (len && (text[len - 1] == '\n' || text[len - 1] == '\r'))
			len--;
		if (len < JWKS_SECRET_MIN || len > JWKS_SECRET_MAX)
			return fail(k, -EINVAL, err, errlen, name, 0,
				    "holds no PEM public key, and as an HS256 secret it must be "
				    "32 to 512 bytes");
		if (!(k->v[0].secret = malloc(len)))
			return fail(k, -ENOMEM, err, errlen, name, 0, "out of memory");
		memcpy(k->v[0].secret, text, len);
		k->v[0].secret_len = len;
		k->v[0].alg = CONF_JWT_HS256;
		k->n = 1;
		*out = k;
		return 0;
	}
	if (count_of(text, len, "PRIVATE KEY-----"))
		return fail(k, -EINVAL, err, errlen, name, 0,
			    "holds a private key: give only the public keys");
	if (blocks > JWKS_KEYS_MAX)
		return fail(k, -EINVAL, err, errlen, name, 0, "more than 64 keys");
	BIO *b = BIO_new_mem_buf(text, (int)len);
	if (!b)
		return fail(k, -ENOMEM, err, errlen, name, 0, "out of memory");
	EVP_PKEY *pk;
	while (k->n < blocks && (pk = PEM_read_bio_PUBKEY(b, NULL, NULL, NULL))) {
		struct jwt_key *e = &k->v[k->n++];
		e->pkey = pk;
		const char *why = pkey_alg(pk, &e->alg);
		if (why) {
			BIO_free(b);
			return fail(k, -EINVAL, err, errlen, name, k->n, why);
		}
	}
	BIO_free(b);
	if (k->n != blocks)
		return fail(k, -EINVAL, err, errlen, name, k->n + 1,
			    "not a PEM public key (-----BEGIN PUBLIC KEY-----)");
	*out = k;
	return 0;
}

/* A base64url member <m> of JWK <o> into out[0..cap): its length, or -1. */
static long jwk_bytes(json_t *o, const char *m, unsigned char *out, size_t cap)
{
	json_t *v = json_object_get(o, m);
	if (!json_is_string(v))
		return -1;
	return b64_decode(B64_URL, json_string_value(v), json_string_length(v), out, cap);
}

static EVP_PKEY *pkey_fromdata(const char *type, OSSL_PARAM_BLD *bld)
{
	EVP_PKEY *pk = NULL;
	OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
	if (!params || !ctx || EVP_PKEY_fromdata_init(ctx) <= 0 ||
	    EVP_PKEY_fromdata(ctx, &pk, EVP_PKEY_PUBLIC_KEY, params) <= 0)
		pk = NULL;
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_free(params);
	if (pk) { /* an EC point must lie on the curve */
		EVP_PKEY_CTX *chk = EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL);
		int ok = chk && EVP_PKEY_public_check(chk) == 1;
		EVP_PKEY_CTX_free(chk);
		if (!ok) {
			EVP_PKEY_free(pk);
			pk = NULL;
		}
	}
	return pk;
}

static const char *jwk_rsa(json_t *o, struct jwt_key *e)
{
	unsigned char n[JWKS_RSA_MAX_BYTES], ex[8];
	long nl = jwk_bytes(o, "n", n, sizeof(n)), el = jwk_bytes(o, "e", ex, sizeof(ex));
	if (nl <= 0 || el <= 0)
		return "an RSA key needs base64url n and e";
	BIGNUM *bn = BN_bin2bn(n, (int)nl, NULL), *be = BN_bin2bn(ex, (int)el, NULL);
	OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
	if (bn && be && bld && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) &&
	    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be))
		e->pkey = pkey_fromdata("RSA", bld);
	OSSL_PARAM_BLD_free(bld);
	BN_free(bn);
	BN_free(be);
	if (!e->pkey)
		return "the RSA key is not valid";
	return pkey_alg(e->pkey, &e->alg);
}

static const char *jwk_ec(json_t *o, struct jwt_key *e)
{
	unsigned char pt[65] = {4};
	if (jwk_bytes(o, "x", pt + 1, 32) != 32 || jwk_bytes(o, "y", pt + 33, 32) != 32)
		return "a P-256 key needs base64url x and y of 32 bytes each";
	OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
	if (bld && OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "P-256", 0) &&
	    OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pt, sizeof(pt)))
		e->pkey = pkey_fromdata("EC", bld);
	OSSL_PARAM_BLD_free(bld);
	if (!e->pkey)
		return "the EC key is not a point of P-256";
	e->alg = CONF_JWT_ES256;
	return NULL;
}

static const char *jwk_oct(json_t *o, struct jwt_key *e)
{
	unsigned char k[JWKS_SECRET_MAX];
	long n = jwk_bytes(o, "k", k, sizeof(k));
	json_t *kv = json_object_get(o, "k");
	if (json_is_string(kv)) /* the document's copy of the secret goes too */
		OPENSSL_cleanse((char *)json_string_value(kv), json_string_length(kv));
	const char *why = NULL;
	if (n < JWKS_SECRET_MIN)
		why = "an oct key needs a base64url k of 32 to 512 bytes";
	else if (!(e->secret = malloc((size_t)n)))
		why = "out of memory";
	else {
		memcpy(e->secret, k, (size_t)n);
		e->secret_len = (size_t)n;
		e->alg = CONF_JWT_HS256;
	}
	OPENSSL_cleanse(k, sizeof(k));
	return why;
}

static const char *const alg_names[] = {
#define ALG_NAME(name) #name,
    CONF_JWT_ALGS(ALG_NAME)
#undef ALG_NAME
};

/* One member of "keys": 1 when it is a key for an algorithm we verify (filled in), 0 for
 * one to leave aside (encryption keys, other curves and types), or a message. */
static const char *jwk_read(json_t *o, struct jwt_key *e, int *use)
{
	*use = 0;
	if (!json_is_object(o))
		return "expected an object";
	const char *kty = json_string_value(json_object_get(o, "kty"));
	const char *crv = json_string_value(json_object_get(o, "crv"));
	const char *alg = json_string_value(json_object_get(o, "alg"));
	json_t *use_v = json_object_get(o, "use"), *kid = json_object_get(o, "kid");
	if (!kty)
		return "\"kty\" must be a string";
	if (use_v && !json_is_string(use_v))
		return "\"use\" must be a string";
	if (use_v && strcmp(json_string_value(use_v), "sig") != 0)
		return NULL; /* an encryption key */
	if (json_object_get(o, "d") || json_object_get(o, "p"))
		return "holds a private key: publish only the public part";
	if (strcmp(kty, "RSA") == 0) {
		if (alg && strcmp(alg, "RS256") != 0)
			return NULL; /* PS256, RS512 ...: not verified here */
	} else if (strcmp(kty, "EC") == 0) {
		if (!crv || strcmp(crv, "P-256") != 0 || (alg && strcmp(alg, "ES256") != 0))
			return NULL;
	} else if (strcmp(kty, "oct") == 0) {
		if (alg && strcmp(alg, "HS256") != 0)
			return NULL;
	} else {
		return NULL;
	}
	if (kid) {
		const char *s = json_string_value(kid);
		size_t n = json_string_length(kid);
		if (!s || !n || n > JWKS_KID_MAX)
			return "\"kid\" must be a string of 1-128 bytes";
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
				return "\"kid\" has a control character";
		memcpy(e->kid, s, n + 1);
	}
	*use = 1;
	const char *why = kty[0] == 'R'	  ? jwk_rsa(o, e)
			  : kty[0] == 'E' ? jwk_ec(o, e)
					  : jwk_oct(o, e);
	if (!why && alg && strcmp(alg, alg_names[e->alg]) != 0)
		why = "its \"alg\" does not fit its key type";
	return why;
}

int jwks_parse(const char *name, const char *text, size_t len, struct jwt_keys **out, char *err,
	       size_t errlen)
{
	json_error_t je;
	struct jwt_keys *k = keys_new();
	if (!k)
		return fail(k, -ENOMEM, err, errlen, name, 0, "out of memory");
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		snprintf(err, errlen, "%s:%d:%d: %s", name, je.line, je.column, je.text);
		jwks_free(k);
		return -EINVAL;
	}
	json_t *keys = json_object_get(root, "keys");
	const char *why = NULL;
	size_t i = 0, at = 0;
	if (!json_is_array(keys))
		why = "expected {\"keys\": [...]}";
	else if (json_array_size(keys) > JWKS_KEYS_MAX)
		why = "more than 64 keys";
	for (; !why && i < json_array_size(keys); i++) {
		int use;
		struct jwt_key *e = &k->v[k->n];
		why = jwk_read(json_array_get(keys, i), e, &use);
		at = i + 1;
		if (why || !use) {
			key_clear(e);
			continue;
		}
		for (size_t j = 0; j < k->n; j++)
			if (e->kid[0] && strcmp(k->v[j].kid, e->kid) == 0)
				why = "its \"kid\" is another key's too";
		k->n++;
	}
	json_decref(root);
	if (why)
		return fail(k, -EINVAL, err, errlen, name, why && at ? at : 0, why);
	if (!k->n)
		return fail(k, -EINVAL, err, errlen, name, 0,
			    "no RS256, ES256 (P-256) or HS256 signing key: every token would be "
			    "refused");
	*out = k;
	return 0;
}

int jwks_load(const char *path, int jwks, struct jwt_keys **out, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	int rc = secret_file_read(path, JWKS_FILE_MAX, &buf, &len, err, errlen);
	if (rc < 0)
		return rc;
	rc = jwks ? jwks_parse(path, buf, len, out, err, errlen)
		  : jwks_parse_keys_file(path, buf, len, out, err, errlen);
	secret_file_free(buf, len);
	return rc;
}
