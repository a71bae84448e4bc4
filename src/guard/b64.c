/*
 * b64.c - strict base64 and base64url decoding (see b64.h).
 */
#include "guard/b64.h"
#include "core/b64digit.h"

static int b64_value(enum b64_alphabet a, unsigned char c)
{
	return a == B64_URL ? b64_digit(c, '-', '_') : b64_digit(c, '+', '/');
}

long b64_decode(enum b64_alphabet a, const char *in, size_t len, unsigned char *out, size_t cap)
{
	if (a == B64_STD) {
		if (len % 4)
			return -1;
		for (int i = 0; i < 2 && len && in[len - 1] == '='; i++)
			len--;
	}
	if (len % 4 == 1)
		return -1;
	size_t n = len / 4 * 3 + (len % 4 ? len % 4 - 1 : 0), o = 0;
	if (n > cap)
		return -1;
	unsigned acc = 0, bits = 0;
	for (size_t i = 0; i < len; i++) {
		int v = b64_value(a, (unsigned char)in[i]);
		if (v < 0)
			return -1;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	if (acc) /* bits left over that no byte holds: not the canonical spelling */
		return -1;
	return (long)o;
}
