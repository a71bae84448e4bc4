/*
 * canon.c - the cache key of a JSON inference request (see canon.h): one strict RFC 8259
 * pass over the body that validates, canonicalises and hashes at once, with no allocation.
 *
 * Objects are the only part that needs reordering, and reordering is what would make a
 * streaming canonicaliser read bytes twice: the first member in key order may be the last
 * one written, so its value would have to be found again after the object is scanned, and
 * at every level of nesting a byte would be re-read once more (64 levels: 64 reads). So the
 * hash is a tree hash: each member's value is hashed on its own, as it is read, into a state
 * of the object's frame (struct sink), and only its 16-byte digest is kept, in a table of the
 * members of the open objects (struct member, CANON_MEMBERS_MAX in all). When the object
 * closes its members are sorted by decoded key and the object's text goes to the enclosing
 * sink as {"key":<digest>,"key":<digest>} (digests raw, 16 bytes; keys re-encoded). Arrays
 * and scalars go to the enclosing sink as canonical text. The encoding is unambiguous (a
 * string ends at its unescaped quote, a digest is 16 bytes), so two bodies get one key only
 * when their canonical forms are equal (or XXH3 collides).
 *
 * Cost on any input of n bytes: every byte is read once by the parser and every canonical
 * byte hashed once (an object adds 16 bytes per member and the keys again, all bounded by
 * n); besides, key bytes are read by the sort: a bottom-up merge sort, in which a comparison
 * reads at most the shorter key and outputs one of the two, so a merge level reads each key
 * at most once and the sort at most log2(m) <= 12 times. So O(n log m) <= ~14 n byte reads,
 * whatever the nesting. Memory, all on the stack: the member table (CANON_MEMBERS_MAX x 24
 * bytes) and two index arrays for the sort (2 x 8 KiB), about 113 KiB in canon_json's frame,
 * and one frame per level of nesting (an object's holds its sink: ~1.2 KiB), so under 200
 * KiB at CANON_DEPTH_MAX.
 *
 * Strings: UTF-8 checked (no overlong forms, no surrogates, nothing past U+10FFFF), raw
 * control bytes refused, escapes decoded (a surrogate pair to one character, a lone half
 * refused), then written back with the fewest escapes: \" \\ \b \f \n \r \t and \u00xx for
 * the other control characters, everything else as its UTF-8 bytes. Numbers are checked
 * against the grammar and kept as written ("1.0" and "1.00" are two keys, and so are "0"
 * and "-0"); the values of the top-level "temperature" and "n" are also read as doubles, by
 * hand (no strtod: it follows the locale), exactly for integers and zero, to within an ulp
 * or two otherwise; a subnormal (1e-310) is not zero, as it is not to the engine.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack, not XXH3_createState's malloc */
#include "cache/canon.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <xxhash.h>

enum { SINK_BUF = 256, KEY_ESCAPED = 0x80000000u };

/* A hash state with a small buffer in front, so a byte costs a store, not a call. */
struct sink {
	XXH3_state_t st;
	size_t n;
	unsigned char buf[SINK_BUF];
};

/* A member of an open object: its key (the offset past its opening quote, and its raw
 * length, KEY_ESCAPED set when it holds a backslash) and the digest of its value. */
struct member {
	uint32_t key;
	uint32_t len;
	unsigned char digest[16];
};

struct parser {
	const unsigned char *b;
	size_t len, pos;
	size_t top; /* members[0..top): those of the objects open now */
	struct member members[CANON_MEMBERS_MAX];
	uint16_t order[CANON_MEMBERS_MAX], tmp[CANON_MEMBERS_MAX];
	struct canon_facts facts;
};

static void sink_reset(struct sink *s)
{
	XXH3_128bits_reset(&s->st);
	s->n = 0;
}

static void sink_flush(struct sink *s)
{
	if (s->n)
		XXH3_128bits_update(&s->st, s->buf, s->n);
	s->n = 0;
}

static void sink_put(struct sink *s, const void *p, size_t n)
{
	if (n > SINK_BUF - s->n)
		sink_flush(s);
	if (n >= SINK_BUF) {
		XXH3_128bits_update(&s->st, p, n);
		return;
	}
	memcpy(s->buf + s->n, p, n);
	s->n += n;
}

static void sink_byte(struct sink *s, unsigned char c)
{
	if (s->n == SINK_BUF)
		sink_flush(s);
	s->buf[s->n++] = c;
}

