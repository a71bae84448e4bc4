/*
 * detok.c - token ids back to text (see detok.h): byte-level, bytes reassembled into whole
 * characters; SentencePiece-style, the decoder's steps with runs of byte tokens held.
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
	size_t n = bytes_of(t, id, &p);
	return t->chars ? n + DETOK_END_MAX + 3 : 3 * (n + 4);
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

/* How run[0..n) reads as UTF-8: 2 whole characters, 1 whole characters then the start of
 * one (*whole: the bytes of those whole), 0 not UTF-8 whatever follows. */
static int run_state(const uint8_t *run, size_t n, size_t *whole)
{
	size_t i = 0;
	*whole = 0;
	while (i < n) {
		unsigned len = seq_len(run[i]), k = 1;
		if (!len)
			return 0;
		while (k < len && i + k < n && cont_ok(run[i], k, run[i + k]))
			k++;
		if (k < len)
			return i + k == n ? 1 : 0;
		i += len;
		*whole = i;
	}
	return 2;
}

static size_t put_fffd(char *out, size_t count)
{
	for (size_t i = 0; i < count; i++)
		memcpy(out + 3 * i, fffd, 3);
	return 3 * count;
}

/* The run held, ended: its text when it is UTF-8, else a U+FFFD per byte. */
static size_t run_flush(struct detok *d, char *out)
{
	size_t whole, w;
	if (run_state(d->run, d->nrun, &whole) == 2) {
		memcpy(out, d->run, d->nrun);
		w = d->nrun;
	} else {
		w = put_fffd(out, d->nrun);
	}
	d->nrun = 0;
	d->run_bad = 0;
	return w;
}

/* The byte <0xNN> stands for, or -1 when s[0..n) is not such a token. */
static int byte_token(const char *s, size_t n)
{
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	int v = 0;
	for (int i = 3; i < 5; i++) {
		char c = s[i];
		int x = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (x < 0)
			return -1;
		v = v * 16 + x;
	}
	return v;
}

/* Strip: the leading spaces still to cut, off out[0..w); the new length. */
static size_t strip_start(const struct tok *t, struct detok *d, char *out, size_t w)
{
	size_t cut = 0;
	while (!d->started && cut < w && out[cut] == ' ' && d->stripped < t->dec.strip) {
		cut++;
		d->stripped++;
	}
	if (cut < w)
		d->started = 1;
	memmove(out, out + cut, w - cut);
	return w - cut;
}

/* A SentencePiece-style token: its text after the Replace steps, written at out + room for
 * what the run held may become; then the run handled, the Strip applied (not to the text
 * of a token marked <unstripped>, nor after it). */
static long piece_chars(const struct tok *t, struct detok *d, const uint8_t *p, size_t n, char *out,
			int unstripped)
{
	char *txt = out + DETOK_END_MAX;
	size_t tn = n, w = 0;
	memcpy(txt, p, n);
	for (size_t k = 0; k < t->dec.nreplace; k++) { /* in place: a piece never grows */
		const char *from = t->dec.replace[k].from, *to = t->dec.replace[k].to;
		size_t nf = t->dec.replace[k].nfrom, nt = t->dec.replace[k].nto, o = 0;
		for (size_t i = 0; i < tn;) {
			if (i + nf <= tn && !memcmp(txt + i, from, nf)) {
				memcpy(txt + o, to, nt);
				o += nt;
				i += nf;
			} else {
				txt[o++] = txt[i++];
			}
		}
		tn = o;
	}
	int b = t->dec.byte_fallback ? byte_token(txt, tn) : -1;
	if (b < 0) {
		w = run_flush(d, out); /* the run, if any, is over */
		memmove(out + w, txt, tn);
		w += tn;
	} else if (t->dec.by_char) { /* whole characters go, a byte that starts none is U+FFFD */
		d->run[d->nrun++] = (uint8_t)b;
		while (d->nrun) {
			size_t whole;
			int st = run_state(d->run, d->nrun, &whole);
			size_t go = whole ? whole : st == 1 ? 0 : 1;
			if (!go)
				break; /* the start of a character */
			if (whole)
				memcpy(out + w, d->run, whole);
			else
				memcpy(out + w, fffd, 3);
			w += whole ? whole : 3;
			memmove(d->run, d->run + go, d->nrun - go);
			d->nrun = (uint8_t)(d->nrun - go);
		}
	} else if (d->run_bad) {
		w = put_fffd(out, 1);
	} else {
		size_t whole;
		d->run[d->nrun++] = (uint8_t)b;
		int st = run_state(d->run, d->nrun, &whole);
		if (!st) { /* the whole run will be U+FFFDs: those held go now, the rest as met */
			w = put_fffd(out, d->nrun);
			d->nrun = 0;
			d->run_bad = 1;
		} else if (d->nrun == DETOK_RUN) { /* held too long: its whole characters go */
			memcpy(out, d->run, whole);
			memmove(d->run, d->run + whole, d->nrun - whole);
			d->nrun = (uint8_t)(d->nrun - whole);
			w = whole;
		}
	}
	if (unstripped && w) /* libsentencepiece keeps the space its unknown text starts with */
		d->started = 1;
	if (t->dec.strip_each) /* and cuts the first space of each piece until one gives text */
		d->stripped = 0;
	return (long)strip_start(t, d, out, w);
}

long detok_piece(const struct tok *t, struct detok *d, uint32_t id, char *out, size_t cap)
{
	const uint8_t *p = NULL;
	size_t n = bytes_of(t, id, &p);
	if (cap < detok_room(t, id))
		return -ENOSPC;
	if (t->chars && n) {
		const struct tok_named *nm = named_of(t, id);
		return piece_chars(t, d, p, n, out, nm && nm->unstripped);
	}
	if (t->chars)
		return 0; /* a skipped token ends no run */
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

size_t detok_end(const struct tok *t, struct detok *d, char *out, size_t cap)
{
	if (t->chars) {
		if (!d->nrun || cap < DETOK_END_MAX)
			return 0;
		return strip_start(t, d, out, run_flush(d, out));
	}
	if (!d->npend || cap < 3)
		return 0;
	d->npend = 0;
	memcpy(out, fffd, 3);
	return 3;
}
