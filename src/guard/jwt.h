/*
 * jwt.h - JSON Web Tokens as bearer credentials (RFC 7519, JWS compact form, RFC 7515).
 *
 * A token is HEADER.PAYLOAD.SIGNATURE, each part base64url. It is let in only when all of
 * these hold, checked in this order, and the first that fails is the answer:
 *   - it is at most JWT_TOKEN_MAX bytes, has exactly three non-empty parts, each canonical
 *     base64url, and the header and payload are JSON objects with no duplicate member;
 *   - the header's "alg" is one the route allows (never "none") and has no "crit";
 *   - a key of that very algorithm (the header's "kid" chooses it when given; otherwise
 *     every key of the algorithm is tried) verifies the signature: HMAC-SHA256 compared in
 *     constant time, RSASSA-PKCS1-v1_5 SHA-256, or ECDSA P-256 SHA-256 (its raw r||s);
 *   - "exp" is present and not past (with the route's leeway), "nbf" if present has come;
 *   - "aud" (a string or a list of them) holds the route's audience, and "iss" is its
 *     issuer, where the route names them;
 *   - the tenant claim (default "sub") is a string usable as a tenant name.
 * Only then is the payload's content believed. The JSON is parsed in a per-thread arena of
 * fixed size (a token that needs more is refused), so verifying a token allocates nothing
 * from the heap for its JSON; OpenSSL's verify calls allocate their own small contexts.
 */
#ifndef ACCELNET_GUARD_JWT_H
#define ACCELNET_GUARD_JWT_H

#include "guard/jwks.h"

#include <stddef.h>
#include <stdint.h>

#define JWT_TOKEN_MAX 8192

/* What a route asks of a token (from routes.auth.jwt). */
struct jwt_policy {
	unsigned algorithms;	  /* bit (1 << conf_jwt_alg) each allowed */
	const char *audience;	  /* NULL: not checked */
	const char *issuer;	  /* NULL: not checked */
	const char *tenant_claim; /* "sub" */
	unsigned leeway_s;
};

enum jwt_result {
	JWT_OK,
	JWT_MALFORMED,	   /* not a well-formed token */
	JWT_BAD_ALG,	   /* "none", an algorithm the route does not allow, or no key for it */
	JWT_BAD_SIGNATURE, /* no key of its algorithm (and kid) verifies it */
	JWT_EXPIRED,
	JWT_NOT_YET, /* nbf still ahead */
	JWT_BAD_AUDIENCE,
	JWT_BAD_ISSUER,
	JWT_BAD_TENANT, /* no usable tenant claim */
};

/* Set jansson's allocator up (once; jwt_verify does it too): call it before the workers
 * start, so no thread parses JSON while it changes. */
void jwt_init(void);

/*
 * Check token <tok>[0..len) against <keys> and <p> at time <now> (seconds since the epoch).
 * On JWT_OK the tenant claim is copied to <tenant> (<cap> bytes, 65 is enough).
 */
enum jwt_result jwt_verify(const struct jwt_keys *keys, const struct jwt_policy *p, const char *tok,
			   size_t len, int64_t now, char *tenant, size_t cap);

/* A short message for a client: what is wrong with its token, never what it holds. */
const char *jwt_result_text(enum jwt_result r);

#endif