static void sink_digest(struct sink *s, unsigned char out[16])
{
	sink_flush(s);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&s->st));
	memcpy(out, c.digest, 16);
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len && (p->b[p->pos] == ' ' || p->b[p->pos] == '\t' ||
				   p->b[p->pos] == '\n' || p->b[p->pos] == '\r'))
		p->pos++;
}

static int hex4(const unsigned char *h, uint32_t *v)
{
	*v = 0;
	for (int k = 0; k < 4; k++) {
		unsigned c = h[k], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			d = (c | 0x20) - 'a' + 10;
		else
			return -1;
		*v = *v << 4 | d;
	}
	return 0;
}

static int utf8_put(uint32_t cp, unsigned char u[4])
{
	if (cp < 0x80) {
		u[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		u[0] = (unsigned char)(0xc0 | cp >> 6);
		u[1] = (unsigned char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		u[0] = (unsigned char)(0xe0 | cp >> 12);
		u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
		u[2] = (unsigned char)(0x80 | (cp & 0x3f));
		return 3;
	}
	u[0] = (unsigned char)(0xf0 | cp >> 18);
	u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
	u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
	u[3] = (unsigned char)(0x80 | (cp & 0x3f));
	return 4;
}

/* The escape at b[*i] ('\\'): its character's UTF-8 bytes into u, or -1. */
static int str_escape(const unsigned char *b, size_t len, size_t *i, unsigned char u[4])
{
	size_t k = *i;
	if (len - k < 2)
		return -1;
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *e = b[k + 1] ? strchr(from, b[k + 1]) : NULL;
	if (e) {
		u[0] = (unsigned char)to[e - from];
		*i = k + 2;
		return 1;
	}
	uint32_t cp, lo;
	if (b[k + 1] != 'u' || len - k < 6 || hex4(b + k + 2, &cp) < 0)
		return -1;
	k += 6;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return -1; /* a low half alone */
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (len - k < 6 || b[k] != '\\' || b[k + 1] != 'u' || hex4(b + k + 2, &lo) < 0 ||
		    lo < 0xdc00 || lo > 0xdfff)
			return -1; /* a high half without its low half */
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		k += 6;
	}
	*i = k;
	return utf8_put(cp, u);
}

/*
 * One character of a string's body at b[*i]: its UTF-8 bytes into u (1 to 4) and *i past
 * it; 0 at the closing quote (*i past it); -1 when the bytes are not valid JSON or UTF-8.
 */
static int str_unit(const unsigned char *b, size_t len, size_t *i, unsigned char u[4])
{
	size_t k = *i;
	if (k >= len)
		return -1;
	unsigned c = b[k];
	if (c == '"') {
		*i = k + 1;
		return 0;
	}
	if (c == '\\')
		return str_escape(b, len, i, u);
	if (c < 0x20)
		return -1;
	if (c < 0x80) {
		u[0] = (unsigned char)c;
		*i = k + 1;
		return 1;
	}
	size_t n;
	unsigned lo = 0x80, hi = 0xbf; /* the range of the second byte */
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else
		return -1;
	if (len - k < n || b[k + 1] < lo || b[k + 1] > hi)
		return -1;
	for (size_t j = 2; j < n; j++)
		if ((b[k + j] & 0xc0) != 0x80)
			return -1;
	memcpy(u, b + k, n);
	*i = k + n;
	return (int)n;
}

/* A byte that stands for itself both in a JSON string and in its canonical form. */
static int plain_ascii(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/*
 * The string at b[*i] ('"'): checked, *i past its closing quote, and, when s is not NULL,
 * written to s in canonical form. *escaped (when not NULL) says whether it held a backslash.
 */
static int str_read(const unsigned char *b, size_t len, size_t *i, struct sink *s, int *escaped)
{
	static const char hexd[] = "0123456789abcdef";
	size_t k = *i + 1;
	int esc = 0;
	if (s)
		sink_byte(s, '"');
	for (;;) {
		size_t run = k;
		while (run < len && plain_ascii(b[run]))
			run++;
		if (s && run > k)
			sink_put(s, b + k, run - k);
		esc |= run < len && b[run] == '\\';
		k = run;
		unsigned char u[4];
		int n = str_unit(b, len, &k, u);
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		if (!s)
			continue;
		if (n > 1 || plain_ascii(u[0])) {
			sink_put(s, u, (size_t)n);
			continue;
		}
		unsigned char e[6] = {'\\', 0};
		size_t en = 2;
		switch (u[0]) {
		case '"':
		case '\\':
			e[1] = u[0];
			break;
		case '\b':
			e[1] = 'b';
			break;
		case '\f':
			e[1] = 'f';
			break;
		case '\n':
			e[1] = 'n';
			break;
		case '\r':
			e[1] = 'r';
			break;
		case '\t':
			e[1] = 't';
			break;
		default: /* the other control characters */
			memcpy(e + 1, "u00", 3);
			e[4] = (unsigned char)hexd[u[0] >> 4];
			e[5] = (unsigned char)hexd[u[0] & 15];
			en = 6;
		}
		sink_put(s, e, en);
	}
	if (s)
		sink_byte(s, '"');
	if (escaped)
		*escaped = esc;
	*i = k;
	return 0;
}

/* The number at b[i]: the index past it when it follows RFC 8259's grammar, else 0. */
static size_t num_end(const unsigned char *b, size_t len, size_t i)
{
#define DIGIT(k) ((k) < len && b[k] >= '0' && b[k] <= '9')
	if (i < len && b[i] == '-')
		i++;
	if (i < len && b[i] == '0')
		i++;
	else if (DIGIT(i))
		while (DIGIT(i))
			i++;
	else
		return 0;
	if (i < len && b[i] == '.') {
		if (!DIGIT(i + 1))
			return 0;
		for (i++; DIGIT(i); i++)
			;
	}
	if (i < len && (b[i] == 'e' || b[i] == 'E')) {
		i++;
		if (i < len && (b[i] == '+' || b[i] == '-'))
			i++;
		if (!DIGIT(i))
			return 0;
		while (DIGIT(i))
			i++;
	}
	return i;
#undef DIGIT
}

/* The value of a number already checked against the grammar: the first 19 significant
 * digits, scaled by the power of ten. */
static double num_value(const unsigned char *s, size_t n)
{
	size_t i = 0;
	int neg = 0, sig = 0;
	uint64_t mant = 0;
	long exp10 = 0, e = 0;
	if (s[i] == '-')
		neg = 1, i++;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		if (sig < 19) {
			mant = mant * 10 + (uint64_t)(s[i] - '0');
			sig += mant != 0;
		} else {
			exp10++;
		}
	}
	if (i < n && s[i] == '.')
		for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			if (sig < 19) {
				mant = mant * 10 + (uint64_t)(s[i] - '0');
				sig += mant != 0;
				exp10--;
			}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		int eneg = 0;
		i++;
		if (s[i] == '+' || s[i] == '-')
			eneg = s[i++] == '-';
		for (; i < n; i++)
			if (e < 100000)
				e = e * 10 + (s[i] - '0');
		exp10 += eneg ? -e : e;
	}
	double v = (double)mant;
	if (mant == 0 || exp10 == 0)
		;
	else if (exp10 > 400)
		v = INFINITY;
	else if (exp10 < -400)
		v = 0;
	else if (exp10 > 0)
		v *= pow(10, (double)exp10);
	else if (exp10 >= -300)
		v /= pow(10, (double)-exp10);
	else /* 10^309 and up overflow: a subnormal (1e-310) would read as 0 */
		v = v / 1e300 / pow(10, (double)(-exp10 - 300));
	return neg ? -v : v;
}

