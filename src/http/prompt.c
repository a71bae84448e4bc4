/*
 * prompt.c - the affinity key of an OpenAI-style JSON request body (see prompt.h).
 *
 * The scanner walks only the top level of the JSON object: keys are compared decoded
 * (json_key_is: "m\u0065ssages" is "messages", as the backend reads it), other values are
 * skipped with string-aware bracket counting, so a "prompt" inside another field's value is
 * never taken for the prompt. It does not decode the value: the raw bytes are hashed, and
 * they are the same for the same prompt. It does not validate: the proxy calls it on a body
 * its strict view (jsonview.h) accepted, where each key it looks for comes once, or on the
 * start of a body too long to hold, for an affinity key, a hint that decides nothing else.
 * The other top-level fields (model, max_tokens, stream) are read by the view alone.
 */
#include "http/prompt.h"
#include "http/jsonview.h"

#include <string.h>
#include <xxhash.h>

enum { MORE = 0, BAD = -1 };

static size_t skip_ws(const char *b, size_t i, size_t len)
{
	while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
		i++;
	return i;
}

/*
 * b[i] is '"': the index just past the closing quote, or len when it is not in yet. The
 * quotes are found with memchr (prompts run to tens of KiB); a quote after an odd run of
 * backslashes is escaped.
 */
static size_t string_end(const char *b, size_t i, size_t len)
{
	size_t start = i + 1;
	for (i = start; i < len;) {
		const char *q = memchr(b + i, '"', len - i);
		if (!q)
			return len;
		size_t at = (size_t)(q - b), bs = 0;
		while (at - bs > start && b[at - bs - 1] == '\\')
			bs++;
		if (!(bs & 1))
			return at + 1;
		i = at + 1;
	}
	return len;
}

/*
 * The index just past the value starting at b[i], or len when it is not all in yet.
 * *bad is set for a byte no JSON value starts with.
 */
static size_t value_end(const char *b, size_t i, size_t len, int *bad)
{
	if (b[i] == '"')
		return string_end(b, i, len);
	if (b[i] == '{' || b[i] == '[') {
		unsigned depth = 0;
		while (i < len) {
			char ch = b[i];
			if (ch == '"') {
				i = string_end(b, i, len);
				continue;
			}
			if (ch == '{' || ch == '[')
				depth++;
			else if ((ch == '}' || ch == ']') && --depth == 0)
				return i + 1;
			i++;
		}
		return len;
	}
	if (!strchr("-0123456789tfn", b[i])) {
		*bad = 1;
		return len;
	}
	while (i < len && !strchr(",}] \t\r\n", b[i]))
		i++;
	return i;
}

/* Keys are compared decoded, as the view (jsonview.c) and the backend read them. */
static int key_is(const char *b, size_t start, size_t end, const char *name)
{
	return json_key_is(b, start, end, name);
}

/* Does the top-level key buf[ks..ke) (quotes included), with a value starting <first>, count? */
typedef int field_pred(const char *buf, size_t ks, size_t ke, char first);

/*
 * Find the first top-level field of the JSON object in buf[0..len) that <want> accepts.
 * 1: its value is buf[*vs..*ve) (*ve == len when it may go on; with ve NULL, only its start
 * is found and the value is not scanned); 0: more bytes needed;
 * -1: not there, or not a JSON object.
 */
static int top_field(const char *buf, size_t len, int complete, field_pred *want, size_t *vs,
		     size_t *ve)
{
	int result = complete ? BAD : MORE; /* what running out of bytes means */
	size_t i = skip_ws(buf, 0, len);
	if (i == len)
		return result;
	if (buf[i] != '{')
		return BAD;
	i++;
	for (;;) {
		i = skip_ws(buf, i, len);
		if (i == len)
			return result;
		if (buf[i] == '}')
			return BAD; /* the end of the object, and no such field */
		if (buf[i] != '"')
			return BAD;
		size_t kstart = i, kend = string_end(buf, i, len);
		if (kend == len)
			return result;
		i = skip_ws(buf, kend, len);
		if (i == len)
			return result;
		if (buf[i] != ':')
			return BAD;
		i = skip_ws(buf, i + 1, len);
		if (i == len)
			return result;
		if (!ve && want(buf, kstart, kend, buf[i])) {
			*vs = i; /* where it ends is not asked: not scanned for */
			return 1;
		}
		int bad = 0;
		size_t vend = value_end(buf, i, len, &bad);
		if (bad)
			return BAD;
		if (want(buf, kstart, kend, buf[i])) {
			*vs = i;
			*ve = vend;
			return 1;
		}
		if (vend == len)
			return result;
		i = skip_ws(buf, vend, len);
		if (i == len)
			return result;
		if (buf[i] == ',')
			i++;
		else if (buf[i] != '}')
			return BAD;
	}
}

