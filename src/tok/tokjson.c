/*
 * tokjson.c - reading a tokenizer.json (tokjson.h). The file is parsed whole by jansson
 * (duplicate keys refused), then each top-level part is read by its own function: the
 * normalizer, the added tokens (those matched on normalized text are normalized first, as
 * the reference does), pre-tokenizer, model, post-processor, and for a SentencePiece-style
 * file the decoder. Every function checks the keys it knows and refuses one it does not, so
 * that a field a newer file adds cannot change the ids unseen.
 *
 * Which BPE it is follows from the pre-tokenizer: with a ByteLevel step, the vocabulary's
 * strings are decoded from the byte-level alphabet once, here (a string outside the alphabet
 * names a token no byte-level input can reach, so it and the merges that use it are left out,
 * as unreachable), and every byte must have a token; without one, the strings are the text
 * itself and encoding starts from characters (SentencePiece-style: Llama 2, Gemma), where an
 * unknown token, byte fallback (the <0xNN> tokens there are) and fuse_unk take part,
 * and the decoder is read, since detok.c must undo exactly it.
 */
#include "tok/tokjson.h"

#include "tok/bytelevel.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Vocabularies hold up to some 262,000 tokens (Gemma); an id past this names no real one
 * and would only size the tables. */
#define TOKJSON_MAX_ID (1 << 24)

/* The largest tokenizer file read (Gemma 3's is 33 MB). */
#define TOKJSON_MAX_FILE (1L << 30)

static int refuse(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* The value as short JSON text for a message. */
static const char *shown(json_t *v, char *buf, size_t n)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(10));
	snprintf(buf, n, "%.60s%s", s ? s : "?", s && strlen(s) > 60 ? "..." : "");
	free(s);
	return buf;
}

/* 0 when every key of object <o> is one of the NULL-ended <known>; else refuses the first
 * other, as "WHERE.KEY". */
static int keys_known(json_t *o, const char *where, const char *const *known, char *err,
		      size_t errlen)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		size_t i = 0;
		while (known[i] && strcmp(known[i], k))
			i++;
		if (!known[i])
			return refuse(err, errlen, "%s.%s: an option accelnet does not know", where,
				      k);
	}
	return 0;
}

/* 0 when o.key is absent, null, or (with <allow_false>) false, or (with <allow_empty>) "". */
static int must_be_unset(json_t *o, const char *where, const char *key, int allow_false,
			 int allow_empty, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v) || (allow_false && json_is_false(v)) ||
	    (allow_empty && json_is_string(v) && !json_string_length(v)))
		return 0;
	char b[80];
	return refuse(err, errlen, "%s.%s: %s is not supported (only %s)", where, key,
		      shown(v, b, sizeof(b)),
		      allow_false   ? "false"
		      : allow_empty ? "null or \"\""
				    : "null");
}

static const char *type_of(json_t *o)
{
	json_t *ty = json_object_get(o, "type");
	return json_is_string(ty) ? json_string_value(ty) : NULL;
}

/* Room for the added tokens of <arr> as decoding gives them back, taken once before they are
 * read: grown a token at a time, the copies were quadratic (Gemma 3 has 6,415 of them). */
static int named_reserve(struct tok *t, json_t *arr)
{
	size_t i, text = 1;
	json_t *a;
	json_array_foreach(arr, i, a)
	{
		json_t *c = json_object_get(a, "content");
		if (json_is_string(c) && json_string_length(c) > UINT32_MAX - text)
			return -ENOMEM;
		text += json_is_string(c) ? json_string_length(c) : 0;
	}
	t->named = malloc((json_array_size(arr) ? json_array_size(arr) : 1) * sizeof(*t->named));
	t->named_text = malloc(text);
	return t->named && t->named_text ? 0 : -ENOMEM;
}

/* Added token <id> as decoding gives it back: its content as written, special or not, in the
 * room named_reserve() took. */
static void named_add(struct tok *t, json_t *a, uint32_t id, json_t *c)
{
	size_t n = json_string_length(c);
	memcpy(t->named_text + t->named_len, json_string_value(c), n);
	t->named[t->nnamed++] =
	    (struct tok_named){id, (uint32_t)t->named_len, (uint32_t)n,
			       (uint8_t)json_is_true(json_object_get(a, "special")), 0};
	t->named_len += n;
}

static int named_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct tok_named *)a)->id, y = ((const struct tok_named *)b)->id;
	return x < y ? -1 : x > y;
}

