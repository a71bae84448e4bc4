/*
 * fuzz_jwks.c - libFuzzer target: the JWT key files on any bytes: a JWKS document, or (when
 * the first byte is odd) a keys_file of PEM public keys or an HS256 secret. It must never
 * crash or leak; a set it accepts has 1-64 keys, each of an algorithm accelnet verifies, and
 * a message is always terminated.
 */
#include "guard/jwks.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jwt_keys *k = NULL;
	char err[256];
	if (!size)
		return 0;
	const char *text = (const char *)data + 1;
	int rc = data[0] & 1 ? jwks_parse_keys_file("fuzz", text, size - 1, &k, err, sizeof(err))
			     : jwks_parse("fuzz", text, size - 1, &k, err, sizeof(err));
	if (rc < 0) {
		if (k || !memchr(err, '\0', sizeof(err)))
			abort();
		return 0;
	}
	size_t n = jwks_count(k);
	if (!n || n > JWKS_KEYS_MAX || !jwks_algorithms(k) || jwks_algorithms(k) > 7)
		abort();
	for (size_t i = 0; i < n; i++) {
		const struct jwt_key *e = jwks_key(k, i);
		if ((e->alg == CONF_JWT_HS256) != (e->secret != NULL) ||
		    (e->alg != CONF_JWT_HS256) != (e->pkey != NULL))
			abort();
	}
	jwks_free(k);
	return 0;
}
