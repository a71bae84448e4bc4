/*
 * jsonview.c - the strict view of a JSON request body (see jsonview.h).
 *
 * One recursive-descent pass, bounded by JSON_VIEW_DEPTH_MAX, reads every byte once. Strings,
 * most of a prompt's bytes, are skipped sixteen bytes at a time (SSE2; eight elsewhere) while
 * no byte needs a look (a quote, a backslash, a control byte or a non-ASCII one); UTF-8 and
 * escapes are checked where they are. The top-level object's keys are decoded (into a stack buffer)
 * and hashed; a key whose hash was seen before is decoded again beside the earlier one and
 * compared, so a duplicate is found exactly and a collision costs one comparison. Inside "messages"
 * only the keys the proxy reads there are watched for duplicates, by name. Numbers are checked
 * against the grammar; max_tokens is read by hand (no strtod: it follows the locale).
 */
#include "http/jsonview.h"
#include "core/hex.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

struct reader {
	const unsigned char *b;
	size_t i, len;
	unsigned depth;
	const char *why;
};

static int fail(struct reader *r, const char *why)
{
	if (!r->why)
		r->why = why;
	return -1;
}

static void skip_ws(struct reader *r)
{
	while (r->i < r->len && (r->b[r->i] == ' ' || r->b[r->i] == '\t' || r->b[r->i] == '\n' ||
				 r->b[r->i] == '\r'))
		r->i++;
}

/* The four hex digits at b[i..i+4) (within len): their value, or -1. */
static long hex4(const unsigned char *b, size_t i, size_t len)
{
	long v = 0;
	if (i > len || len - i < 4)
		return -1;
	for (size_t k = 0; k < 4; k++) {
		int d = hex_value(b[i + k]);
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/*
 * The index of the first byte at or after b[i] that needs a look -- '"', '\\', < 0x20 or
 * >= 0x80 -- or len. Sixteen bytes a step with SSE2 (every x86-64 has it), eight elsewhere:
 * the has-zero trick flags bytes exactly up to the first that needs a look, and that one is
 * the lowest flag (the words are read little-endian).
 */
static size_t plain_run(const unsigned char *b, size_t i, size_t len)
{
#ifdef __SSE2__
	const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
	const __m128i space = _mm_set1_epi8(0x20);
#define PLAIN_HITS(w)                                                                              \
	_mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(w, quote), _mm_cmpeq_epi8(w, bslash)),            \
		     _mm_cmplt_epi8(w, space))
	/* signed compare: below 0x20, or 0x80 and up (negative); 64 bytes a test, then 16 */
	while (len - i >= 64) {
		const __m128i *q = (const __m128i *)(const void *)(b + i);
		__m128i h0 = PLAIN_HITS(_mm_loadu_si128(q)),
			h1 = PLAIN_HITS(_mm_loadu_si128(q + 1));
		__m128i h2 = PLAIN_HITS(_mm_loadu_si128(q + 2)),
			h3 = PLAIN_HITS(_mm_loadu_si128(q + 3));
		if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(h0, h1), _mm_or_si128(h2, h3))))
			break;
		i += 64;
	}
	while (len - i >= 16) {
		__m128i w = _mm_loadu_si128((const __m128i *)(const void *)(b + i));
		unsigned m = (unsigned)_mm_movemask_epi8(PLAIN_HITS(w));
		if (m)
			return i + (size_t)__builtin_ctz(m);
		i += 16;
	}
#undef PLAIN_HITS
#endif
	while (len - i >= 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		uint64_t q = w ^ (ONES * '"'), s = w ^ (ONES * '\\');
		uint64_t m =
		    (w | ((q - ONES) & ~q) | ((s - ONES) & ~s) | ((w - ONES * 0x20) & ~w)) & HIGHS;
		if (m && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
			return i + (size_t)(__builtin_ctzll(m) >> 3);
		if (m)
			return i;
		i += 8;
	}
	return i;
}

/* The UTF-8 sequence at b[i] (b[i] >= 0x80): its length, or 0 when it is not one (RFC 3629). */
static size_t utf8_len(const unsigned char *b, size_t i, size_t len)
{
	unsigned c = b[i], lo = 0x80, hi = 0xbf;
	size_t n;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		lo = c == 0xe0 ? 0xa0 : 0x80; /* no overlong form */
		hi = c == 0xed ? 0x9f : 0xbf; /* no surrogate */
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf; /* nothing past U+10FFFF */
	} else
		return 0;
	if (len - i < n || b[i + 1] < lo || b[i + 1] > hi)
		return 0;
	for (size_t k = 2; k < n; k++)
		if (b[i + k] < 0x80 || b[i + k] > 0xbf)
			return 0;
	return n;
}

