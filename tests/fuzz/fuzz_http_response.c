/*
 * fuzz_http_response.c - libFuzzer target: the response-head parser for every request
 * method that changes framing.
 */
#include "http/parse.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct http_head h;
	static const enum http_method methods[] = {HTTP_GET, HTTP_HEAD, HTTP_POST};
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		int r = http_parse_response((const char *)data, size, 8192, methods[i], &h);
		if (r > 0 && ((size_t)r > size || h.status < 100 || h.status > 599))
			abort();
	}
	return 0;
}
