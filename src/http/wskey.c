/*
 * wskey.c - the WebSocket handshake's key and its expected answer (see wskey.h), from
 * OpenSSL's randomness, SHA-1 and base64.
 */
#include "http/wskey.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <string.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

int wskey_new(char out[WSKEY_LEN + 1])
{
	unsigned char raw[16];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return -EIO;
	EVP_EncodeBlock((unsigned char *)out, raw, sizeof(raw)); /* 24 chars and a NUL */
	return 0;
}

int wskey_accept_ok(const char *key, size_t klen, const char *accept, size_t alen)
{
	unsigned char in[WSKEY_LEN + sizeof(WS_GUID)], md[SHA_DIGEST_LENGTH], want[32];
	if (klen != WSKEY_LEN || alen != 28)
		return 0;
	memcpy(in, key, klen);
	memcpy(in + klen, WS_GUID, sizeof(WS_GUID) - 1);
	SHA1(in, klen + sizeof(WS_GUID) - 1, md);
	EVP_EncodeBlock(want, md, sizeof(md)); /* 28 chars */
	return memcmp(want, accept, 28) == 0;
}