static int read_added(json_t *arr, struct tok *t, char *err, size_t errlen)
{
	static const char *const known[] = {"id",     "content",    "single_word", "lstrip",
					    "rstrip", "normalized", "special",	   NULL};
	if (!arr || json_is_null(arr))
		return 0;
	if (!json_is_array(arr))
		return refuse(err, errlen, "added_tokens: not an array");
	size_t i;
	json_t *a;
	struct norm_scratch ns = {0};
	int r = named_reserve(t, arr);
	if (r)
		return r;
	json_array_foreach(arr, i, a)
	{
		char where[48];
		snprintf(where, sizeof(where), "added_tokens[%zu]", i);
		if (!json_is_object(a)) {
			r = refuse(err, errlen, "%s: not an object", where);
			break;
		}
		if ((r = keys_known(a, where, known, err, errlen)))
			break;
		json_t *id = json_object_get(a, "id"), *c = json_object_get(a, "content");
		if (!json_is_integer(id) || json_integer_value(id) < 0 ||
		    json_integer_value(id) > INT32_MAX) {
			r = refuse(err, errlen, "%s.id: not an id", where);
			break;
		}
		if (!json_is_string(c) || !json_string_length(c)) {
			r = refuse(err, errlen, "%s.content: not a non-empty string", where);
			break;
		}
		const char *flags[] = {"single_word", "lstrip", "rstrip"};
		for (size_t f = 0; f < 3 && !r; f++)
			r = must_be_unset(a, where, flags[f], 1, 0, err, errlen);
		if (r)
			break;
		named_add(t, a, (uint32_t)json_integer_value(id), c);
		json_t *nz = json_object_get(a, "normalized");
		struct added *set = json_is_true(nz) ? &t->norm : &t->raw;
		const uint8_t *text = (const uint8_t *)json_string_value(c);
		size_t n = json_string_length(c);
		/* a normalized token is matched on normalized text: as the reference, normalize it
		 */
		if (set == &t->norm && (r = norm_apply(&t->normalizer, &ns, text, n, &text, &n))) {
			if (r == -EILSEQ)
				r = refuse(err, errlen, "%s.content: not UTF-8", where);
			break;
		}
		r = added_add(set, text, n, (uint32_t)json_integer_value(id));
		if (r == -EEXIST)
			r = refuse(err, errlen, "%s.content: \"%s\" is an added token twice", where,
				   json_string_value(c));
		if (r)
			break;
	}
	norm_scratch_free(&ns);
	if (!r && t->nnamed)
		qsort(t->named, t->nnamed, sizeof(*t->named), named_cmp);
	return r;
}

/* A string field of at most NORM_MAX_STR bytes into to[] (*n its length). */
static int short_string(json_t *o, const char *where, const char *key, int nonempty, char *to,
			uint8_t *n, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);
	char b[80];
	if (!json_is_string(v) || json_string_length(v) > NORM_MAX_STR ||
	    (nonempty && !json_string_length(v)))
		return refuse(err, errlen, "%s.%s: %s is not supported (a string of %s%d bytes)",
			      where, key, v ? shown(v, b, sizeof(b)) : "missing",
			      nonempty ? "1 to " : "up to ", NORM_MAX_STR);
	memcpy(to, json_string_value(v), json_string_length(v));
	*n = (uint8_t)json_string_length(v);
	return 0;
}

/* A Replace's {"String": "..."} pattern (a Regex is not supported). */
static int replace_pattern(json_t *o, const char *where, char *to, uint8_t *n, char *err,
			   size_t errlen)
{
	json_t *pat = json_object_get(o, "pattern");
	char b[80], w[120];
	if (!json_is_object(pat) || json_object_size(pat) != 1 || !json_object_get(pat, "String"))
		return refuse(err, errlen,
			      "%s.pattern: %s is not supported (only {\"String\": ...})", where,
			      pat ? shown(pat, b, sizeof(b)) : "missing");
	snprintf(w, sizeof(w), "%s.pattern", where);
	return short_string(pat, w, "String", 1, to, n, err, errlen);
}

static int read_normalizer(json_t *n, const char *where, struct tok *t, char *err, size_t errlen)
{
	if (!n || json_is_null(n))
		return 0;
	const char *ty = json_is_object(n) ? type_of(n) : NULL;
	struct norm *nm = &t->normalizer;
	if (ty && (!strcmp(ty, "NFC") || !strcmp(ty, "Prepend") || !strcmp(ty, "Replace"))) {
		static const char *const nfc[] = {"type", NULL}, *const prepend[] = {
								     "type", "prepend", NULL};
		static const char *const replace[] = {"type", "pattern", "content", NULL};
		int r = keys_known(n, where,
				   !strcmp(ty, "NFC")	    ? nfc
				   : !strcmp(ty, "Prepend") ? prepend
							    : replace,
				   err, errlen);
		if (r)
			return r;
		if (nm->n == NORM_MAX_STEPS)
			return refuse(err, errlen, "%s: more than %d normalizers", where,
				      NORM_MAX_STEPS);
		struct norm_step *st = &nm->step[nm->n];
		memset(st, 0, sizeof(*st));
		if (!strcmp(ty, "NFC")) {
			st->kind = NORM_NFC;
		} else if (!strcmp(ty, "Prepend")) {
			st->kind = NORM_PREPEND;
			r = short_string(n, where, "prepend", 0, st->to, &st->nto, err, errlen);
		} else {
			st->kind = NORM_REPLACE;
			if (!(r = replace_pattern(n, where, st->from, &st->nfrom, err, errlen)))
				r = short_string(n, where, "content", 0, st->to, &st->nto, err,
						 errlen);
		}
		if (!r)
			nm->n++;
		return r;
	}
	if (ty && !strcmp(ty, "Sequence")) {
		static const char *const known[] = {"type", "normalizers", NULL};
		int r = keys_known(n, where, known, err, errlen);
		json_t *list = json_object_get(n, "normalizers"), *e;
		if (r)
			return r;
		if (!json_is_array(list))
			return refuse(err, errlen, "%s.normalizers: not an array", where);
		size_t i;
		json_array_foreach(list, i, e)
		{
			char w[96];
			snprintf(w, sizeof(w), "%s.normalizers[%zu]", where, i);
			if ((r = read_normalizer(e, w, t, err, errlen)))
				return r;
			if (json_is_null(e))
				return refuse(err, errlen, "%s: null", w);
		}
		return 0;
	}
	char b[80];
	return refuse(err, errlen,
		      "%s.type: %s is not supported (NFC, Prepend, Replace, Sequence or null)",
		      where, ty ? shown(json_object_get(n, "type"), b, sizeof(b)) : "missing");
}

