/*
 * detok.c - token ids back to text (see detok.h).
 */
#include "tok/detok.h"

#include <errno.h>
#include <string.h>

static const struct tok_named *named_of(const struct tok *t, uint32_t id)
{
	size_t lo = 0, hi = t->nnamed;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->named[mid].id == id)
			return &t->named[mid];
		if (t->named[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The bytes id stands for: *p, and their count (0: none). */
static size_t bytes_of(const struct tok *t, uint32_t id, const uint8_t **p)
{
	const struct tok_named *n = named_of(t, id);
	if (n) {
		*p = (const uint8_t *)t->named_text + n->off;
		return n->special ? 0 : n->len;
	}
	const struct vocab *v = &t->vocab;
	if (id >= v->nids || !v->len)
		return 0;
	*p = (const uint8_t *)v->arena + v->off[id];
	return v->len[id];
}

size_t detok_room(const struct tok *t, uint32_t id)
{
	const uint8_t *p;
	return 3 * (bytes_of(t, id, &p) + 4);
}

/* The length of the UTF-8 character lead byte <b> starts, or 0 when none can. */
static unsigned seq_len(uint8_t b)
{
	return b < 0x80 ? 1 : b < 0xc2 ? 0 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : b < 0xf5 ? 4 : 0;
}

/* Is byte <c> a valid <i>th byte (i >= 1) of the character that <lead> starts? */
static int cont_ok(uint8_t lead, unsigned i, uint8_t c)
{
	if ((c & 0xc0) != 0x80)
		return 0;
	if (i != 1)
		return 1;
	return !(lead == 0xe0 && c < 0xa0) && !(lead == 0xed && c > 0x9f) &&
	       !(lead == 0xf0 && c < 0x90) && !(lead == 0xf4 && c > 0x8f);
}

static const char fffd[3] = {(char)0xef, (char)0xbf, (char)0xbd};

long detok_piece(const struct tok *t, struct detok *d, uint32_t id, char *out, size_t cap)
{
	const uint8_t *p = NULL;
	size_t n = bytes_of(t, id, &p);
	if (cap < 3 * (n + 4))
		return -ENOSPC;
	uint8_t pend[4];
	unsigned np = d->npend;
	memcpy(pend, d->pend, np);
	size_t w = 0, i = 0, total = np + n;
	d->npend = 0;
#define AT(k) ((k) < np ? pend[k] : p[(k)-np])
	while (i < total) {
		uint8_t b = AT(i);
		unsigned len = seq_len(b), k = 1;
		if (!len) {
			memcpy(out + w, fffd, 3);
			w += 3;
			i++;
			continue;
		}
		while (k < len && i + k < total && cont_ok(b, k, AT(i + k)))
			k++;
		if (k == len) {
			for (unsigned j = 0; j < len; j++)
				out[w++] = (char)AT(i + j);
			i += len;
		} else if (i + k == total) { /* the start of a character: held back */
			for (unsigned j = 0; j < k; j++)
				d->pend[j] = AT(i + j);
			d->npend = (uint8_t)k;
			i += k;
		} else { /* a character cut short by a byte that cannot follow */
			memcpy(out + w, fffd, 3);
			w += 3;
			i += k;
		}
	}
#undef AT
	return (long)w;
}

size_t detok_end(struct detok *d, char *out, size_t cap)
{
	if (!d->npend || cap < 3)
		return 0;
	d->npend = 0;
	memcpy(out, fffd, 3);
	return 3;
}