/* The escape at b[i] (its backslash): its length, or 0 when it is not a valid one (a lone
 * surrogate half included). */
static size_t escape_len(const unsigned char *b, size_t i, size_t len)
{
	if (len - i < 2)
		return 0;
	if (strchr("\"\\/bfnrt", b[i + 1]) && b[i + 1])
		return 2;
	if (b[i + 1] != 'u')
		return 0;
	long cp = hex4(b, i + 2, len);
	if (cp < 0 || (cp >= 0xdc00 && cp <= 0xdfff))
		return 0; /* a low half alone */
	if (cp < 0xd800 || cp > 0xdbff)
		return 6;
	if (len - i < 12 || b[i + 6] != '\\' || b[i + 7] != 'u')
		return 0; /* a high half alone */
	long lo = hex4(b, i + 8, len);
	return lo >= 0xdc00 && lo <= 0xdfff ? 12 : 0;
}

/* r->b[r->i] is '"': check the string and step past its closing quote. */
static int scan_string(struct reader *r)
{
	const unsigned char *b = r->b;
	size_t i = r->i + 1, len = r->len;
	for (;;) {
		i = plain_run(b, i, len);
		if (i >= len)
			return fail(r, "the JSON body ends inside a string");
		unsigned c = b[i];
		size_t n = 1;
		if (c == '"') {
			r->i = i + 1;
			return 0;
		}
		if (c < 0x20)
			return fail(r, "a raw control character in a JSON string");
		if (c == '\\' && !(n = escape_len(b, i, len)))
			return fail(r, "a bad escape in a JSON string (a lone surrogate?)");
		if (c >= 0x80 && !(n = utf8_len(b, i, len)))
			return fail(r, "the JSON body is not UTF-8");
		i += n;
	}
}

static int digits(struct reader *r)
{
	size_t start = r->i;
	while (r->i < r->len && r->b[r->i] >= '0' && r->b[r->i] <= '9')
		r->i++;
	return r->i > start ? 0 : -1;
}

/* A number by RFC 8259's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int scan_number(struct reader *r)
{
	static const char bad[] = "a number off the JSON grammar (NaN, Infinity, 01, 1., .5)";
	if (r->i < r->len && r->b[r->i] == '-')
		r->i++;
	if (r->i < r->len && r->b[r->i] == '0')
		r->i++;
	else if (digits(r) < 0)
		return fail(r, bad);
	if (r->i < r->len && r->b[r->i] == '.') {
		r->i++;
		if (digits(r) < 0)
			return fail(r, bad);
	}
	if (r->i < r->len && (r->b[r->i] == 'e' || r->b[r->i] == 'E')) {
		r->i++;
		if (r->i < r->len && (r->b[r->i] == '+' || r->b[r->i] == '-'))
			r->i++;
		if (digits(r) < 0)
			return fail(r, bad);
	}
	return 0;
}

static int scan_literal(struct reader *r, const char *word)
{
	size_t n = strlen(word);
	if (r->len - r->i < n || memcmp(r->b + r->i, word, n) != 0)
		return fail(r, "not JSON (a bare word: NaN, Infinity?)");
	r->i += n;
	return 0;
}

static int scan_value(struct reader *r);

/*
 * After the opening '{' or '[' (or a member): the next member follows (1), the container
 * ends at <close> (0), or -1.
 */
static int next_member(struct reader *r, char close, int first)
{
	skip_ws(r);
	if (r->i >= r->len)
		return fail(r, "the JSON body is cut short");
	if (r->b[r->i] == close) {
		r->i++;
		return 0;
	}
	if (!first) {
		if (r->b[r->i] != ',')
			return fail(r, "a missing comma in the JSON body");
		r->i++;
		skip_ws(r);
		if (r->i < r->len && r->b[r->i] == close)
			return fail(r, "a trailing comma in the JSON body");
	}
	return 1;
}

static int enter(struct reader *r)
{
	if (++r->depth > JSON_VIEW_DEPTH_MAX)
		return fail(r, "the JSON body is nested too deep");
	r->i++;
	return 0;
}

/* A key: its string, the ':' and the whitespace up to its value. Sets [*ks, *ke). */
static int scan_key(struct reader *r, size_t *ks, size_t *ke)
{
	if (r->i >= r->len || r->b[r->i] != '"')
		return fail(r, "a JSON object key is not a string");
	*ks = r->i;
	if (scan_string(r) < 0)
		return -1;
	*ke = r->i;
	skip_ws(r);
	if (r->i >= r->len || r->b[r->i] != ':')
		return fail(r, "a missing ':' in the JSON body");
	r->i++;
	skip_ws(r);
	return 0;
}