static int read_split(json_t *p, const char *where, struct tok *t, char *err, size_t errlen)
{
	static const char *const known[] = {"type", "pattern", "behavior", "invert", NULL};
	int r = keys_known(p, where, known, err, errlen);
	if (r)
		return r;
	char b[80];
	json_t *beh = json_object_get(p, "behavior"), *inv = json_object_get(p, "invert");
	const char *bs = json_is_string(beh) ? json_string_value(beh) : "";
	static const char *const behaviors[] = {[PRETOK_ISOLATED] = "Isolated",
						[PRETOK_REMOVED] = "Removed",
						[PRETOK_MERGED_WITH_PREVIOUS] =
						    "MergedWithPrevious",
						[PRETOK_MERGED_WITH_NEXT] = "MergedWithNext"};
	int behavior = 0;
	while (behavior < 4 && strcmp(bs, behaviors[behavior]))
		behavior++;
	if (behavior == 4)
		return refuse(err, errlen,
			      "%s.behavior: %s is not supported (Isolated, Removed, "
			      "MergedWithPrevious or MergedWithNext)",
			      where, beh ? shown(beh, b, sizeof(b)) : "missing");
	if (inv && !json_is_false(inv))
		return refuse(err, errlen, "%s.invert: %s is not supported (only false)", where,
			      shown(inv, b, sizeof(b)));
	json_t *pat = json_object_get(p, "pattern");
	json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
	if (!json_is_object(pat) || json_object_size(pat) != 1 || !json_is_string(re ? re : str))
		return refuse(err, errlen,
			      "%s.pattern: %s is not one of {\"Regex\": ...} and {\"String\": ...}",
			      where, pat ? shown(pat, b, sizeof(b)) : "missing");
	json_t *s = re ? re : str;
	char msg[320];
	r = pretok_add_split(&t->pre, json_string_value(s), json_string_length(s), !re, behavior,
			     msg, sizeof(msg));
	if (r)
		return refuse(err, errlen, "%s.pattern: %s", where, msg);
	return 0;
}

/* One pre-tokenizer; *bytelevel set once ByteLevel was read, which must come last. */
static int read_pretok(json_t *p, const char *where, struct tok *t, int *bytelevel, char *err,
		       size_t errlen)
{
	char b[80];
	const char *ty = json_is_object(p) ? type_of(p) : NULL;
	if (ty && *bytelevel)
		return refuse(err, errlen,
			      "%s: %s after ByteLevel is not supported (ByteLevel must be last)",
			      where, ty);
	if (ty && !strcmp(ty, "Sequence")) {
		static const char *const known[] = {"type", "pretokenizers", NULL};
		int r = keys_known(p, where, known, err, errlen);
		json_t *list = json_object_get(p, "pretokenizers"), *e;
		if (r)
			return r;
		if (!json_is_array(list))
			return refuse(err, errlen, "%s.pretokenizers: not an array", where);
		size_t i;
		json_array_foreach(list, i, e)
		{
			char w[96];
			snprintf(w, sizeof(w), "%s.pretokenizers[%zu]", where, i);
			if ((r = read_pretok(e, w, t, bytelevel, err, errlen)))
				return r;
		}
		return 0;
	}
	if (ty && !strcmp(ty, "Split"))
		return read_split(p, where, t, err, errlen);
	if (ty && !strcmp(ty, "ByteLevel")) {
		static const char *const known[] = {"type", "add_prefix_space", "trim_offsets",
						    "use_regex", NULL};
		int r = keys_known(p, where, known, err, errlen);
		if (r)
			return r;
		json_t *aps = json_object_get(p, "add_prefix_space");
		if (!json_is_false(aps))
			return refuse(err, errlen,
				      "%s.add_prefix_space: %s is not supported (only false)",
				      where, aps ? shown(aps, b, sizeof(b)) : "missing (true)");
		json_t *ur = json_object_get(p, "use_regex");
		if (ur && !json_is_boolean(ur))
			return refuse(err, errlen, "%s.use_regex: not a boolean", where);
		*bytelevel = 1;
		if (!ur || json_is_true(ur)) {
			char msg[320];
			if (pretok_add_split(&t->pre, pretok_gpt2_pattern,
					     strlen(pretok_gpt2_pattern), 0, 0, msg, sizeof(msg)))
				return refuse(err, errlen, "%s.use_regex: %s", where, msg);
		}
		return 0;
	}
	return refuse(err, errlen, "%s.type: %s is not supported (Sequence, Split or ByteLevel)",
		      where, ty ? shown(json_object_get(p, "type"), b, sizeof(b)) : "missing");
}

