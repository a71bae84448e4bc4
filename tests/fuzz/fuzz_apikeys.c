/*
 * fuzz_apikeys.c - libFuzzer target: the API keys file parser on any bytes. It must never
 * crash or leak; a table it accepts must find each of its plain keys again (the input's
 * second words, where they are not sha256: digests) and nothing for an empty key.
 */
#include "guard/apikeys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct apikeys *k = NULL;
	char err[256];
	if (apikeys_parse("fuzz", (const char *)data, size, &k, err, sizeof(err)) < 0) {
		if (!memchr(err, '\0', sizeof(err)))
			abort(); /* a message is always terminated */
		return 0;
	}
	if (!apikeys_count(k) || apikeys_lookup(k, "", 0))
		abort();
	/* every line's key (second word) must be found, unless it is a stored digest */
	const char *p = (const char *)data, *end = p + size;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		const char *w = p;
		while (w < e && (*w == ' ' || *w == '\t'))
			w++;
		if (w < e && *w != '#') {
			while (w < e && *w != ' ' && *w != '\t')
				w++;
			while (w < e && (*w == ' ' || *w == '\t'))
				w++;
			const char *k1 = w;
			while (k1 < e && *k1 != ' ' && *k1 != '\t' && *k1 != '\r')
				k1++;
			if (k1 - w >= 16 && strncmp(w, "sha256:", 7) != 0 &&
			    !apikeys_lookup(k, w, (size_t)(k1 - w)))
				abort();
		}
		p = e + 1;
	}
	apikeys_free(k);
	return 0;
}
