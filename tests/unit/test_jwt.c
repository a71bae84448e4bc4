/*
 * test_jwt.c - JWT verification against keys made here with OpenSSL: HS256, RS256 and ES256
 * tokens that pass; expired, early, wrong audience or issuer; alg none and algorithm
 * confusion (an HS256 token "signed" with the RSA public key); bad signatures; keys chosen
 * by kid from a JWKS document; every truncation of a good token; odd JSON; key files
 * refused with their reason; and a public key in a keys_file never taken as an HS256 secret.
 */
#include "guard/jwks.h"
#include "guard/jwt.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#define NOW 1800000000LL
#define SECRET "an HS256 secret of at least 32 bytes, for the tests"

static EVP_PKEY *rsa_a, *rsa_b, *ec;

static int setup(void **state)
{
	(void)state;
	rsa_a = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
	rsa_b = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
	ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	return rsa_a && rsa_b && ec ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	EVP_PKEY_free(rsa_a);
	EVP_PKEY_free(rsa_b);
	EVP_PKEY_free(ec);
	return 0;
}

static void b64url(const unsigned char *p, size_t n, char *out)
{
	int len = EVP_EncodeBlock((unsigned char *)out, p, (int)n);
	for (int i = 0; i < len; i++)
		out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
	while (len && out[len - 1] == '=')
		len--;
	out[len] = '\0';
}

/* HEADER.PAYLOAD.SIG into <out>: signed with <pk> (RS256/ES256 by its type), or <secret>
 * (HS256) when <pk> is NULL. */
static void sign(const char *header, const char *payload, EVP_PKEY *pk, const char *secret,
		 size_t slen, char *out)
{
	char h[1024], p[4096];
	b64url((const unsigned char *)header, strlen(header), h);
	b64url((const unsigned char *)payload, strlen(payload), p);
	size_t n = (size_t)sprintf(out, "%s.%s", h, p);
	unsigned char sig[600];
	size_t siglen = sizeof(sig);
	if (!pk) {
		unsigned int l = 0;
		HMAC(EVP_sha256(), secret, (int)slen, (unsigned char *)out, n, sig, &l);
		siglen = l;
	} else {
		EVP_MD_CTX *md = EVP_MD_CTX_new();
		assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, pk), 1);
		assert_int_equal(EVP_DigestSign(md, sig, &siglen, (unsigned char *)out, n), 1);
		EVP_MD_CTX_free(md);
		if (EVP_PKEY_get_base_id(pk) == EVP_PKEY_EC) { /* DER to raw r||s */
			const unsigned char *d = sig;
			ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &d, (long)siglen);
			BN_bn2binpad(ECDSA_SIG_get0_r(es), sig, 32);
			BN_bn2binpad(ECDSA_SIG_get0_s(es), sig + 32, 32);
			ECDSA_SIG_free(es);
			siglen = 64;
		}
	}
	out[n++] = '.';
	b64url(sig, siglen, out + n);
}

static struct jwt_keys *keys_file(const char *text)
{
	struct jwt_keys *k = NULL;
	char err[256];
	if (jwks_parse_keys_file("keys", text, strlen(text), &k, err, sizeof(err)))
		fail_msg("%s", err);
	return k;
}

static void pem_of(EVP_PKEY *pk, char *out, size_t cap)
{
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_PUBKEY(b, pk);
	int n = BIO_read(b, out, (int)cap - 1);
	out[n > 0 ? n : 0] = '\0';
	BIO_free(b);
}

static const struct jwt_policy any = {.algorithms = 7, .tenant_claim = "sub", .leeway_s = 30};

static enum jwt_result check(struct jwt_keys *k, const struct jwt_policy *p, const char *tok,
			     char *tenant)
{
	char t[65];
	return jwt_verify(k, p, tok, strlen(tok), NOW, tenant ? tenant : t, 65);
}