/* A Metaspace pre-tokenizer, the whole pre_tokenizer (SentencePiece-style, tok.h). */
static int read_metaspace(json_t *p, const char *where, struct tok *t, char *err, size_t errlen)
{
	static const char *const known[] = {"type", "replacement", "prepend_scheme", "split", NULL};
	char b[80];
	int r = keys_known(p, where, known, err, errlen);
	if (r)
		return r;
	struct norm_step *rs = &t->meta.replace, *ps = &t->meta.prepend;
	memset(rs, 0, sizeof(*rs));
	memset(ps, 0, sizeof(*ps));
	if ((r = short_string(p, where, "replacement", 1, rs->to, &rs->nto, err, errlen)))
		return r;
	rs->kind = NORM_REPLACE;
	rs->from[0] = ' ';
	rs->nfrom = 1;
	ps->kind = NORM_PREPEND;
	memcpy(ps->to, rs->to, rs->nto);
	ps->nto = rs->nto;
	json_t *sc = json_object_get(p, "prepend_scheme"), *sp = json_object_get(p, "split");
	const char *scs = json_is_string(sc) ? json_string_value(sc) : "";
	t->meta.scheme = !strcmp(scs, "always")	 ? TOK_META_ALWAYS
			 : !strcmp(scs, "first") ? TOK_META_FIRST
			 : !strcmp(scs, "never") ? TOK_META_NEVER
						 : -1;
	if (t->meta.scheme < 0)
		return refuse(err, errlen,
			      "%s.prepend_scheme: %s is not supported (always, first or never)",
			      where, sc ? shown(sc, b, sizeof(b)) : "missing");
	if (!json_is_boolean(sp))
		return refuse(err, errlen, "%s.split: %s is not supported (true or false)", where,
			      sp ? shown(sp, b, sizeof(b)) : "missing");
	t->meta.on = 1;
	if (json_is_true(sp)) {
		char msg[320];
		if (pretok_add_split(&t->pre, rs->to, rs->nto, 1, PRETOK_MERGED_WITH_NEXT, msg,
				     sizeof(msg)))
			return refuse(err, errlen, "%s.replacement: %s", where, msg);
	}
	return 0;
}

/* The bytes a vocabulary string stands for, into buf (room for its length): length or -1. */
static long token_bytes(const struct tok *t, const char *s, size_t n, uint8_t *buf)
{
	if (t->chars) {
		memcpy(buf, s, n);
		return (long)n;
	}
	return bytelevel_decode(s, n, buf);
}

static int read_merge(json_t *m, size_t i, struct tok *t, uint8_t *buf, size_t longest, char *err,
		      size_t errlen)
{
	struct vocab *v = &t->vocab;
	const char *a, *b;
	size_t na, nb;
	char sb[80];
	if (json_is_string(m)) {
		a = json_string_value(m);
		const char *sp = memchr(a, ' ', json_string_length(m));
		if (!sp || memchr(sp + 1, ' ', json_string_length(m) - (size_t)(sp + 1 - a)))
			return refuse(err, errlen, "model.merges[%zu]: %s is not two tokens", i,
				      shown(m, sb, sizeof(sb)));
		na = (size_t)(sp - a);
		b = sp + 1;
		nb = json_string_length(m) - na - 1;
	} else if (json_is_array(m) && json_array_size(m) == 2 &&
		   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
		a = json_string_value(json_array_get(m, 0));
		na = json_string_length(json_array_get(m, 0));
		b = json_string_value(json_array_get(m, 1));
		nb = json_string_length(json_array_get(m, 1));
	} else {
		return refuse(err, errlen, "model.merges[%zu]: %s is not two tokens", i,
			      shown(m, sb, sizeof(sb)));
	}
	if (na > longest || nb > longest) /* longer than any token */
		return refuse(err, errlen, "model.merges[%zu]: %s names a token not in model.vocab",
			      i, shown(m, sb, sizeof(sb)));
	long la = token_bytes(t, a, na, buf), lb = la < 0 ? -1 : token_bytes(t, b, nb, buf + la);
	if (la < 0 || lb < 0)
		return 0; /* a token outside the alphabet: unreachable */
	int64_t ia = vocab_find(v, buf, (size_t)la), ib = vocab_find(v, buf + la, (size_t)lb);
	int64_t im = vocab_find(v, buf, (size_t)(la + lb));
	if (ia < 0 || ib < 0 || im < 0)
		return refuse(
		    err, errlen, "model.merges[%zu]: %s names a token not in model.vocab%s", i,
		    shown(m, sb, sizeof(sb)), ia < 0 || ib < 0 ? "" : " (the merged one)");
	return vocab_add_merge(v, (uint32_t)ia, (uint32_t)ib, (uint32_t)i, (uint32_t)im);
}

