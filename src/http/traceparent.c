/*
 * traceparent.c - reading and writing the traceparent field (see traceparent.h).
 */
#include "http/traceparent.h"

#include <errno.h>
#include <string.h>

static const char hex_digits[] = "0123456789abcdef";

/* The two digits of every byte: a byte at a time, as a digit at a time cost a request some
 * hundreds of instructions (80 digits: the request id, the trace and span ids) */
static const char hex_pairs[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void trace_hex(uint64_t v, char *out, unsigned digits)
{
	if (digits == 16) { /* the ids (request, trace, span): a loop unrolled, half the cost */
#pragma GCC unroll 8
		for (int k = 14; k >= 0; k -= 2, v >>= 8)
			memcpy(out + k, hex_pairs + 2 * (v & 0xff), 2);
		return;
	}
	unsigned i = digits;
	for (; i >= 2; i -= 2, v >>= 8)
		memcpy(out + i - 2, hex_pairs + 2 * (v & 0xff), 2);
	if (i)
		out[0] = hex_digits[v & 15];
}

/* p[0..n) is lower-case hex, and not all of it '0'. Sets *value to the last two digits. */
static int lower_hex(const char *p, size_t n, int *nonzero, unsigned *value)
{
	unsigned v = 0;
	*nonzero = 0;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else
			return 0;
		*nonzero |= d != 0;
		v = (v << 4 | d) & 0xff;
	}
	*value = v;
	return 1;
}

int traceparent_parse(const char *p, size_t len, struct traceparent *out)
{
	int nz;
	unsigned v;
	if (len != TRACEPARENT_LEN || p[2] != '-' || p[35] != '-' || p[52] != '-')
		return -EINVAL;
	if (!lower_hex(p, 2, &nz, &v) || v != 0) /* version 00 only */
		return -EINVAL;
	if (!lower_hex(p + 3, TRACE_ID_HEX, &nz, &v) || !nz)
		return -EINVAL;
	if (!lower_hex(p + 36, SPAN_ID_HEX, &nz, &v) || !nz)
		return -EINVAL;
	if (!lower_hex(p + 53, 2, &nz, &v))
		return -EINVAL;
	memcpy(out->trace_id, p + 3, TRACE_ID_HEX);
	memcpy(out->parent_id, p + 36, SPAN_ID_HEX);
	out->flags = (uint8_t)v;
	return 0;
}

void traceparent_format(const struct traceparent *t, char out[TRACEPARENT_LEN + 1])
{
	memcpy(out, "00-", 3);
	memcpy(out + 3, t->trace_id, TRACE_ID_HEX);
	out[35] = '-';
	memcpy(out + 36, t->parent_id, SPAN_ID_HEX);
	out[52] = '-';
	trace_hex(t->flags, out + 53, 2);
	out[TRACEPARENT_LEN] = '\0';
}
