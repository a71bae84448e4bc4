/*
 * fuzz_jsonview.c - libFuzzer target: the strict view of a JSON body against jansson, a
 * reference parser. What the view accepts jansson parses (but for numbers past a double or a
 * long long, and \u0000 in a key, which the grammar allows and jansson refuses); what jansson
 * parses with JSON_REJECT_DUPLICATES the view accepts, unless it passes the view's own bounds
 * (depth, top level keys and their length; and a raw NUL, where jansson stops reading); and the
 * fields the view reads are the ones jansson reads: the model, stream, max_tokens and n when
 * they are integers.
 */
#include "http/jsonview.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t depth_of(const json_t *j)
{
	size_t d = 0, sub;
	const char *k;
	json_t *v;
	size_t i;
	if (json_is_object(j)) {
		json_object_foreach((json_t *)j, k, v)
		{
			sub = depth_of(v);
			d = sub > d ? sub : d;
		}
		return d + 1;
	}
	if (json_is_array(j)) {
		json_array_foreach(j, i, v)
		{
			sub = depth_of(v);
			d = sub > d ? sub : d;
		}
		return d + 1;
	}
	return 0;
}

/* Within the view's own bounds: depth, number and length of the top-level keys. */
static int within_bounds(const json_t *j)
{
	const char *k;
	json_t *v;
	if (depth_of(j) > JSON_VIEW_DEPTH_MAX)
		return 0;
	if (json_is_object(j)) {
		if (json_object_size(j) > JSON_VIEW_KEYS_MAX)
			return 0;
		json_object_foreach((json_t *)j, k, v)
		{
			if (strlen(k) > JSON_VIEW_KEY_MAX)
				return 0;
		}
	}
	return 1;
}

static void check_fields(const struct json_view *v, const char *p, const json_t *doc)
{
	char model[64];
	size_t n = 0;
	const json_t *m = json_is_object(doc) ? json_object_get(doc, "model") : NULL;
	int r = json_view_model(v, p, model, sizeof(model), &n);
	if (r == 1 && (!json_is_string(m) || json_string_length(m) != n ||
		       memcmp(json_string_value(m), model, n) != 0))
		abort(); /* a model jansson does not read */
	if (r != 1 && json_is_string(m) && json_string_length(m) < sizeof(model) - 1 &&
	    !memchr(json_string_value(m), 0, json_string_length(m)))
		abort(); /* a model jansson reads, missed */
	const json_t *s = json_is_object(doc) ? json_object_get(doc, "stream") : NULL;
	if (v->stream != json_is_true(s))
		abort();
	const json_t *t = json_is_object(doc) ? json_object_get(doc, "max_tokens") : NULL;
	const json_t *c =
	    json_is_object(doc) ? json_object_get(doc, "max_completion_tokens") : NULL;
	if (json_is_integer(t) && !c) {
		json_int_t want = json_integer_value(t);
		long got = v->max_tokens;
		if (want >= 0 && want < 0x80000000LL ? got != (long)want
						     : got != JSON_VIEW_TOKENS_BAD)
			abort();
	}
	if (!t && !c && v->max_tokens != JSON_VIEW_TOKENS_NONE)
		abort();
	/* "n" and "best_of" are read as max_tokens and max_completion_tokens are */
	const json_t *k = json_is_object(doc) ? json_object_get(doc, "n") : NULL;
	const json_t *b = json_is_object(doc) ? json_object_get(doc, "best_of") : NULL;
	if (json_is_integer(k) && !b) {
		json_int_t want = json_integer_value(k);
		long got = v->choices;
		if (want >= 0 && want < 0x80000000LL ? got != (long)want
						     : got != JSON_VIEW_TOKENS_BAD)
			abort();
	}
	if (!k && !b && v->choices != JSON_VIEW_TOKENS_NONE)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	struct json_view v;
	const char *why = NULL;
	json_error_t err;
	int ok = json_view_read(&v, p, size, &why) == 0;
	if (!ok && (!why || !*why))
		abort();
	json_t *lenient = json_loadb(p, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
	if (ok && !lenient && !strstr(err.text, "overflow") && !strstr(err.text, "too big") &&
	    !strstr(err.text, "NUL byte in object key"))
		abort(); /* accepted what a reference parser refuses */
	json_decref(lenient);
	json_t *strict =
	    json_loadb(p, size, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &err);
	/* (jansson takes a raw NUL byte for the end of its input: JSON has none) */
	if (strict && within_bounds(strict) && !ok && !memchr(p, 0, size))
		abort(); /* refused valid JSON with no key twice */
	if (strict && ok)
		check_fields(&v, p, strict);
	json_decref(strict);
	return 0;
}
