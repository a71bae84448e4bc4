/*
 * norm.c - the normalizer chain (norm.h). NFC through libutf8proc: the text decomposed
 * canonically into code points in the scratch (grown and done again when it did not fit),
 * then recomposed and written back as UTF-8 over the same buffer, as utf8proc_NFC() does but
 * without its allocation. Prepend and Replace copy into the buffer the input is not in.
 */
#include "tok/norm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void norm_scratch_free(struct norm_scratch *ns)
{
	free(ns->cp);
	free(ns->buf[0]);
	free(ns->buf[1]);
	*ns = (struct norm_scratch){0};
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

/* Buffer <k> of the scratch with room for <n> bytes, or NULL. */
static uint8_t *buf_fit(struct norm_scratch *ns, int k, size_t n)
{
	if (n <= ns->bcap[k])
		return ns->buf[k];
	size_t cap = ns->bcap[k] ? ns->bcap[k] : 256;
	while (cap < n) {
		if (cap > SIZE_MAX / 2)
			return NULL;
		cap *= 2;
	}
	uint8_t *b = realloc(ns->buf[k], cap);
	if (!b)
		return NULL;
	ns->buf[k] = b;
	ns->bcap[k] = cap;
	return b;
}

/* Every occurrence of from[0..nf) in s[0..n), left to right, replaced by to[0..nt). */
static int replace(struct norm_scratch *ns, int k, const struct norm_step *st, const uint8_t *s,
		   size_t n, const uint8_t **out, size_t *outn)
{
	size_t count = 0;
	for (size_t i = 0; i + st->nfrom <= n;) {
		if (!memcmp(s + i, st->from, st->nfrom)) {
			count++;
			i += st->nfrom;
		} else {
			i++;
		}
	}
	if (!count) {
		*out = s;
		*outn = n;
		return 0;
	}
	if (count > (SIZE_MAX - n) / (st->nto + 1u))
		return -ENOMEM;
	uint8_t *o = buf_fit(ns, k, n + count * st->nto);
	if (!o)
		return -ENOMEM;
	size_t w = 0;
	for (size_t i = 0; i < n;) {
		if (i + st->nfrom <= n && !memcmp(s + i, st->from, st->nfrom)) {
			memcpy(o + w, st->to, st->nto);
			w += st->nto;
			i += st->nfrom;
		} else {
			o[w++] = s[i++];
		}
	}
	*out = o;
	*outn = w;
	return 0;
}

int norm_apply(const struct norm *nm, struct norm_scratch *ns, const uint8_t *s, size_t n,
	       const uint8_t **out, size_t *outn)
{
	int k = 0, r;
	for (size_t i = 0; i < nm->n; i++) {
		const struct norm_step *st = &nm->step[i];
		const uint8_t *o = s;
		size_t on = n;
		if (st->kind == NORM_NFC) {
			if ((r = norm_nfc(ns, s, n, &o, &on)))
				return r;
			if (o != s) { /* out of the code point buffer, which the next NFC reuses */
				uint8_t *b = buf_fit(ns, k, on);
				if (!b)
					return -ENOMEM;
				memcpy(b, o, on);
				o = b;
			}
		} else if (st->kind == NORM_PREPEND) {
			if (n) { /* the reference prepends to a piece that is not empty only */
				uint8_t *b =
				    n > SIZE_MAX - st->nto ? NULL : buf_fit(ns, k, n + st->nto);
				if (!b)
					return -ENOMEM;
				memcpy(b, st->to, st->nto);
				memcpy(b + st->nto, s, n);
				o = b;
				on = n + st->nto;
			}
		} else if ((r = replace(ns, k, st, s, n, &o, &on))) {
			return r;
		}
		if (o != s)
			k ^= 1; /* the next step writes into the other buffer */
		s = o;
		n = on;
	}
	*out = s;
	*outn = n;
	return 0;
}
