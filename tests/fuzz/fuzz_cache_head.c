/*
 * fuzz_cache_head.c - libFuzzer target: a backend's response head kept as a stored head
 * (cache/head.h), and a second response (a 304) merged over it. Whatever the backend sent,
 * the stored head and the merged one must read back as response heads (unless the merge holds
 * more fields than a parse takes) that keep no framing field, no hop-by-hop field and no Age.
 */
#include "cache/head.h"
#include "http/parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char stored[20000], merged[40000], again[40002];

/* head[0..len) + CRLF must parse, with none of the fields a stored head leaves out. */
static void check(const char *head, long len)
{
	struct http_head h;
	if (len < 0)
		return;
	size_t lines = 0;
	for (long i = 0; i < len; i++)
		lines += head[i] == '\n';
	if (lines > HTTP_MAX_HEADERS) /* a merge may hold more fields than a parse takes */
		return;
	memcpy(again, head, (size_t)len);
	memcpy(again + len, "\r\n", 2);
	if (http_parse_response(again, (size_t)len + 2, sizeof(again), HTTP_GET, &h) != len + 2)
		abort();
	static const char *const never[] = {"content-length", "transfer-encoding", "age",
					    "connection",     "keep-alive",	   "upgrade"};
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
		if (http_find_header(&h, never[i]))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct http_head first, second;
	const char *p = (const char *)data;
	int a = http_parse_response(p, size, 8192, HTTP_GET, &first);
	if (a <= 0 || first.status < 200)
		return 0;
	long n = cache_head_build(&first, stored, sizeof(stored));
	check(stored, n);
	if (n < 0)
		return 0;
	int b = http_parse_response(p + a, size - (size_t)a, 8192, HTTP_GET, &second);
	if (b <= 0)
		return 0;
	long m = cache_head_merge(stored, (size_t)n, &second, merged, sizeof(merged));
	check(merged, m);
	return 0;
}
