/*
 * dec.h - unsigned numbers written in decimal, for heads built on the hot path (a cache
 * hit's Content-Length and Age), where snprintf's format parsing costs more than the rest
 * of the line.
 */
#ifndef ACCELNET_CORE_DEC_H
#define ACCELNET_CORE_DEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define DEC_U64_MAX 20 /* digits of UINT64_MAX */

/* Write <v> in decimal at out[0..DEC_U64_MAX) (no NUL); returns how many digits. */
static inline size_t dec_u64(char *out, uint64_t v)
{
	char tmp[DEC_U64_MAX];
	size_t n = sizeof(tmp);
	do
		tmp[--n] = (char)('0' + v % 10);
	while ((v /= 10));
	memcpy(out, tmp + n, sizeof(tmp) - n);
	return sizeof(tmp) - n;
}

#endif
