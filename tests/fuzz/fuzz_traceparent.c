/*
 * fuzz_traceparent.c - libFuzzer target: the traceparent reader on any bytes. What it takes
 * must be what it promises (version 00, lower-case hex, ids not all zeros) and must read back
 * the same once written.
 */
#include "http/traceparent.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int all_lower_hex(const char *p, size_t n, int *nonzero)
{
	*nonzero = 0;
	for (size_t i = 0; i < n; i++) {
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return 0;
		*nonzero |= p[i] != '0';
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	struct traceparent t, again;
	if (traceparent_parse(p, size, &t) < 0)
		return 0;
	int nz;
	if (size != TRACEPARENT_LEN || memcmp(p, "00-", 3) != 0)
		abort();
	if (!all_lower_hex(t.trace_id, TRACE_ID_HEX, &nz) || !nz)
		abort();
	if (!all_lower_hex(t.parent_id, SPAN_ID_HEX, &nz) || !nz)
		abort();
	char out[TRACEPARENT_LEN + 1];
	traceparent_format(&t, out);
	if (memcmp(out, p, TRACEPARENT_LEN) != 0 || out[TRACEPARENT_LEN] != 0)
		abort();
	if (traceparent_parse(out, TRACEPARENT_LEN, &again) < 0 || memcmp(&again, &t, sizeof(t)))
		abort();
	return 0;
}
