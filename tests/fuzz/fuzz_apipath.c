/*
 * fuzz_apipath.c - libFuzzer target: the admin API's paths (control/apipath.h) and numeric
 * backend addresses (net_addr_parse_numeric), on input an admin client sends.
 *
 * Input: a method byte, then the path (the same bytes, NUL-terminated, are also parsed as an
 * address). A path must be answered 0, 400, 404 or 405 with a reason; a call taken must name
 * its pool and backend as NUL-terminated, non-empty-when-named strings with no control byte
 * or '/'; a 405 must say which methods the path takes; nothing may be read past the length.
 * An address taken must format back to one that parses to the same socket address.
 */
#include "net/addr.h"
#include "control/apipath.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_segment(const char *s)
{
	size_t n = strnlen(s, APIPATH_SEGMENT_MAX);
	if (n == APIPATH_SEGMENT_MAX)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < ' ' || s[i] == 0x7f || s[i] == '/')
			abort();
}

static void check_address(const char *text)
{
	struct net_addr a, b;
	const char *why = NULL;
	char canon[64];
	if (net_addr_parse_numeric(text, &a, &why) < 0) {
		if (!why)
			abort();
		return;
	}
	net_addr_format((const struct sockaddr *)&a.ss, canon, sizeof(canon));
	if (net_addr_parse_numeric(canon, &b, &why) < 0 || a.len != b.len ||
	    memcmp(&a.ss, &b.ss, a.len) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct apipath t;
	const char *why = NULL;
	if (size < 1 || size > 4096)
		return 0;
	enum http_method m = (enum http_method)(data[0] % (HTTP_CONNECT + 1));
	size_t len = size - 1;
	char *path = malloc(len ? len : 1); /* exactly its bytes: ASan sees a read past them */
	if (!path)
		return 0;
	memcpy(path, data + 1, len);
	int rc = apipath_parse(m, path, len, &t, &why);
	if (!why || (rc != 0 && rc != 400 && rc != 404 && rc != 405))
		abort();
	if (rc == 405 && !t.allow)
		abort();
	if (rc == 0) {
		check_segment(t.pool);
		check_segment(t.backend);
		if (t.call >= APIPATH_ADD && t.call <= APIPATH_DISABLE && !t.pool[0])
			abort();
		if (t.call >= APIPATH_CHANGE && t.call <= APIPATH_DISABLE && !t.backend[0])
			abort();
	}
	char *text = malloc(len + 1);
	if (text) {
		memcpy(text, data + 1, len);
		text[len] = '\0';
		check_address(text);
		free(text);
	}
	free(path);
	return 0;
}
