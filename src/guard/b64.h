/*
 * b64.h - strict base64 decoding for credentials: the base64url of JWTs (RFC 7515: no
 * padding) and the padded base64 of HTTP Basic (RFC 7617). Only the canonical encoding of a
 * byte string is accepted: no whitespace, no characters of the other alphabet, no padding
 * where none belongs, and no set bits left over in the last character, so each byte string
 * has exactly one accepted spelling.
 */
#ifndef ACCELNET_GUARD_B64_H
#define ACCELNET_GUARD_B64_H

#include <stddef.h>

enum b64_alphabet {
	B64_URL, /* A-Z a-z 0-9 - _, no '=' */
	B64_STD, /* A-Z a-z 0-9 + /, padded with '=' to a multiple of 4 */
};

/* Bytes decoded from <in>[0..len) into <out>[0..cap); -1 if it is not canonical or does
 * not fit. */
long b64_decode(enum b64_alphabet a, const char *in, size_t len, unsigned char *out, size_t cap);

#endif
