/*
 * fuzz_jwt.c - libFuzzer target: a token of any bytes verified against a fixed key set (an
 * HS256 secret, an RSA and an EC P-256 key from a JWKS document, made once). It must never
 * crash, leak or pass: the secret is one no
 * input is likely to hold, and the public keys' private halves were never kept. The input's first
 * byte picks the policy's audience and issuer checks.
 */
#include "guard/jwks.h"
#include "guard/jwt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* keys made for this target (the private halves were thrown away) */
static const char jwks_doc[] =
    "{\"keys\":["
    "{\"kty\":\"oct\",\"kid\":\"h\",\"k\":"
    "\"ZnV6ei1zZWNyZXQtZnV6ei1zZWNyZXQtZnV6ei1zZWNyZXQ\"},"
    "{\"kty\":\"EC\",\"kid\":\"e\",\"crv\":\"P-256\","
    "\"x\":\"Rlgk4_dTv_fXO2c6piv6p7l-6TgDUpxBSds7UcFwsBY\","
    "\"y\":\"FQ4HPBk9CTSEuVMMGU-BaOamjAN1CfkbBT2ECETmRKk\"},"
    "{\"kty\":\"RSA\",\"kid\":\"r\",\"e\":\"AQAB\",\"n\":\""
    "kKRHtNA7MsLv6_vLj8yT0MqMQeFTHfHZSCpU-bkDY9KRdftvE5AwBBKpbvy3CZFc4GqO2x0-_QJdum_Y"
    "7ZvmuCM4PC8SZQQqSNQHTJSBGMdSTrX42GHFS5aW4_PRqwjXHxBdfHEtrcKdeb_HlCjlebQfkurWUizB"
    "JG21meQPAkFz2pBTACx_sXCiSYJ2c4GJuAsITn-CsahKg5wuwfTyobqOHmuVBr53jm4G4MWXB2VYKuFo"
    "18D8dxoC61RB5moOSN7EhuOOIIvcY88zOgN8Pfm2QUVvuKTX5zm9fdOYDTEY792baAigtJQrnD1_fDGI"
    "4XX9rMcMCW_TIx7DHUrnRw"
    "\"}]}";

static struct jwt_keys *keys;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!keys) {
		char err[256];
		if (jwks_parse("fuzz", jwks_doc, strlen(jwks_doc), &keys, err, sizeof(err)))
			abort();
	}
	if (!size)
		return 0;
	struct jwt_policy p = {
	    .algorithms = data[0] & 7,
	    .audience = data[0] & 8 ? "aud" : NULL,
	    .issuer = data[0] & 16 ? "iss" : NULL,
	    .tenant_claim = data[0] & 32 ? "tenant" : "sub",
	    .leeway_s = 30,
	};
	char tenant[65];
	if (jwt_verify(keys, &p, (const char *)data + 1, size - 1, 1800000000, tenant,
		       sizeof(tenant)) == JWT_OK)
		abort(); /* a forged token passed */
	return 0;
}