static void hs256_rs256_es256_pass(void **state)
{
	(void)state;
	char tok[8192], pem[4096], tenant[65];
	const char *claims = "{\"sub\":\"acme\",\"exp\":1800000100}";
	struct jwt_keys *k = keys_file(SECRET "\n");
	sign("{\"alg\":\"HS256\",\"typ\":\"JWT\"}", claims, NULL, SECRET, strlen(SECRET), tok);
	assert_int_equal(check(k, &any, tok, tenant), JWT_OK);
	assert_string_equal(tenant, "acme");
	jwks_free(k);

	pem_of(rsa_a, pem, sizeof(pem));
	k = keys_file(pem);
	sign("{\"alg\":\"RS256\"}", claims, rsa_a, NULL, 0, tok);
	assert_int_equal(check(k, &any, tok, tenant), JWT_OK);
	sign("{\"alg\":\"RS256\"}", claims, rsa_b, NULL, 0, tok); /* another key */
	assert_int_equal(check(k, &any, tok, NULL), JWT_BAD_SIGNATURE);
	jwks_free(k);

	pem_of(ec, pem, sizeof(pem));
	k = keys_file(pem);
	sign("{\"alg\":\"ES256\"}", claims, ec, NULL, 0, tok);
	assert_int_equal(check(k, &any, tok, tenant), JWT_OK);
	assert_string_equal(tenant, "acme");
	jwks_free(k);
}

static void times_audience_issuer(void **state)
{
	(void)state;
	char tok[8192];
	struct jwt_keys *k = keys_file(SECRET);
	const char *hs = "{\"alg\":\"HS256\"}";
	struct {
		const char *claims;
		enum jwt_result want;
	} cases[] = {
	    {"{\"sub\":\"a\",\"exp\":1799999900}", JWT_EXPIRED},
	    {"{\"sub\":\"a\",\"exp\":1799999990}", JWT_OK}, /* within the leeway */
	    {"{\"sub\":\"a\"}", JWT_EXPIRED},		    /* no exp at all */
	    {"{\"sub\":\"a\",\"exp\":\"1900000000\"}", JWT_MALFORMED},
	    {"{\"sub\":\"a\",\"exp\":1900000000,\"nbf\":1800000100}", JWT_NOT_YET},
	    {"{\"sub\":\"a\",\"exp\":1900000000,\"nbf\":1800000010}", JWT_OK},
	    {"{\"sub\":\"a\",\"exp\":1900000000,\"aud\":\"other\",\"iss\":\"me\"}",
	     JWT_BAD_AUDIENCE},
	    {"{\"sub\":\"a\",\"exp\":1900000000,\"aud\":[\"x\",\"api\"],\"iss\":\"me\"}", JWT_OK},
	    {"{\"sub\":\"a\",\"exp\":1900000000,\"aud\":\"api\",\"iss\":\"you\"}", JWT_BAD_ISSUER},
	    {"{\"sub\":\"a\",\"exp\":1900000000,\"aud\":\"api\"}", JWT_BAD_ISSUER},
	    {"{\"sub\":\"a b\",\"exp\":1900000000,\"aud\":\"api\",\"iss\":\"me\"}", JWT_BAD_TENANT},
	    {"{\"sub\":7,\"exp\":1900000000,\"aud\":\"api\",\"iss\":\"me\"}", JWT_BAD_TENANT},
	    {"{\"sub\":\"a\",\"sub\":\"b\",\"exp\":1900000000}", JWT_MALFORMED}, /* duplicate */
	    {"[1]", JWT_MALFORMED},
	    {"{\"sub\":\"a\",\"exp\":1900000000} x", JWT_MALFORMED},
	};
	struct jwt_policy p = any;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sign(hs, cases[i].claims, NULL, SECRET, strlen(SECRET), tok);
		p.audience = i >= 6 ? "api" : NULL;
		p.issuer = i >= 6 ? "me" : NULL;
		if (check(k, &p, tok, NULL) != cases[i].want)
			fail_msg("case %zu (%s): got %d", i, cases[i].claims,
				 check(k, &p, tok, NULL));
	}
	/* another claim names the tenant */
	p = any;
	p.tenant_claim = "org";
	char tenant[65];
	sign(hs, "{\"sub\":\"a\",\"org\":\"acme\",\"exp\":1900000000}", NULL, SECRET,
	     strlen(SECRET), tok);
	assert_int_equal(check(k, &p, tok, tenant), JWT_OK);
	assert_string_equal(tenant, "acme");
	jwks_free(k);
}