static int is_prompt(const char *buf, size_t ks, size_t ke, char first)
{
	return (key_is(buf, ks, ke, "prompt") && (first == '"' || first == '[')) ||
	       (key_is(buf, ks, ke, "messages") && first == '[');
}

int http_prompt_key(const char *buf, size_t len, int complete, size_t prefix_bytes, uint64_t *key)
{
	size_t vs, ve;
	int r = top_field(buf, len, complete, is_prompt, &vs, &ve);
	if (r != 1)
		return r;
	size_t have = ve - vs;
	if (have < prefix_bytes && ve == len && !complete)
		return MORE; /* the value goes on: wait for the prefix */
	*key = XXH3_64bits(buf + vs, have < prefix_bytes ? have : prefix_bytes);
	return 1;
}

/* --- the prompt text as a chain of block hashes ----------------------------------------- */

struct blocker {
	uint64_t *hash;
	size_t max, n, block;
	size_t fill; /* bytes waiting in stage for a whole block */
	size_t text; /* bytes of prompt text seen */
	char stage[HTTP_PROMPT_BLOCK_MAX];
};

/* Close a whole block: its hash chains the one before, so it names the whole prefix. (The
 * block is hashed unseeded and the chain is a seeded hash of that: XXH3 with a seed derives
 * a new secret for every input over 240 bytes, which would cost more than the block.) */
static void blocker_close(struct blocker *k, const char *p)
{
	uint64_t seed = k->n ? k->hash[k->n - 1] : HTTP_PROMPT_CHAIN_SEED;
	uint64_t own = XXH3_64bits(p, k->block);
	k->hash[k->n++] = XXH3_64bits_withSeed(&own, sizeof(own), seed);
}

/* Add text; 1 once <max> blocks are made (nothing more is needed), else 0. */
static int blocker_feed(struct blocker *k, const char *p, size_t len)
{
	k->text += len;
	while (len && k->n < k->max) {
		if (!k->fill && len >= k->block) { /* a whole block in place: no copy */
			blocker_close(k, p);
			p += k->block;
			len -= k->block;
			continue;
		}
		size_t take = k->block - k->fill < len ? k->block - k->fill : len;
		memcpy(k->stage + k->fill, p, take);
		k->fill += take;
		p += take;
		len -= take;
		if (k->fill == k->block) {
			blocker_close(k, k->stage);
			k->fill = 0;
		}
	}
	return k->n == k->max;
}

/* The raw bytes of the string at b[vs..ve) without its quotes (cut short at the end). */
static int blocker_string(struct blocker *k, const char *b, size_t vs, size_t ve, size_t len)
{
	size_t end = ve == len && (ve - vs < 2 || b[ve - 1] != '"') ? len : ve - 1;
	return blocker_feed(k, b + vs + 1, end > vs + 1 ? end - (vs + 1) : 0);
}

/* Feed a value: a string's bytes, anything else's raw JSON; then <sep>. */
static int blocker_value(struct blocker *k, const char *b, size_t vs, size_t ve, size_t len,
			 char sep)
{
	int full =
	    b[vs] == '"' ? blocker_string(k, b, vs, ve, len) : blocker_feed(k, b + vs, ve - vs);
	return full || blocker_feed(k, &sep, 1);
}

/*
 * Call <each> on every element of the JSON array at b[vs..ve) until it answers nonzero;
 * <each> sets where its element ends. 0 when every element was seen (or the array ends
 * early), else <each>'s answer.
 */
typedef int element_fn(struct blocker *k, const char *b, size_t es, size_t len, size_t *ee);

static int array_each(struct blocker *k, const char *b, size_t vs, size_t ve, element_fn *each)
{
	size_t i = vs + 1;
	for (;;) {
		i = skip_ws(b, i, ve);
		if (i >= ve || b[i] == ']')
			return 0;
		size_t ee = ve;
		int r = each(k, b, i, ve, &ee);
		if (r || ee >= ve)
			return r;
		i = skip_ws(b, ee, ve);
		if (i >= ve || b[i] != ',')
			return 0;
		i++;
	}
}

static int is_text(const char *buf, size_t ks, size_t ke, char first)
{
	return key_is(buf, ks, ke, "text") && first == '"';
}

/* A content part: its text, or (an image, audio) the whole part, so two images differ. */
static int part_feed(struct blocker *k, const char *b, size_t es, size_t len, size_t *ee)
{
	int bad = 0;
	size_t vs, ve;
	*ee = value_end(b, es, len, &bad);
	if (bad)
		return 0;
	if (b[es] == '{' && top_field(b + es, *ee - es, 1, is_text, &vs, &ve) == 1)
		return blocker_value(k, b + es, vs, ve, *ee - es, '\x1f');
	return blocker_value(k, b, es, *ee, len, '\x1f');
}