static int read_model(json_t *m, struct tok *t, char *err, size_t errlen)
{
	static const char *const known[] = {"type",
					    "dropout",
					    "unk_token",
					    "continuing_subword_prefix",
					    "end_of_word_suffix",
					    "fuse_unk",
					    "byte_fallback",
					    "ignore_merges",
					    "vocab",
					    "merges",
					    NULL};
	char b[80];
	if (!json_is_object(m))
		return refuse(err, errlen, "model: missing or not an object");
	const char *ty = type_of(m);
	if (!ty || strcmp(ty, "BPE"))
		return refuse(err, errlen, "model.type: %s is not supported (only BPE)",
			      ty ? shown(json_object_get(m, "type"), b, sizeof(b)) : "missing");
	int r = keys_known(m, "model", known, err, errlen);
	if (r || (r = must_be_unset(m, "model", "dropout", 0, 0, err, errlen)) ||
	    (r = must_be_unset(m, "model", "continuing_subword_prefix", 0, 1, err, errlen)) ||
	    (r = must_be_unset(m, "model", "end_of_word_suffix", 0, 1, err, errlen)))
		return r;
	/* byte-level: every byte has a token, so neither an unknown token nor byte fallback can
	 * play a part; the reference would take them, accelnet keeps to what it tests */
	if (!t->chars && ((r = must_be_unset(m, "model", "unk_token", 0, 0, err, errlen)) ||
			  (r = must_be_unset(m, "model", "byte_fallback", 1, 0, err, errlen))))
		return r;
	json_t *bf = json_object_get(m, "byte_fallback"), *fu = json_object_get(m, "fuse_unk");
	json_t *unk = json_object_get(m, "unk_token");
	if ((bf && !json_is_boolean(bf)) || (fu && !json_is_boolean(fu)))
		return refuse(err, errlen, "model.%s: not a boolean",
			      bf && !json_is_boolean(bf) ? "byte_fallback" : "fuse_unk");
	if (unk && !json_is_null(unk) && !json_is_string(unk))
		return refuse(err, errlen, "model.unk_token: not a string or null");
	t->start.byte_fallback = json_is_true(bf);
	t->start.fuse_unk = json_is_true(fu);
	t->start.unk = -1;
	json_t *im = json_object_get(m, "ignore_merges");
	if (im && !json_is_boolean(im))
		return refuse(err, errlen, "model.ignore_merges: not a boolean");
	t->ignore_merges = json_is_true(im);
	json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
	if (!json_is_object(vocab))
		return refuse(err, errlen, "model.vocab: missing or not an object");
	if (!json_is_array(merges))
		return refuse(err, errlen, "model.merges: missing or not an array");
	size_t bytes = 0, longest = 0;
	int64_t top = -1;
	const char *k;
	json_t *v;
	json_object_foreach(vocab, k, v)
	{
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= TOKJSON_MAX_ID)
			return refuse(err, errlen,
				      "model.vocab[\"%.60s\"]: %s is not an id (0 to %d)", k,
				      shown(v, b, sizeof(b)), TOKJSON_MAX_ID - 1);
		if (json_integer_value(v) > top)
			top = json_integer_value(v);
		size_t n = strlen(k);
		bytes += n;
		if (n > longest)
			longest = n;
	}
	if ((r = vocab_init(&t->vocab, (uint32_t)(top + 1), bytes, json_array_size(merges))))
		return r;
	uint8_t *buf = malloc(2 * longest + 2);
	if (!buf)
		return -ENOMEM;
	json_object_foreach(vocab, k, v)
	{
		long n = token_bytes(t, k, strlen(k), buf);
		if (n == 0) {
			r = refuse(err, errlen, "model.vocab: the empty string is a token");
			goto fail;
		}
		if (n < 0)
			continue; /* outside the alphabet: unreachable */
		r = vocab_add(&t->vocab, buf, (size_t)n, (uint32_t)json_integer_value(v));
		if (r == -EEXIST) {
			r = refuse(err, errlen, "model.vocab[\"%.60s\"]: id %lld is given twice", k,
				   (long long)json_integer_value(v));
			goto fail;
		}
		if (r)
			goto fail;
	}
	for (int c = 0; c < 256 && t->chars; c++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", c);
		int64_t id = vocab_find(&t->vocab, (const uint8_t *)name, 6);
		t->start.byte_tok[c] = (int32_t)id;
	}
	if (t->chars && json_is_string(unk)) {
		t->start.unk = vocab_find(&t->vocab, (const uint8_t *)json_string_value(unk),
					  json_string_length(unk));
		if (t->start.unk < 0) {
			r = refuse(err, errlen, "model.unk_token: %s is not in model.vocab",
				   shown(unk, b, sizeof(b)));
			goto fail;
		}
	}
	for (int c = 0; c < 256 && !t->chars; c++) {
		if (t->vocab.byte_id[c] < 0) {
			char ch[3] = {0};
			bytelevel_encode_byte((uint8_t)c, ch);
			r = refuse(err, errlen,
				   "model.vocab: no token for byte 0x%02x (\"%s\"): not a "
				   "byte-level vocabulary",
				   c, ch);
			goto fail;
		}
	}
	size_t i;
	json_array_foreach(merges, i, v)
	{
		if (i >= INT32_MAX) {
			r = refuse(err, errlen, "model.merges: too many");
			goto fail;
		}
		if ((r = read_merge(v, i, t, buf, longest, err, errlen)))
			goto fail;
	}
	r = 0;