static void none_and_confusion_refused(void **state)
{
	(void)state;
	char tok[8192], pem[4096], h[64], pl[128];
	const char *claims = "{\"sub\":\"acme\",\"exp\":1900000000}";
	pem_of(rsa_a, pem, sizeof(pem));
	struct jwt_keys *k = keys_file(pem);
	/* alg none, with and without a signature part */
	b64url((const unsigned char *)"{\"alg\":\"none\"}", 14, h);
	b64url((const unsigned char *)claims, strlen(claims), pl);
	sprintf(tok, "%s.%s.", h, pl);
	assert_int_not_equal(check(k, &any, tok, NULL), JWT_OK);
	sprintf(tok, "%s.%s.AAAA", h, pl);
	assert_int_equal(check(k, &any, tok, NULL), JWT_BAD_ALG);
	/* HS256 with the RSA public key's PEM as the HMAC secret: there is no HS256 key */
	sign("{\"alg\":\"HS256\"}", claims, NULL, pem, strlen(pem), tok);
	assert_int_equal(check(k, &any, tok, NULL), JWT_BAD_ALG);
	/* an RS256 token where the route allows ES256 only */
	struct jwt_policy es_only = any;
	es_only.algorithms = 1u << CONF_JWT_ES256;
	sign("{\"alg\":\"RS256\"}", claims, rsa_a, NULL, 0, tok);
	assert_int_equal(check(k, &any, tok, NULL), JWT_OK);
	assert_int_equal(check(k, &es_only, tok, NULL), JWT_BAD_ALG);
	/* crit, and a kid that is not a string */
	sign("{\"alg\":\"RS256\",\"crit\":[\"x\"]}", claims, rsa_a, NULL, 0, tok);
	assert_int_equal(check(k, &any, tok, NULL), JWT_MALFORMED);
	sign("{\"alg\":\"RS256\",\"kid\":1}", claims, rsa_a, NULL, 0, tok);
	assert_int_equal(check(k, &any, tok, NULL), JWT_MALFORMED);
	/* a flipped signature byte, and a flipped payload byte */
	sign("{\"alg\":\"RS256\"}", claims, rsa_a, NULL, 0, tok);
	size_t n = strlen(tok);
	tok[n - 5] = tok[n - 5] == 'A' ? 'B' : 'A';
	assert_int_equal(check(k, &any, tok, NULL), JWT_BAD_SIGNATURE);
	sign("{\"alg\":\"RS256\"}", claims, rsa_a, NULL, 0, tok);
	char *dot = strchr(tok, '.');
	dot[3] = dot[3] == 'A' ? 'B' : 'A';
	assert_int_equal(check(k, &any, tok, NULL), JWT_BAD_SIGNATURE);
	jwks_free(k);
}

static void truncations_and_odd_forms(void **state)
{
	(void)state;
	char tok[8192], cut[JWT_TOKEN_MAX + 16];
	struct jwt_keys *k = keys_file(SECRET);
	sign("{\"alg\":\"HS256\"}", "{\"sub\":\"acme\",\"exp\":1900000000}", NULL, SECRET,
	     strlen(SECRET), tok);
	size_t n = strlen(tok);
	assert_int_equal(check(k, &any, tok, NULL), JWT_OK);
	for (size_t i = 0; i < n; i++) {
		memcpy(cut, tok, i);
		cut[i] = '\0';
		assert_int_not_equal(jwt_verify(k, &any, cut, i, NOW, cut + 4096, 65), JWT_OK);
	}
	/* a fourth part, padding, a non-canonical last character, an oversized token */
	snprintf(cut, sizeof(cut), "%s.x", tok);
	assert_int_equal(check(k, &any, cut, NULL), JWT_MALFORMED);
	snprintf(cut, sizeof(cut), "%s=", tok);
	assert_int_equal(check(k, &any, cut, NULL), JWT_MALFORMED);
	memcpy(cut, tok, n + 1);
	cut[n - 1] = cut[n - 1] == '_' ? '-' : (char)(cut[n - 1] + 1); /* other low bits */
	assert_int_not_equal(check(k, &any, cut, NULL), JWT_OK);
	memset(cut, 'A', JWT_TOKEN_MAX + 10);
	cut[100] = cut[200] = '.';
	assert_int_equal(jwt_verify(k, &any, cut, JWT_TOKEN_MAX + 10, NOW, tok, 65), JWT_MALFORMED);
	jwks_free(k);
}

static void bn_b64(EVP_PKEY *pk, const char *param, char *out, size_t pad)
{
	BIGNUM *bn = NULL;
	unsigned char raw[512];
	assert_int_equal(EVP_PKEY_get_bn_param(pk, param, &bn), 1);
	int n = pad ? BN_bn2binpad(bn, raw, (int)pad) : BN_bn2bin(bn, raw);
	b64url(raw, (size_t)n, out);
	BN_free(bn);
}

