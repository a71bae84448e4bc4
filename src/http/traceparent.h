/*
 * traceparent.h - the W3C Trace Context traceparent field (https://www.w3.org/TR/trace-context/),
 * read strictly and written.
 *
 *   traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<trace-flags: 2 hex>
 *
 * Taken only as version 00, exactly 55 bytes, lower-case hex digits, neither id all zeros.
 * Everything else -- another version (ff is forbidden, a later one is not ours to guess),
 * upper case, a longer or shorter value, spaces, anything after the flags -- is refused, and
 * the caller starts a trace of its own. Pure functions over bytes, fuzzed by
 * tests/fuzz/fuzz_traceparent.c.
 */
#ifndef ACCELNET_HTTP_TRACEPARENT_H
#define ACCELNET_HTTP_TRACEPARENT_H

#include <stddef.h>
#include <stdint.h>

#define TRACEPARENT_LEN 55
#define TRACE_ID_HEX 32
#define SPAN_ID_HEX 16

/* Trace flags the proxy passes on: sampled (Level 1) and random-trace-id (Level 2); the
 * other bits are zeroed. */
#define TRACE_FLAG_SAMPLED 0x01u
#define TRACE_FLAGS_KEPT 0x03u

struct traceparent {
	char trace_id[TRACE_ID_HEX]; /* lower-case hex, not NUL-terminated */
	char parent_id[SPAN_ID_HEX]; /* ... */
	uint8_t flags;
};

/* Read p[0..len) as a traceparent value. 0, or -EINVAL with <out> untouched. */
int traceparent_parse(const char *p, size_t len, struct traceparent *out);

/* Write <t> as a traceparent value into out[0..TRACEPARENT_LEN], NUL-terminated. */
void traceparent_format(const struct traceparent *t, char out[TRACEPARENT_LEN + 1]);

/* The low 4 * <digits> bits of <v> as <digits> lower-case hex digits (no NUL). */
void trace_hex(uint64_t v, char *out, unsigned digits);

#endif
