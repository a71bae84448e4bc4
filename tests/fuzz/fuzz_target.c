/*
 * fuzz_target.c - libFuzzer target: the request target's normal form (http/target.h) on any
 * bytes. The first byte picks the flags (open end or not); the rest is the target. What it
 * takes must come out normal: never longer, a fixed point (normalised again, unchanged and
 * taken by refuse mode as it is), its path without "//", "/./", "/../", a closing "/." or
 * "/..", an escaped unreserved character or lower-case hex. Refuse mode takes exactly the
 * normal targets, and a refused target is left as it was. As the target of a request head, it
 * is rewritten in the buffer so that the head parses again to the same.
 */
#include "http/target.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_unreserved(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

static int hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Is the path of s[0..n) in normal form (the open end's last segment aside)? */
static int path_normal(const char *s, size_t n, unsigned flags)
{
	const char *q = memchr(s, '?', n);
	size_t plen = q ? (size_t)(q - s) : n;
	if (!plen || s[0] != '/')
		return 0;
	for (size_t i = 0; i < plen; i++) {
		if (s[i] == '/' && i + 1 < plen && s[i + 1] == '/')
			return 0;
		if (s[i] == '%') {
			if (i + 2 >= plen || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0)
				return 0; /* lower-case hex too */
			if (is_unreserved(hex(s[i + 1]) << 4 | hex(s[i + 2])))
				return 0;
		}
		if (s[i] != '/')
			continue;
		size_t e = i + 1;
		while (e < plen && s[e] != '/')
			e++;
		size_t seg = e - i - 1;
		int dot = (seg == 1 && s[i + 1] == '.') ||
			  (seg == 2 && s[i + 1] == '.' && s[i + 2] == '.');
		if (dot && !(e == plen && (flags & HTTP_TARGET_OPEN_END)))
			return 0;
	}
	return 1;
}

static void check_head(const char *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
			return; /* the parser refuses it first */
	char buf[4200], copy[4200];
	int len = snprintf(buf, sizeof(buf), "GET %.*s HTTP/1.1\r\nHost: x\r\n\r\n", (int)n, t);
	if (len < 0 || (size_t)len >= sizeof(buf))
		return;
	memcpy(copy, buf, (size_t)len);
	struct http_head h, again;
	if (http_parse_request(buf, (size_t)len, sizeof(buf), &h) != len)
		return;
	const char *why = NULL;
	int unused = http_target_normalize_head(buf, &h, HTTP_TARGET_NORMALIZE, &why);
	if (unused < 0) {
		if (!why || memcmp(buf, copy, (size_t)len) != 0)
			abort();
		return;
	}
	if (h.head_len != (uint32_t)(len - unused) || h.method.p != buf + unused)
		abort();
	if (http_parse_request(buf + unused, (size_t)(len - unused), sizeof(buf), &again) !=
		(int)h.head_len ||
	    again.path.len != h.path.len || memcmp(again.path.p, h.path.p, h.path.len) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size || size > 4096)
		return 0;
	unsigned flags = data[0] & 1 ? HTTP_TARGET_OPEN_END : 0;
	const char *in = (const char *)data + 1;
	size_t n = size - 1;
	char *a = malloc(n + 1), *b = malloc(n + 1);
	if (!a || !b)
		abort();
	memcpy(a, in, n);
	memcpy(b, in, n);
	size_t an = n, bn = n;
	const char *why = NULL;
	int rc = http_target_normalize(a, &an, HTTP_TARGET_NORMALIZE, flags, &why);
	int rr = http_target_normalize(b, &bn, HTTP_TARGET_REFUSE, flags, &why);
	if (rr < 0 && (bn != n || memcmp(b, in, n) != 0))
		abort(); /* a refused target is left as it was */
	if (rc < 0) {
		if (rc != -EINVAL || rr != -EINVAL || an != n || memcmp(a, in, n) != 0)
			abort();
	} else {
		if (an > n || rr > 0 || (rc == 0) != (rr == 0) ||
		    (rc == 0 && memcmp(a, in, n) != 0))
			abort();
		if (!path_normal(a, an, flags))
			abort();
		size_t again = an;
		if (http_target_normalize(a, &again, HTTP_TARGET_REFUSE, flags, &why) != 0 ||
		    again != an)
			abort();
	}
	if (!flags)
		check_head(in, n);
	free(a);
	free(b);
	return 0;
}