fail:
	free(buf);
	return r;
}

/* The ids of special token <name> of a TemplateProcessing, appended to ids[*n..]. */
static int template_ids(json_t *specials, json_t *name, uint32_t *ids, size_t *n, const char *where,
			char *err, size_t errlen)
{
	char b[80];
	json_t *sp =
	    json_is_string(name) ? json_object_get(specials, json_string_value(name)) : NULL;
	json_t *list = json_object_get(sp, "ids"), *e;
	if (!json_is_array(list))
		return refuse(err, errlen, "%s: special token %s is not in special_tokens", where,
			      name ? shown(name, b, sizeof(b)) : "missing");
	size_t i;
	json_array_foreach(list, i, e)
	{
		if (!json_is_integer(e) || json_integer_value(e) < 0 ||
		    json_integer_value(e) > INT32_MAX)
			return refuse(err, errlen, "%s: special token %s has an id that is not one",
				      where, shown(name, b, sizeof(b)));
		if (*n == TOK_MAX_TEMPLATE)
			return refuse(err, errlen, "%s: more than %d ids around the text", where,
				      TOK_MAX_TEMPLATE);
		ids[(*n)++] = (uint32_t)json_integer_value(e);
	}
	return 0;
}

static int read_template(json_t *p, const char *where, struct tok *t, char *err, size_t errlen)
{
	static const char *const known[] = {"type", "single", "pair", "special_tokens", NULL};
	int r = keys_known(p, where, known, err, errlen);
	if (r)
		return r;
	if (t->nprefix || t->nsuffix)
		return refuse(err, errlen, "%s: a second TemplateProcessing", where);
	json_t *single = json_object_get(p, "single"), *e;
	json_t *specials = json_object_get(p, "special_tokens");
	if (!json_is_array(single))
		return refuse(err, errlen, "%s.single: missing or not an array", where);
	int seen_a = 0;
	size_t i;
	json_array_foreach(single, i, e)
	{
		char w[120];
		snprintf(w, sizeof(w), "%s.single[%zu]", where, i);
		json_t *st = json_object_get(e, "SpecialToken"),
		       *seq = json_object_get(e, "Sequence");
		if (json_is_object(seq) && json_object_size(e) == 1) {
			json_t *id = json_object_get(seq, "id");
			if (seen_a || !json_is_string(id) || strcmp(json_string_value(id), "A"))
				return refuse(err, errlen, "%s: only one Sequence, A, is supported",
					      w);
			seen_a = 1;
		} else if (json_is_object(st) && json_object_size(e) == 1) {
			r = seen_a ? template_ids(specials, json_object_get(st, "id"), t->suffix,
						  &t->nsuffix, w, err, errlen)
				   : template_ids(specials, json_object_get(st, "id"), t->prefix,
						  &t->nprefix, w, err, errlen);
			if (r)
				return r;
		} else {
			return refuse(err, errlen, "%s: not a SpecialToken or Sequence", w);
		}
	}
	if (!seen_a)
		return refuse(err, errlen, "%s.single: no Sequence A", where);
	return 0;
}