/* The raw length of the checked escape at b[i] (a surrogate pair is one: 12). */
static size_t esc_len(const unsigned char *b, size_t i)
{
	if (b[i + 1] != 'u')
		return 2;
	unsigned h = b[i + 3] | 0x20;
	return (b[i + 2] | 0x20) == 'd' && (h == '8' || h == '9' || h == 'a' || h == 'b') ? 12 : 6;
}

/* The next decoded byte of a checked key at b[*i], from u[*ui..*un) first; -1 at its end. */
static int key_byte(const unsigned char *b, size_t len, size_t *i, unsigned char u[4], int *ui,
		    int *un)
{
	if (*ui < *un)
		return u[(*ui)++];
	if (b[*i] == '"')
		return -1;
	if (b[*i] != '\\')
		return b[(*i)++];
	*un = str_escape(b, len, i, u);
	*ui = 1;
	return u[0];
}

/*
 * Decoded key order of two members: memcmp when neither holds an escape; else byte by byte,
 * where a run of equal raw bytes, or an escape written the same way on both sides, is
 * passed over without decoding (a byte that is no escape decodes to itself).
 */
static int key_cmp(const struct parser *p, const struct member *x, const struct member *y)
{
	const unsigned char *b = p->b;
	if (!((x->len | y->len) & KEY_ESCAPED)) {
		size_t n = x->len < y->len ? x->len : y->len;
		int c = memcmp(b + x->key, b + y->key, n);
		return c ? c : (x->len > y->len) - (x->len < y->len);
	}
	size_t i = x->key, j = y->key;
	unsigned char u[4], v[4];
	int un = 0, ui = 0, vn = 0, vi = 0;
	for (;;) {
		while (ui == un && vi == vn && b[i] == b[j] && b[i] != '"') {
			if (b[i] != '\\') {
				i++, j++;
				continue;
			}
			size_t el = esc_len(b, i), k = 1;
			while (k < el && b[i + k] == b[j + k])
				k++;
			if (k < el)
				break;
			i += el, j += el;
		}
		int c = key_byte(b, p->len, &i, u, &ui, &un);
		int d = key_byte(b, p->len, &j, v, &vi, &vn);
		if (c != d)
			return c < d ? -1 : 1;
		if (c < 0)
			return 0;
	}
}

