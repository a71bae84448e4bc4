/*
 * fuzz_http_request.c - libFuzzer target: the request-head parser, then the chunked scanner
 * over whatever follows the head, with the invariants the proxy relies on checked.
 */
#include "http/chunked.h"
#include "http/parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct http_head h;
	const char *p = (const char *)data;
	int r = http_parse_request(p, size, 8192, &h);
	if (r <= 0)
		return 0;
	if ((size_t)r > size || h.nheaders > HTTP_MAX_HEADERS)
		abort();
	for (unsigned i = 0; i < h.nheaders; i++)
		if (h.headers[i].name.p < p ||
		    h.headers[i].value.p + h.headers[i].value.len > p + r)
			abort();
	if (h.framing == HTTP_BODY_CHUNKED) {
		struct http_chunked c;
		http_chunked_init(&c);
		size_t pos = (size_t)r;
		while (pos < size && !http_chunked_done(&c)) {
			int is_data;
			ssize_t n = http_chunked_scan(&c, p + pos, size - pos, &is_data);
			if (n < 0)
				break;
			if (n == 0 || (size_t)n > size - pos)
				abort();
			pos += (size_t)n;
		}
	}
	return 0;
}