static int read_post(json_t *p, const char *where, struct tok *t, char *err, size_t errlen)
{
	char b[80];
	if (!p || json_is_null(p))
		return 0;
	const char *ty = json_is_object(p) ? type_of(p) : NULL;
	if (ty && !strcmp(ty, "ByteLevel")) {
		static const char *const known[] = {"type", "add_prefix_space", "trim_offsets",
						    "use_regex", NULL};
		return keys_known(p, where, known, err, errlen); /* offsets only */
	}
	if (ty && !strcmp(ty, "TemplateProcessing"))
		return read_template(p, where, t, err, errlen);
	if (ty && !strcmp(ty, "Sequence")) {
		static const char *const known[] = {"type", "processors", NULL};
		int r = keys_known(p, where, known, err, errlen);
		json_t *list = json_object_get(p, "processors"), *e;
		if (r)
			return r;
		if (!json_is_array(list))
			return refuse(err, errlen, "%s.processors: not an array", where);
		size_t i;
		json_array_foreach(list, i, e)
		{
			char w[96];
			snprintf(w, sizeof(w), "%s.processors[%zu]", where, i);
			if ((r = read_post(e, w, t, err, errlen)))
				return r;
		}
		return 0;
	}
	return refuse(err, errlen,
		      "%s.type: %s is not supported (ByteLevel, TemplateProcessing, Sequence or "
		      "null)",
		      where, ty ? shown(json_object_get(p, "type"), b, sizeof(b)) : "missing");
}

/*
 * The decoder of a SentencePiece-style file, which detok.c follows: Replace steps of a string
 * by one no longer, ByteFallback, Fuse, and a Strip of leading spaces after Fuse, in that
 * order (a Sequence of them, or one alone). *stage counts how far along that order it is.
 */