/* Whether member m's decoded key is name (a short ASCII name). */
static int key_is(const struct parser *p, const struct member *m, const char *name)
{
	size_t n = strlen(name);
	if (!(m->len & KEY_ESCAPED))
		return m->len == n && memcmp(p->b + m->key, name, n) == 0;
	size_t i = m->key, k = 0;
	unsigned char u[4];
	int r;
	while ((r = str_unit(p->b, p->len, &i, u)) > 0) {
		if (k + (size_t)r > n || memcmp(u, name + k, (size_t)r) != 0)
			return 0;
		k += (size_t)r;
	}
	return k == n;
}

/* Sort the members [base, top) into order[0..m) by key: a bottom-up merge sort. 0, or -1
 * when two keys are equal. */
static int members_sort(struct parser *p, size_t base, size_t m)
{
	const struct member *mb = p->members + base;
	uint16_t *a = p->order, *t = p->tmp;
	for (size_t k = 0; k < m; k++)
		a[k] = (uint16_t)k;
	for (size_t w = 1; w < m; w *= 2) {
		for (size_t lo = 0; lo < m; lo += 2 * w) {
			size_t mid = lo + w < m ? lo + w : m, hi = lo + 2 * w < m ? lo + 2 * w : m;
			size_t x = lo, y = mid, o = lo;
			while (x < mid && y < hi)
				t[o++] = key_cmp(p, mb + a[y], mb + a[x]) < 0 ? a[y++] : a[x++];
			while (x < mid)
				t[o++] = a[x++];
			while (y < hi)
				t[o++] = a[y++];
		}
		uint16_t *swap = a;
		a = t, t = swap;
	}
	if (a != p->order)
		memcpy(p->order, a, m * sizeof(*a));
	for (size_t k = 1; k < m; k++)
		if (key_cmp(p, mb + p->order[k - 1], mb + p->order[k]) == 0)
			return -1;
	return 0;
}

/* A top-level member: note it in the facts when it is one of theirs. Its value is
 * b[v..pos). null reads as absent; a temperature or n that is not a number as +inf, so that
 * it never looks deterministic. */
static void facts_note(struct parser *p, const struct member *m, size_t v)
{
	struct canon_facts *f = &p->facts;
	const unsigned char *val = p->b + v;
	size_t vn = p->pos - v;
	int null = val[0] == 'n', num = val[0] == '-' || (val[0] >= '0' && val[0] <= '9');
	if (key_is(p, m, "temperature")) {
		f->has_temperature = !null;
		f->temperature = null ? 0 : num ? num_value(val, vn) : INFINITY;
	} else if (key_is(p, m, "n")) {
		f->has_n = !null;
		f->n = null ? 0 : num ? num_value(val, vn) : INFINITY;
	} else if (key_is(p, m, "stream")) {
		f->stream = val[0] == 't';
	} else if (key_is(p, m, "seed")) {
		f->has_seed = !null;
	}
}

static int value_read(struct parser *p, struct sink *s, int depth);

/* The object at b[pos] ('{'), depth deep: its members hashed one by one into val, then
 * sorted and written to s. */
