/*
 * norm.c - NFC through libutf8proc (norm.h): the text decomposed canonically into code points
 * in the scratch (grown and done again when it did not fit), then recomposed and written back
 * as UTF-8 over the same buffer, as utf8proc_NFC() does but without its allocation.
 */
#include "tok/norm.h"

#include <errno.h>
#include <stdlib.h>
#include <utf8proc.h>

void norm_scratch_free(struct norm_scratch *ns)
{
	free(ns->cp);
	ns->cp = NULL;
	ns->cap = 0;
}

int norm_nfc(struct norm_scratch *ns, const uint8_t *s, size_t n, const uint8_t **out, size_t *outn)
{
	size_t i = 0;
	while (i < n && s[i] < 0x80)
		i++;
	if (i == n) {
		*out = s;
		*outn = n;
		return 0;
	}
	if (n > (size_t)1 << 28)
		return -ENOMEM;
	const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
	for (;;) {
		utf8proc_ssize_t r = utf8proc_decompose_custom(
		    s, (utf8proc_ssize_t)n, ns->cp, (utf8proc_ssize_t)ns->cap, opt, NULL, NULL);
		if (r < 0)
			return r == UTF8PROC_ERROR_NOMEM ? -ENOMEM : -EILSEQ;
		if ((size_t)r <= ns->cap) {
			r = utf8proc_reencode(ns->cp, r, opt);
			if (r < 0)
				return -EILSEQ;
			*out = (const uint8_t *)ns->cp;
			*outn = (size_t)r;
			return 0;
		}
		size_t cap = ns->cap ? ns->cap : 256;
		while (cap < (size_t)r)
			cap *= 2;
		int32_t *cp = realloc(ns->cp, cap * sizeof(*cp));
		if (!cp)
			return -ENOMEM;
		ns->cp = cp;
		ns->cap = cap;
	}
}