static char *jwks_of(char *out, const char *extra)
{
	char an[400], ae[16], bn[400], be[16], x[64], y[64];
	bn_b64(rsa_a, OSSL_PKEY_PARAM_RSA_N, an, 0);
	bn_b64(rsa_a, OSSL_PKEY_PARAM_RSA_E, ae, 0);
	bn_b64(rsa_b, OSSL_PKEY_PARAM_RSA_N, bn, 0);
	bn_b64(rsa_b, OSSL_PKEY_PARAM_RSA_E, be, 0);
	bn_b64(ec, OSSL_PKEY_PARAM_EC_PUB_X, x, 32);
	bn_b64(ec, OSSL_PKEY_PARAM_EC_PUB_Y, y, 32);
	sprintf(
	    out,
	    "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"a\",\"use\":\"sig\",\"n\":\"%s\",\"e\":\"%s\"},"
	    "{\"kty\":\"RSA\",\"kid\":\"b\",\"alg\":\"RS256\",\"n\":\"%s\",\"e\":\"%s\"},"
	    "{\"kty\":\"EC\",\"kid\":\"c\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"},"
	    "{\"kty\":\"RSA\",\"kid\":\"enc\",\"use\":\"enc\",\"n\":\"%s\",\"e\":\"%s\"}%s]}",
	    an, ae, bn, be, x, y, an, ae, extra);
	return out;
}

static void jwks_kid_selection(void **state)
{
	(void)state;
	char doc[8192], tok[8192], tenant[65], err[256];
	const char *claims = "{\"sub\":\"acme\",\"exp\":1900000000}";
	struct jwt_keys *k = NULL;
	jwks_of(doc, "");
	if (jwks_parse("jwks", doc, strlen(doc), &k, err, sizeof(err)))
		fail_msg("%s", err);
	assert_int_equal(jwks_count(k), 3); /* the encryption key is left aside */
	assert_int_equal(jwks_algorithms(k), (1u << CONF_JWT_RS256) | (1u << CONF_JWT_ES256));
	sign("{\"alg\":\"RS256\",\"kid\":\"b\"}", claims, rsa_b, NULL, 0, tok);
	assert_int_equal(check(k, &any, tok, tenant), JWT_OK);
	sign("{\"alg\":\"RS256\",\"kid\":\"a\"}", claims, rsa_b, NULL, 0, tok); /* wrong kid */
	assert_int_equal(check(k, &any, tok, NULL), JWT_BAD_SIGNATURE);
	sign("{\"alg\":\"RS256\",\"kid\":\"zz\"}", claims, rsa_b, NULL, 0, tok);
	assert_int_equal(check(k, &any, tok, NULL), JWT_BAD_ALG);
	sign("{\"alg\":\"RS256\"}", claims, rsa_b, NULL, 0, tok); /* no kid: each RS256 key */
	assert_int_equal(check(k, &any, tok, NULL), JWT_OK);
	sign("{\"alg\":\"ES256\",\"kid\":\"c\"}", claims, ec, NULL, 0, tok);
	assert_int_equal(check(k, &any, tok, NULL), JWT_OK);
	sign("{\"alg\":\"ES256\",\"kid\":\"a\"}", claims, ec, NULL, 0, tok); /* kid of an RSA key */
	assert_int_equal(check(k, &any, tok, NULL), JWT_BAD_ALG);
	jwks_free(k);
}

static void refused_key(int jwks, const char *text, const char *want)
{
	struct jwt_keys *k = NULL;
	char err[300];
	int rc = jwks ? jwks_parse("f", text, strlen(text), &k, err, sizeof(err))
		      : jwks_parse_keys_file("f", text, strlen(text), &k, err, sizeof(err));
	assert_true(rc < 0);
	assert_null(k);
	if (!strstr(err, want))
		fail_msg("got '%s', expected '%s'", err, want);
}