/*
 * An object whose keys named in watch[0..nwatch) may each come once; <each> (may be NULL) is
 * called on the value of such a key with its index, instead of scan_value.
 */
typedef int watch_fn(struct reader *r, unsigned which);

static int scan_object_watched(struct reader *r, const char *const *watch, unsigned nwatch,
			       watch_fn *each)
{
	unsigned seen = 0;
	if (enter(r) < 0)
		return -1;
	for (int first = 1;; first = 0) {
		int m = next_member(r, '}', first);
		if (m <= 0) {
			r->depth--;
			return m;
		}
		size_t ks, ke;
		if (scan_key(r, &ks, &ke) < 0)
			return -1;
		unsigned k = 0;
		while (k < nwatch && !json_key_is((const char *)r->b, ks, ke, watch[k]))
			k++;
		if (k < nwatch && (seen & 1u << k))
			return fail(r, "a message of the JSON body has a key twice");
		seen |= k < nwatch ? 1u << k : 0;
		if (k < nwatch && each ? each(r, k) : scan_value(r))
			return -1;
	}
}

static int scan_array(struct reader *r, int (*element)(struct reader *r))
{
	if (enter(r) < 0)
		return -1;
	for (int first = 1;; first = 0) {
		int m = next_member(r, ']', first);
		if (m <= 0) {
			r->depth--;
			return m;
		}
		if (element(r) < 0)
			return -1;
	}
}

static int scan_value(struct reader *r)
{
	if (r->i >= r->len)
		return fail(r, "the JSON body is cut short");
	switch (r->b[r->i]) {
	case '{':
		return scan_object_watched(r, NULL, 0, NULL);
	case '[':
		return scan_array(r, scan_value);
	case '"':
		return scan_string(r);
	case 't':
		return scan_literal(r, "true");
	case 'f':
		return scan_literal(r, "false");
	case 'n':
		return scan_literal(r, "null");
	default:
		if (r->b[r->i] == '-' || (r->b[r->i] >= '0' && r->b[r->i] <= '9'))
			return scan_number(r);
		return fail(r, "not JSON (NaN, Infinity or a byte no JSON value starts with)");
	}
}

/* --- messages: the keys the prompt's block hashes read come once ----------------------- */

static const char *const part_keys[] = {"text", "type"};
static const char *const message_keys[] = {"role", "content"};

static int scan_part(struct reader *r)
{
	if (r->i < r->len && r->b[r->i] == '{')
		return scan_object_watched(r, part_keys, 2, NULL);
	return scan_value(r);
}

static int message_value(struct reader *r, unsigned which)
{
	if (which == 1 && r->i < r->len && r->b[r->i] == '[')
		return scan_array(r, scan_part);
	return scan_value(r);
}

static int scan_message(struct reader *r)
{
	if (r->i < r->len && r->b[r->i] == '{')
		return scan_object_watched(r, message_keys, 2, message_value);
	return scan_value(r);
}

/* --- the top level ---------------------------------------------------------------------- */

/*
 * Decode the valid JSON string body[ks..ke) (quotes included) into out[0..cap): its length,
 * or -1 when it does not fit. NULs are kept.
 */
static long string_decode(const unsigned char *b, size_t ks, size_t ke, char *out, size_t cap)
{
	size_t n = 0;
	for (size_t i = ks + 1; i + 1 < ke;) {
		unsigned long cp;
		if (b[i] != '\\') {
			if (n >= cap)
				return -1;
			out[n++] = (char)b[i++];
			continue;
		}
		static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
		const char *e = b[i + 1] != 'u' ? strchr(from, b[i + 1]) : NULL;
		if (e) {
			if (n >= cap)
				return -1;
			out[n++] = to[e - from];
			i += 2;
			continue;
		}
		cp = (unsigned long)hex4(b, i + 2, ke);
		i += 6;
		if (cp >= 0xd800 && cp <= 0xdbff) { /* valid: its low half follows */
			cp = 0x10000 + ((cp - 0xd800) << 10) +
			     ((unsigned long)hex4(b, i + 2, ke) - 0xdc00);
			i += 6;
		}
		unsigned char u[4];
		size_t k;
		if (cp < 0x80) {
			u[0] = (unsigned char)cp;
			k = 1;
		} else if (cp < 0x800) {
			u[0] = (unsigned char)(0xc0 | cp >> 6);
			u[1] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 2;
		} else if (cp < 0x10000) {
			u[0] = (unsigned char)(0xe0 | cp >> 12);
			u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
			u[2] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 3;
		} else {
			u[0] = (unsigned char)(0xf0 | cp >> 18);
			u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
			u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
			u[3] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 4;
		}
		if (n + k > cap)
			return -1;
		memcpy(out + n, u, k);
		n += k;
	}
	return (long)n;
}