static int read_dec_step(json_t *d, const char *where, struct tok *t, int *stage, char *err,
			 size_t errlen)
{
	char b[80];
	const char *ty = json_is_object(d) ? type_of(d) : NULL;
	struct tok_decoder *dec = &t->dec;
	static const char *const order[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
	int at = 0;
	while (ty && at < 4 && strcmp(ty, order[at]))
		at++;
	if (!ty || at == 4)
		return refuse(err, errlen,
			      "%s.type: %s is not supported (Replace, ByteFallback, Fuse, Strip or "
			      "a Sequence of them)",
			      where,
			      ty ? shown(json_object_get(d, "type"), b, sizeof(b)) : "missing");
	if (at < *stage || (at == *stage && at))
		return refuse(err, errlen,
			      "%s: %s here is not supported (Replace, ByteFallback, Fuse, Strip "
			      "in that order, each once but Replace)",
			      where, ty);
	*stage = at;
	static const char *const plain[] = {"type", NULL};
	static const char *const replace[] = {"type", "pattern", "content", NULL};
	static const char *const strip[] = {"type", "content", "start", "stop", NULL};
	int r = keys_known(d, where, at == 0 ? replace : at == 3 ? strip : plain, err, errlen);
	if (r)
		return r;
	if (at == 0) {
		if (dec->nreplace == TOK_MAX_REPLACE)
			return refuse(err, errlen, "%s: more than %d Replace steps", where,
				      TOK_MAX_REPLACE);
		uint8_t nf, nt;
		char from[NORM_MAX_STR], to[NORM_MAX_STR];
		if ((r = replace_pattern(d, where, from, &nf, err, errlen)) ||
		    (r = short_string(d, where, "content", 0, to, &nt, err, errlen)))
			return r;
		if (nt > nf)
			return refuse(err, errlen,
				      "%s.content: longer than the pattern is not supported",
				      where);
		memcpy(dec->replace[dec->nreplace].from, from, nf);
		memcpy(dec->replace[dec->nreplace].to, to, nt);
		dec->replace[dec->nreplace].nfrom = nf;
		dec->replace[dec->nreplace].nto = nt;
		dec->nreplace++;
	} else if (at == 1) {
		dec->byte_fallback = 1;
	} else if (at == 3) {
		json_t *c = json_object_get(d, "content"), *st = json_object_get(d, "start"),
		       *sp = json_object_get(d, "stop");
		if (!json_is_string(c) || strcmp(json_string_value(c), " "))
			return refuse(err, errlen, "%s.content: %s is not supported (only \" \")",
				      where, c ? shown(c, b, sizeof(b)) : "missing");
		if (!json_is_integer(st) || json_integer_value(st) < 0 ||
		    json_integer_value(st) > 64)
			return refuse(err, errlen, "%s.start: %s is not supported (0 to 64)", where,
				      st ? shown(st, b, sizeof(b)) : "missing");
		if (!json_is_integer(sp) || json_integer_value(sp) != 0)
			return refuse(err, errlen, "%s.stop: %s is not supported (only 0)", where,
				      sp ? shown(sp, b, sizeof(b)) : "missing");
		if (*stage != 3 || !t->dec.fused)
			return refuse(err, errlen,
				      "%s: a Strip without Fuse before it is not "
				      "supported",
				      where);
		dec->strip = (unsigned)json_integer_value(st);
	} else {
		dec->fused = 1;
	}
	return 0;
}

static int read_decoder(json_t *d, const char *where, struct tok *t, char *err, size_t errlen)
{
	int stage = 0;
	const char *ty = json_is_object(d) ? type_of(d) : NULL;
	if (!ty || strcmp(ty, "Sequence"))
		return read_dec_step(d, where, t, &stage, err, errlen);
	static const char *const known[] = {"type", "decoders", NULL};
	int r = keys_known(d, where, known, err, errlen);
	json_t *list = json_object_get(d, "decoders"), *e;
	if (r)
		return r;
	if (!json_is_array(list))
		return refuse(err, errlen, "%s.decoders: not an array", where);
	size_t i;
	json_array_foreach(list, i, e)
	{
		char w[64];
		snprintf(w, sizeof(w), "%s.decoders[%zu]", where, i);
		if ((r = read_dec_step(e, w, t, &stage, err, errlen)))
			return r;
	}
	return 0;
}

static int read_all(json_t *root, struct tok *t, char *err, size_t errlen)
{
	static const char *const known[] = {
	    "version",	     "truncation",     "padding", "added_tokens", "normalizer",
	    "pre_tokenizer", "post_processor", "decoder", "model",	  NULL};
	if (!json_is_object(root))
		return refuse(err, errlen, "not a JSON object");
	int r = keys_known(root, "(top)", known, err, errlen);
	if (r || (r = must_be_unset(root, "(top)", "truncation", 0, 0, err, errlen)) ||
	    (r = must_be_unset(root, "(top)", "padding", 0, 0, err, errlen)) ||
	    (r = read_normalizer(json_object_get(root, "normalizer"), "normalizer", t, err,
				 errlen)) ||
	    (r = read_added(json_object_get(root, "added_tokens"), t, err, errlen)))
		return r;
	json_t *pre = json_object_get(root, "pre_tokenizer");
	int bytelevel = 0;
	const char *pty = json_is_object(pre) ? type_of(pre) : NULL;
	if (pty && !strcmp(pty, "Metaspace")) {
		if ((r = read_metaspace(pre, "pre_tokenizer", t, err, errlen)))
			return r;
	} else if (pre && !json_is_null(pre) &&
		   (r = read_pretok(pre, "pre_tokenizer", t, &bytelevel, err, errlen))) {
		return r;
	}
	t->chars = !bytelevel; /* SentencePiece-style: no pre-tokenizer, or Splits only */
	if ((r = read_model(json_object_get(root, "model"), t, err, errlen)) ||
	    (r = read_post(json_object_get(root, "post_processor"), "post_processor", t, err,
			   errlen)))
		return r;
	return t->chars ? read_decoder(json_object_get(root, "decoder"), "decoder", t, err, errlen)
			: 0;
}

/* *t from the parsed file <root> (taken: freed here), <name> standing for it in messages. */
static int load_json(json_t *root, const char *name, struct tok *t, char *err, size_t errlen)
{
	char msg[400];
	int r;
	memset(t, 0, sizeof(*t));
	msg[0] = 0;
	r = read_all(root, t, msg, sizeof(msg));
	json_decref(root);
	if (r) {
		if (r == -ENOMEM && !msg[0])
			snprintf(msg, sizeof(msg), "out of memory");
		snprintf(err, errlen, "%s: %s", name, msg);
		tok_free(t);
		memset(t, 0, sizeof(*t));
	}
	return r;
}

struct json_t *tokjson_read_file(const char *path, size_t flags, int *rc, char *err, size_t errlen)
{
	struct stat st;
	char *text = NULL;
	size_t got = 0;
	json_t *root = NULL;
	json_error_t je;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) < 0)
		goto failed;
	*rc = -EINVAL;
	if (!S_ISREG(st.st_mode) || !st.st_size || st.st_size > TOKJSON_MAX_FILE) {
		snprintf(err, errlen, "%s: %s", path,
			 !S_ISREG(st.st_mode) ? "not a regular file"
			 : !st.st_size	      ? "empty file"
					      : "larger than 1 GiB");
		goto out;
	}
	/* read, not mapped: a file cut short while it loads (a deploy writing it in place) must
	 * not be a SIGBUS */
	if (!(text = malloc((size_t)st.st_size))) {
		errno = ENOMEM;
		goto failed;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto failed;
		if (!n)
			break;
		got += (size_t)n;
	}
	root = json_loadb(text, got, flags, &je);
	if (!root)
		snprintf(err, errlen, "%s:%d:%d: %s", path, je.line, je.column, je.text);
	else
		*rc = 0;
	goto out;
failed:
	*rc = -errno;
	snprintf(err, errlen, "%s: %s", path, strerror(errno));
out:
	free(text);
	if (fd >= 0)
		close(fd);
	return root;
}

int tokjson_load(const char *path, struct tok *t, char *err, size_t errlen)
{
	int r;
	json_t *root = tokjson_read_file(path, JSON_REJECT_DUPLICATES, &r, err, errlen);
	if (!root) {
		memset(t, 0, sizeof(*t));
		return r;
	}
	return load_json(root, path, t, err, errlen);
}

int tokjson_load_buffer(const char *buf, size_t n, const char *name, struct tok *t, char *err,
			size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		memset(t, 0, sizeof(*t));
		snprintf(err, errlen, "%s:%d:%d: %s", name, je.line, je.column, je.text);
		return -EINVAL;
	}
	return load_json(root, name, t, err, errlen);
}