static void bad_key_files_refused(void **state)
{
	(void)state;
	char doc[8192];
	refused_key(0, "short secret\n", "32 to 512 bytes");
	refused_key(0, "-----BEGIN PRIVATE KEY-----\nMC4=\n-----END PRIVATE KEY-----\n",
		    "private key");
	refused_key(0, "-----BEGIN PUBLIC KEY-----\nnonsense\n-----END PUBLIC KEY-----\n",
		    "key 1: not a PEM public key");
	refused_key(1, "{\"keys\":[]}", "no RS256");
	refused_key(1, "{\"keys\":{}}", "expected {\"keys\"");
	refused_key(1, "{\"keys\":[],\"keys\":[]}", "f:1:");
	refused_key(1,
		    jwks_of(doc, ",{\"kty\":\"RSA\",\"kid\":\"a\",\"n\":\"AQAB\",\"e\":\"AQAB\"}"),
		    "key 5:");
	refused_key(1, jwks_of(doc, ",{\"kty\":\"oct\",\"k\":\"c2hvcnQ\"}"), "key 5: an oct key");
	refused_key(1,
		    "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":"
		    "\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\",\"y\":"
		    "\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE\"}]}",
		    "not a point of P-256");
	refused_key(1, "{\"keys\":[{\"kty\":\"oct\",\"alg\":\"HS256\",\"d\":\"x\",\"k\":\"x\"}]}",
		    "private key");
	/* an RSA key of 1024 bits */
	EVP_PKEY *small = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)1024);
	char pem[2048];
	pem_of(small, pem, sizeof(pem));
	refused_key(0, pem, "shorter than 2048 bits");
	EVP_PKEY_free(small);
	/* a modulus of 4112 bits (2^4111 + 3, no small factor): its signatures would not fit
	 * the verifier's buffer */
	char big[1024] = "{\"keys\":[{\"kty\":\"RSA\",\"e\":\"AQAB\",\"n\":\"g";
	size_t at = strlen(big);
	memset(big + at, 'A', 684);
	snprintf(big + at + 684, sizeof(big) - at - 684, "w\"}]}");
	refused_key(1, big, "longer than 4096 bits");
}

/* A keys_file holding a public key in a spelling other than PEM would be an HS256 secret
 * the whole world knows: refused, each with what to do. */
static void public_keys_are_never_hs256_secrets(void **state)
{
	(void)state;
	char doc[8192], pem[2048], body[2048];
	refused_key(0, jwks_of(doc, ""), "give a JWKS document as jwks_file");
	refused_key(0, "  {\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"AAAAAAAAAAAAAAAAAAAAAAAAAA\"}",
		    "JSON document");
	refused_key(0,
		    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMhXKvmSm3c5dNj/MuIJ1xTaSRm6ceJV op@host",
		    "OpenSSH public key");
	for (int i = 0; i < 2; i++) { /* the body of the PEM block, with and without its lines */
		pem_of(ec, pem, sizeof(pem));
		size_t n = 0;
		for (const char *c = strchr(pem, '\n') + 1; *c != '-'; c++)
			if (i || *c != '\n')
				body[n++] = *c;
		body[n] = '\0';
		refused_key(0, body, "holds a public key (DER or base64)");
	}
	pem_of(rsa_a, pem, sizeof(pem));
	*strstr(pem, "-----END") = '\0';
	refused_key(0, strchr(pem, '\n') + 1, "holds a public key (DER or base64)");
	unsigned char *der = NULL;
	int dl = i2d_PUBKEY(ec, &der);
	assert_true(dl > 0);
	struct jwt_keys *k = NULL;
	char err[300];
	assert_true(jwks_parse_keys_file("f", (char *)der, (size_t)dl, &k, err, sizeof(err)) < 0);
	assert_null(k);
	assert_non_null(strstr(err, "holds a public key"));
	OPENSSL_free(der);
	/* a DER key whose last byte is a line end (about 1 key in 128): trimming the line end
	 * first left a DER that no longer parsed, and the key was taken as a secret */
	for (int tries = 0; tries < 100000; tries++) {
		EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
		der = NULL;
		dl = i2d_PUBKEY(key, &der);
		EVP_PKEY_free(key);
		assert_true(dl > 0);
		if (der[dl - 1] == '\n') {
			assert_true(jwks_parse_keys_file("f", (char *)der, (size_t)dl, &k, err,
							 sizeof(err)) < 0);
			assert_non_null(strstr(err, "holds a public key"));
			OPENSSL_free(der);
			break;
		}
		OPENSSL_free(der);
		assert_true(tries < 99999);
	}
	jwks_free(keys_file(SECRET "\n")); /* a secret is still one */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(hs256_rs256_es256_pass),
	    cmocka_unit_test(times_audience_issuer),
	    cmocka_unit_test(none_and_confusion_refused),
	    cmocka_unit_test(truncations_and_odd_forms),
	    cmocka_unit_test(jwks_kid_selection),
	    cmocka_unit_test(bad_key_files_refused),
	    cmocka_unit_test(public_keys_are_never_hs256_secrets),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
