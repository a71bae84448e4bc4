/*
 * traceparent.c - reading and writing the traceparent field (see traceparent.h).
 */
#include "http/traceparent.h"

#include <errno.h>
#include <string.h>

static const char hex_digits[] = "0123456789abcdef";

void trace_hex(uint64_t v, char *out, unsigned digits)
{
	for (unsigned i = 0; i < digits; i++)
		out[i] = hex_digits[(v >> (4 * (digits - 1 - i))) & 15];
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
