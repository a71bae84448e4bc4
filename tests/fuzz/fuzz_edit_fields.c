/*
 * fuzz_edit_fields.c - libFuzzer target: rewrite_edit_fields() on any field lines (a stored
 * response's head as a cache hit edits it). The first byte picks which of a few names are
 * set or removed. What comes out fits its room, holds no line of an edited name, and ends
 * with the edit's own lines.
 */
#include "http/rewrite.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct rewrite_field all[] = {
	    {"X-Internal", NULL}, {"Server", "accelnet"}, {"X_Y", NULL}, {"A", "b"}};
	struct rewrite_field set[4], add[1] = {{"Access-Control-Allow-Origin", "*"}};
	unsigned n = 0;
	if (!size)
		return 0;
	for (unsigned i = 0; i < 4; i++)
		if (data[0] & (1u << i))
			set[n++] = all[i];
	struct rewrite_edit e = {set, n, add, (unsigned)(data[0] >> 7)};
	size_t len = size - 1, cap = len + 64;
	char *buf = malloc(cap);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, len);
	int k = rewrite_edit_fields(buf, len, cap, &e);
	if (k > (int)cap)
		abort();
	if (k >= 0 && e.nadd &&
	    (k < 32 || memcmp(buf + k - 32, "Access-Control-Allow-Origin: *\r\n", 32) != 0))
		abort();
	free(buf);
	return 0;
}
