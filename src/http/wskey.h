/*
 * wskey.h - the WebSocket opening handshake's key and its answer (RFC 6455 section 4), for the
 * proxy that stands in for an HTTP/2 client (RFC 8441: an extended CONNECT carries no key, so
 * the proxy makes one for the HTTP/1.1 backend and checks the backend's Sec-WebSocket-Accept
 * itself, since the client it answers cannot).
 */
#ifndef ACCELNET_HTTP_WSKEY_H
#define ACCELNET_HTTP_WSKEY_H

#include <stddef.h>

/* A key's length in base64 (16 random bytes), without its NUL. */
#define WSKEY_LEN 24

/* A fresh random key into out[0..WSKEY_LEN], NUL-terminated. 0, or -EIO (no randomness). */
int wskey_new(char out[WSKEY_LEN + 1]);

/* Is accept[0..alen) the Sec-WebSocket-Accept that answers key[0..klen) (the base64 of the
 * SHA-1 of the key and RFC 6455's GUID)? 1 or 0. */
int wskey_accept_ok(const char *key, size_t klen, const char *accept, size_t alen);

#endif