/*
 * Walk the JSON object at b[i] once, noting where its "role" (a string) and "content" (a
 * string or a list) values lie ([0, 0): absent). The index just past the object, or len when
 * it is cut short or malformed.
 */
static size_t message_scan(const char *b, size_t i, size_t len, size_t *rs, size_t *re, size_t *cs,
			   size_t *ce)
{
	*rs = *re = *cs = *ce = 0;
	for (i++;;) {
		i = skip_ws(b, i, len);
		if (i >= len)
			return len;
		if (b[i] == '}')
			return i + 1;
		if (b[i] == ',') {
			i++;
			continue;
		}
		if (b[i] != '"')
			return len;
		size_t ks = i, ke = string_end(b, i, len);
		i = skip_ws(b, ke, len);
		if (i >= len || b[i] != ':')
			return len;
		i = skip_ws(b, i + 1, len);
		if (i >= len)
			return len;
		int bad = 0;
		size_t ve = value_end(b, i, len, &bad);
		if (bad)
			return len;
		if (key_is(b, ks, ke, "role") && b[i] == '"') {
			*rs = i;
			*re = ve;
		} else if (key_is(b, ks, ke, "content") && (b[i] == '"' || b[i] == '[')) {
			*cs = i;
			*ce = ve;
		}
		i = ve;
	}
}

/* One message: its role, then its content (a string or a list of parts), in that order
 * whatever order the object gives them. */
static int message_feed(struct blocker *k, const char *b, size_t es, size_t len, size_t *ee)
{
	size_t rs, re, cs, ce;
	if (b[es] != '{') {
		int bad = 0;
		*ee = value_end(b, es, len, &bad);
		return bad ? 0 : blocker_value(k, b, es, *ee, len, '\x1d');
	}
	*ee = message_scan(b, es, len, &rs, &re, &cs, &ce);
	if (re && blocker_value(k, b, rs, re, len, '\x1e'))
		return 1;
	if (ce) {
		int full = b[cs] == '"' ? blocker_string(k, b, cs, ce, len)
					: array_each(k, b, cs, ce, part_feed);
		if (full)
			return 1;
	}
	return blocker_feed(k, "\x1d", 1);
}

/* An element of a "prompt" list: a string's bytes, a token id's digits. */
static int prompt_element_feed(struct blocker *k, const char *b, size_t es, size_t len, size_t *ee)
{
	int bad = 0;
	*ee = value_end(b, es, len, &bad);
	return bad ? 0 : blocker_value(k, b, es, *ee, len, '\x1f');
}

long http_prompt_blocks(const char *buf, size_t len, size_t block_bytes, uint64_t *hash, size_t max,
			size_t *text_bytes)
{
	size_t vs, ve;
	if (block_bytes < HTTP_PROMPT_BLOCK_MIN || block_bytes > HTTP_PROMPT_BLOCK_MAX)
		return -1;
	/* the value is read once, by the walk below, up to the end of the body at most */
	if (top_field(buf, len, 1, is_prompt, &vs, NULL) != 1)
		return -1;
	ve = len;
	struct blocker k;
	k.hash = hash;
	k.max = max;
	k.n = k.fill = k.text = 0;
	k.block = block_bytes;
	if (buf[vs] == '"')
		blocker_string(&k, buf, vs, string_end(buf, vs, len), len);
	else {
		/* "prompt": [...] or "messages": [...]: told apart by what the elements are */
		size_t i = skip_ws(buf, vs + 1, ve);
		int messages = i < ve && buf[i] == '{';
		array_each(&k, buf, vs, ve, messages ? message_feed : prompt_element_feed);
	}
	if (text_bytes)
		*text_bytes = k.text;
	return (long)k.n;
}

#define SCOPE_MODEL_SEED 0x6d6f64656cu /* "model" */
#define SCOPE_SALT_SEED 0x73616c74u    /* "salt" */

uint64_t http_prompt_scope(const char *model, size_t model_len, const char *salt, size_t salt_len)
{
	if (!model_len && !salt_len)
		return 0;
	uint64_t m = XXH3_64bits_withSeed(model, model_len, SCOPE_MODEL_SEED);
	uint64_t scope = XXH3_64bits_withSeed(salt, salt_len, m ^ SCOPE_SALT_SEED);
	return scope ? scope : 1;
}

void http_prompt_scope_blocks(uint64_t *hash, size_t n, uint64_t scope)
{
	for (size_t i = 0; scope && i < n; i++)
		hash[i] ^= scope;
}