int json_key_is(const char *body, size_t ks, size_t ke, const char *name)
{
	size_t n = strlen(name);
	const unsigned char *b = (const unsigned char *)body;
	if (!memchr(b + ks, '\\', ke - ks))
		return ke - ks == n + 2 && memcmp(b + ks + 1, name, n) == 0;
	char out[32];
	return n < sizeof(out) && string_decode(b, ks, ke, out, sizeof(out)) == (long)n &&
	       memcmp(out, name, n) == 0;
}

/*
 * A whole number below 2^31 written as the JSON number b[s..e) (valid): its value, or
 * JSON_VIEW_TOKENS_BAD. 1.0 and 1e3 are whole (pydantic takes them for an int); 1.5, -1,
 * 1e999 are not.
 */
static long whole_number(const unsigned char *b, size_t s, size_t e)
{
	char sig[24]; /* the significant digits, leading zeros dropped */
	size_t n = 0, i = s;
	long exp10 = 0;
	int neg = b[i] == '-';
	i += (size_t)neg;
	for (; i < e && b[i] >= '0' && b[i] <= '9'; i++) {
		if (n == 0 && b[i] == '0')
			continue;
		if (n == sizeof(sig))
			exp10++; /* past what can be below 2^31: only zeros may follow */
		else
			sig[n++] = (char)b[i];
	}
	if (i < e && b[i] == '.')
		for (i++; i < e && b[i] >= '0' && b[i] <= '9'; i++) {
			if (n == 0 && b[i] == '0') {
				exp10--;
				continue;
			}
			if (n == sizeof(sig))
				return JSON_VIEW_TOKENS_BAD;
			sig[n++] = (char)b[i];
			exp10--;
		}
	if (i < e) { /* [eE][+-]?digits */
		int eneg = b[++i] == '-';
		long x = 0;
		if (b[i] == '+' || b[i] == '-')
			i++;
		for (; i < e; i++)
			x = x < 100000 ? x * 10 + (b[i] - '0') : x;
		exp10 += eneg ? -x : x;
	}
	while (n && sig[n - 1] == '0') {
		n--;
		exp10++;
	}
	if (n == 0)
		return 0; /* 0, -0, 0.0, 0e5 */
	if (neg || exp10 < 0 || (long)n + exp10 > 10)
		return JSON_VIEW_TOKENS_BAD;
	uint64_t v = 0;
	for (size_t k = 0; k < n; k++)
		v = v * 10 + (uint64_t)(sig[k] - '0');
	for (long k = 0; k < exp10; k++)
		v *= 10;
	return v < 0x80000000ull ? (long)v : JSON_VIEW_TOKENS_BAD;
}

enum top_key {
	K_OTHER,
	K_MODEL,
	K_MAX_TOKENS,
	K_MAX_COMPLETION,
	K_N,
	K_BEST_OF,
	K_STREAM,
	K_PROMPT,
	K_MESSAGES,
	K_PREV_RESPONSE,
	K_CACHE_SALT
};

static enum top_key top_key_of(const char *k, long n)
{
	static const struct {
		const char *name;
		enum top_key key;
	} known[] = {
	    {"model", K_MODEL},
	    {"max_tokens", K_MAX_TOKENS},
	    {"max_completion_tokens", K_MAX_COMPLETION},
	    {"n", K_N},
	    {"best_of", K_BEST_OF},
	    {"stream", K_STREAM},
	    {"prompt", K_PROMPT},
	    {"messages", K_MESSAGES},
	    {"previous_response_id", K_PREV_RESPONSE},
	    {"cache_salt", K_CACHE_SALT},
	};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if ((size_t)n == strlen(known[i].name) && memcmp(k, known[i].name, (size_t)n) == 0)
			return known[i].key;
	return K_OTHER;
}