static int object_read(struct parser *p, struct sink *s, int depth)
{
	struct sink val;
	size_t base = p->top, m;
	if (depth > CANON_DEPTH_MAX)
		return -1;
	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->b[p->pos] == '}') {
		p->pos++;
		sink_put(s, "{}", 2);
		return 0;
	}
	for (;;) {
		if (p->pos >= p->len || p->b[p->pos] != '"' || p->top == CANON_MEMBERS_MAX)
			return -1;
		struct member *mem = &p->members[p->top++];
		size_t k = p->pos;
		int esc;
		if (str_read(p->b, p->len, &p->pos, NULL, &esc) < 0)
			return -1;
		mem->key = (uint32_t)(k + 1);
		mem->len = (uint32_t)(p->pos - k - 2) | (esc ? KEY_ESCAPED : 0);
		skip_ws(p);
		if (p->pos >= p->len || p->b[p->pos] != ':')
			return -1;
		p->pos++;
		skip_ws(p);
		size_t v = p->pos;
		sink_reset(&val);
		if (value_read(p, &val, depth) < 0)
			return -1;
		sink_digest(&val, mem->digest);
		if (depth == 1)
			facts_note(p, mem, v);
		skip_ws(p);
		if (p->pos < p->len && p->b[p->pos] == ',') {
			p->pos++;
			skip_ws(p);
			continue;
		}
		if (p->pos < p->len && p->b[p->pos] == '}') {
			p->pos++;
			break;
		}
		return -1;
	}
	m = p->top - base;
	if (members_sort(p, base, m) < 0)
		return -1; /* a key twice */
	sink_byte(s, '{');
	for (size_t k = 0; k < m; k++) {
		const struct member *mem = &p->members[base + p->order[k]];
		size_t i = mem->key - 1;
		if (k)
			sink_byte(s, ',');
		(void)str_read(p->b, p->len, &i, s, NULL);
		sink_byte(s, ':');
		sink_put(s, mem->digest, 16);
	}
	sink_byte(s, '}');
	p->top = base;
	return 0;
}

static int array_read(struct parser *p, struct sink *s, int depth)
{
	if (depth > CANON_DEPTH_MAX)
		return -1;
	p->pos++;
	skip_ws(p);
	sink_byte(s, '[');
	if (p->pos < p->len && p->b[p->pos] == ']') {
		p->pos++;
		sink_byte(s, ']');
		return 0;
	}
	for (;;) {
		if (value_read(p, s, depth) < 0)
			return -1;
		skip_ws(p);
		if (p->pos < p->len && p->b[p->pos] == ',') {
			p->pos++;
			skip_ws(p);
			sink_byte(s, ',');
			continue;
		}
		if (p->pos < p->len && p->b[p->pos] == ']') {
			p->pos++;
			sink_byte(s, ']');
			return 0;
		}
		return -1;
	}
}

/* The value at b[pos] (no whitespace before it), inside containers depth deep: checked,
 * pos past it, and its canonical form written to s. */
static int value_read(struct parser *p, struct sink *s, int depth)
{
	static const char *const words[] = {"true", "false", "null"};
	if (p->pos >= p->len)
		return -1;
	unsigned char c = p->b[p->pos];
	if (c == '{')
		return object_read(p, s, depth + 1);
	if (c == '[')
		return array_read(p, s, depth + 1);
	if (c == '"')
		return str_read(p->b, p->len, &p->pos, s, NULL);
	for (size_t w = 0; w < 3; w++) {
		size_t n = strlen(words[w]);
		if (c == words[w][0]) {
			if (p->len - p->pos < n || memcmp(p->b + p->pos, words[w], n) != 0)
				return -1;
			sink_put(s, words[w], n);
			p->pos += n;
			return 0;
		}
	}
	size_t end = num_end(p->b, p->len, p->pos);
	if (!end)
		return -1;
	sink_put(s, p->b + p->pos, end - p->pos);
	p->pos = end;
	return 0;
}

int canon_json(const char *body, size_t len, struct canon_facts *out)
{
	struct parser p;
	struct sink root;
	memset(out, 0, sizeof(*out));
	if (len > UINT32_MAX - 2)
		return -EINVAL;
	p.b = (const unsigned char *)body;
	p.len = len;
	p.pos = 0;
	p.top = 0;
	memset(&p.facts, 0, sizeof(p.facts));
	sink_reset(&root);
	skip_ws(&p);
	if (p.pos >= len || p.b[p.pos] != '{' || value_read(&p, &root, 0) < 0)
		return -EINVAL;
	skip_ws(&p);
	if (p.pos != len)
		return -EINVAL;
	sink_flush(&root);
	XXH128_hash_t h = XXH3_128bits_digest(&root.st);
	*out = p.facts;
	out->hash[0] = h.low64;
	out->hash[1] = h.high64;
	return 0;
}
