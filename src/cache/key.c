/*
 * key.c - the cache's keys (see key.h).
 */
#include "cache/key.h"
#include "core/dec.h"
#include "core/hex.h"

#include <ctype.h>
#include <string.h>

#define INFERENCE_SUFFIX 38 /* " POST " and 32 hex digits */

long cache_key_build(char *out, size_t cap, size_t route, int tls, struct http_str host,
		     struct http_str target)
{
	if ((size_t)DEC_U64_MAX + 3 + host.len + 1 + target.len > cap)
		return -1;
	size_t len = dec_u64(out, route);
	out[len++] = ' ';
	out[len++] = tls ? 's' : 'p';
	out[len++] = ' ';
	for (uint32_t i = 0; i < host.len; i++)
		out[len++] = (char)tolower((unsigned char)host.p[i]);
	out[len++] = ' ';
	memcpy(out + len, target.p, target.len);
	return (long)(len + target.len);
}

long cache_key_add_body(char *out, size_t cap, size_t len, const uint64_t hash[2])
{
	static const char digits[] = "0123456789abcdef";
	if (len + INFERENCE_SUFFIX > cap)
		return -1;
	memcpy(out + len, " POST ", 6);
	len += 6;
	for (int i = 0; i < 2; i++)
		for (int b = 60; b >= 0; b -= 4)
			out[len++] = digits[(hash[i] >> b) & 15];
	return (long)len;
}

static int is_hex32(const char *s)
{
	for (int i = 0; i < 32; i++)
		if (hex_value(s[i]) < 0)
			return 0;
	return 1;
}

/* The last space in s[from..to), or NULL. */
static const char *last_space(const char *s, size_t from, size_t to)
{
	while (to > from)
		if (s[--to] == ' ')
			return s + to;
	return NULL;
}

int cache_key_split(const char *key, size_t len, const char **host, size_t *hlen,
		    const char **target, size_t *tlen)
{
	size_t at = 0, end = len;
	while (at < len && key[at] >= '0' && key[at] <= '9')
		at++;
	if (!at || len - at < 3 || key[at] != ' ' || (key[at + 1] != 's' && key[at + 1] != 'p') ||
	    key[at + 2] != ' ')
		return -1;
	at += 3;
	const char *sp = last_space(key, at, end);
	size_t t = sp ? (size_t)(sp - key) + 1 : end; /* the last word */
	if (t < end && key[t] != '/' && end - at >= INFERENCE_SUFFIX &&
	    memcmp(key + end - INFERENCE_SUFFIX, " POST ", 6) == 0 && is_hex32(key + end - 32)) {
		end -= INFERENCE_SUFFIX;
		sp = last_space(key, at, end);
		t = sp ? (size_t)(sp - key) + 1 : end;
	}
	if (t >= end || key[t] != '/')
		return -1;
	*host = key + at;
	*hlen = t - 1 - at;
	*target = key + t;
	*tlen = end - t;
	return 0;
}