/* max_tokens or max_completion_tokens (n or best_of) at b[vs..ve): fold it into *into. */
static void note_whole(long *into, const unsigned char *b, size_t vs, size_t ve)
{
	long n;
	if (b[vs] == 'n')
		return; /* null: absent */
	n = b[vs] == '-' || (b[vs] >= '0' && b[vs] <= '9') ? whole_number(b, vs, ve)
							   : JSON_VIEW_TOKENS_BAD;
	if (n == JSON_VIEW_TOKENS_BAD || *into == JSON_VIEW_TOKENS_BAD)
		*into = JSON_VIEW_TOKENS_BAD;
	else if (n > *into)
		*into = n;
}

struct seen_key {
	uint64_t hash;
	uint32_t ks, ke;
};

static int scan_top(struct reader *r, struct json_view *v)
{
	struct seen_key seen[JSON_VIEW_KEYS_MAX];
	unsigned nseen = 0;
	char key[JSON_VIEW_KEY_MAX], other[JSON_VIEW_KEY_MAX];
	if (enter(r) < 0)
		return -1;
	for (int first = 1;; first = 0) {
		int m = next_member(r, '}', first);
		if (m <= 0) {
			r->depth--;
			return m;
		}
		size_t ks, ke;
		if (scan_key(r, &ks, &ke) < 0)
			return -1;
		long n = string_decode(r->b, ks, ke, key, sizeof(key));
		if (n < 0)
			return fail(r, "a top-level key of the JSON body is too long");
		if (nseen == JSON_VIEW_KEYS_MAX)
			return fail(r, "the JSON body has too many top-level keys");
		uint64_t h = XXH3_64bits(key, (size_t)n);
		for (unsigned k = 0; k < nseen; k++)
			if (seen[k].hash == h &&
			    string_decode(r->b, seen[k].ks, seen[k].ke, other, sizeof(other)) ==
				n &&
			    memcmp(key, other, (size_t)n) == 0)
				return fail(r, "the JSON body has a top-level key twice");
		seen[nseen++] = (struct seen_key){h, (uint32_t)ks, (uint32_t)ke};
		enum top_key which = top_key_of(key, n);
		size_t vs = r->i;
		int rc = which == K_MESSAGES && vs < r->len && r->b[vs] == '['
			     ? scan_array(r, scan_message)
			     : scan_value(r);
		if (rc < 0)
			return -1;
		char first_byte = (char)r->b[vs];
		struct json_span span = {(uint32_t)vs, (uint32_t)r->i};
		switch (which) {
		case K_MODEL:
			if (first_byte == '"')
				v->model = span;
			break;
		case K_PREV_RESPONSE:
			if (first_byte == '"')
				v->prev_response = span;
			break;
		case K_CACHE_SALT:
			if (first_byte == '"')
				v->cache_salt = span;
			break;
		case K_MAX_TOKENS:
		case K_MAX_COMPLETION:
			note_whole(&v->max_tokens, r->b, vs, r->i);
			break;
		case K_N:
		case K_BEST_OF:
			note_whole(&v->choices, r->b, vs, r->i);
			break;
		case K_STREAM:
			v->stream = first_byte == 't';
			break;
		case K_PROMPT:
		case K_MESSAGES:
			if (!v->prompt.e &&
			    (first_byte == '[' || (which == K_PROMPT && first_byte == '"'))) {
				v->prompt = span;
				v->messages = which == K_MESSAGES;
			}
			break;
		case K_OTHER:
			break;
		}
	}
}

int json_view_read(struct json_view *v, const char *body, size_t len, const char **why)
{
	struct reader r = {(const unsigned char *)body, 0, len, 0, NULL};
	memset(v, 0, sizeof(*v));
	v->max_tokens = v->choices = JSON_VIEW_TOKENS_NONE;
	if (len > UINT32_MAX) {
		*why = "the JSON body is too large";
		return -EINVAL;
	}
	skip_ws(&r);
	int rc = r.i < len && r.b[r.i] == '{' ? scan_top(&r, v) : scan_value(&r);
	if (rc == 0) {
		skip_ws(&r);
		if (r.i != len)
			rc = fail(&r, "more after the JSON value of the body");
	}
	if (rc < 0) {
		memset(v, 0, sizeof(*v));
		v->max_tokens = v->choices = JSON_VIEW_TOKENS_NONE;
		*why = r.why ? r.why : "not JSON";
		return -EINVAL;
	}
	return 0;
}

int json_view_model(const struct json_view *v, const char *body, char *out, size_t cap,
		    size_t *outlen)
{
	if (!v->model.e || cap == 0)
		return -1;
	long n = string_decode((const unsigned char *)body, v->model.s, v->model.e, out, cap - 1);
	if (n < 0 || memchr(out, '\0', (size_t)n))
		return -1;
	out[n] = '\0';
	*outlen = (size_t)n;
	return 1;
}
