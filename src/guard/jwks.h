/*
 * jwks.h - the keys JWT signatures are checked against (routes.auth.jwt).
 *
 * A key set comes from one of two files:
 *   - keys_file: PEM public keys ("-----BEGIN PUBLIC KEY-----" blocks: RSA of 2048 bits or
 *     more for RS256, EC P-256 for ES256), or, when the file holds no PEM block, its bytes
 *     (less a trailing newline) as the HS256 shared secret, at least 32 bytes;
 *   - jwks_file: a JWKS document (RFC 7517) {"keys": [...]} of RSA (n, e), EC P-256 (x, y)
 *     and oct (k: an HS256 secret) keys, each with an optional "kid" that tokens name.
 * Each key serves exactly one algorithm, fixed by its type when it is loaded: a token is
 * only ever checked with a key of the algorithm it names, so an RSA public key can never be
 * taken for an HMAC secret (algorithm confusion). A key's "alg" member, if given, must agree;
 * a key with "use" other than "sig" is refused, as is anything unknown or duplicated.
 *
 * Secrets are wiped (OPENSSL_cleanse) when the set is freed. A set is built once and then
 * only read, by any number of threads.
 */
#ifndef ACCELNET_GUARD_JWKS_H
#define ACCELNET_GUARD_JWKS_H

#include "conf/model.h"

#include <stddef.h>

#define JWKS_KID_MAX 128 /* bytes of a key id */
#define JWKS_KEYS_MAX 64 /* keys in one set */
#define JWKS_SECRET_MAX 512

struct evp_pkey_st;

struct jwt_key {
	enum conf_jwt_alg alg;
	char kid[JWKS_KID_MAX + 1]; /* "" when none */
	struct evp_pkey_st *pkey;   /* RS256, ES256 */
	unsigned char *secret;	    /* HS256 */
	size_t secret_len;
};

struct jwt_keys;

/* A keys_file's text (<name> for messages): PEM public keys or a secret. */
int jwks_parse_keys_file(const char *name, const char *text, size_t len, struct jwt_keys **out,
			 char *err, size_t errlen);
/* A JWKS document's text. */
int jwks_parse(const char *name, const char *text, size_t len, struct jwt_keys **out, char *err,
	       size_t errlen);
/* Read <path> (a JWKS document when <jwks>, else a keys_file) and parse it. 0 with *out, or
 * -errno with "PATH: what is wrong" in <err> (never a secret's bytes). */
int jwks_load(const char *path, int jwks, struct jwt_keys **out, char *err, size_t errlen);
void jwks_free(struct jwt_keys *k);

size_t jwks_count(const struct jwt_keys *k);
const struct jwt_key *jwks_key(const struct jwt_keys *k, size_t i);
/* The algorithms the set has a key for: bit (1 << conf_jwt_alg) each. */
unsigned jwks_algorithms(const struct jwt_keys *k);

#endif
