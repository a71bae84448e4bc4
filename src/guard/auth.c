/*
 * auth.c - reading a request's credential and deciding (see auth.h).
 */
#include "guard/auth.h"

#include <string.h>
#include <strings.h>

int auth_presented_key(const struct http_head *h, struct http_str *key)
{
	const struct http_header *a = http_find_header(h, "authorization");
	if (a) {
		/* "Bearer" is case-insensitive (RFC 9110 11.1); then one or more spaces */
		struct http_str v = a->value;
		if (v.len <= 7 || strncasecmp(v.p, "bearer ", 7) != 0)
			return 0;
		uint32_t i = 7;
		while (i < v.len && v.p[i] == ' ')
			i++;
		key->p = v.p + i;
		key->len = v.len - i;
		return key->len > 0;
	}
	const struct http_header *x = http_find_header(h, "x-api-key");
	if (!x || !x->value.len)
		return 0;
	*key = x->value;
	return 1;
}

enum auth_result auth_check(const struct apikeys *keys, char *const *admit, size_t nadmit,
			    const struct http_head *h, const char **tenant)
{
	struct http_str key;
	*tenant = NULL;
	if (!auth_presented_key(h, &key))
		return AUTH_MISSING;
	if (!(*tenant = apikeys_lookup(keys, key.p, key.len)))
		return AUTH_INVALID;
	return auth_admits(admit, nadmit, *tenant) ? AUTH_OK : AUTH_FORBIDDEN;
}

int auth_admits(char *const *admit, size_t nadmit, const char *tenant)
{
	if (!nadmit)
		return 1;
	for (size_t i = 0; i < nadmit; i++)
		if (strcmp(admit[i], tenant) == 0)
			return 1;
	return 0;
}
