/*
 * fuzz_chunked.c - libFuzzer target: the chunked scanner fed the same input in two splits
 * must agree on where the body ends and how much payload it holds.
 */
#include "http/chunked.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long scan(const char *p, size_t size, size_t step, size_t *payload)
{
	struct http_chunked c;
	http_chunked_init(&c);
	size_t pos = 0;
	*payload = 0;
	while (pos < size && !http_chunked_done(&c)) {
		size_t n = size - pos < step ? size - pos : step;
		int is_data;
		ssize_t k = http_chunked_scan(&c, p + pos, n, &is_data);
		if (k < 0)
			return -1;
		if (k == 0)
			abort(); /* no progress on non-empty input before the end */
		if (is_data)
			*payload += (size_t)k;
		pos += (size_t)k;
	}
	return http_chunked_done(&c) ? (long)pos : -2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t a, b;
	long whole = scan((const char *)data, size, size ? size : 1, &a);
	long bytes = scan((const char *)data, size, 1, &b);
	if (whole != bytes || (whole >= 0 && a != b))
		abort();
	return 0;
}
