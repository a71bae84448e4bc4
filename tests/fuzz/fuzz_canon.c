/*
 * fuzz_canon.c - libFuzzer target: the inference cache key on any bytes. It must answer 0 or
 * -EINVAL, the same twice, and agree with jansson (a second, independent strict parser,
 * duplicates refused) on what is JSON, except where jansson is narrower (a number past a
 * double or an int64, a NUL in a key, a raw NUL). On a body both accept: the facts match jansson's
 * reading, and two re-serialisations of jansson's tree that differ in member order,
 * whitespace and escapes (sorted and compact; as written, indented, ASCII only, "\/") get
 * one key.
 */
#include "cache/canon.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Nesting depth (the top value is 1), and the most members open at once along a path. */
static void shape(json_t *j, int depth, size_t open, int *max_depth, size_t *max_open)
{
	if (depth > *max_depth)
		*max_depth = depth;
	if (json_is_object(j)) {
		open += json_object_size(j);
		if (open > *max_open)
			*max_open = open;
		const char *k;
		json_t *v;
		json_object_foreach(j, k, v) shape(v, depth + 1, open, max_depth, max_open);
	} else if (json_is_array(j)) {
		size_t i;
		json_t *v;
		json_array_foreach(j, i, v) shape(v, depth + 1, open, max_depth, max_open);
	}
}

static int near(double a, double b)
{
	return a == b || fabs(a - b) <= 1e-12 * fabs(b) + 1e-300;
}

static void check_facts(json_t *j, const struct canon_facts *f)
{
	json_t *t = json_object_get(j, "temperature"), *n = json_object_get(j, "n");
	json_t *s = json_object_get(j, "stream"), *seed = json_object_get(j, "seed");
	if (f->has_temperature != (t && !json_is_null(t)))
		abort();
	if (t && json_is_number(t) && !near(f->temperature, json_number_value(t)))
		abort();
	/* zero exactly when it is zero to the engine: 1e-310 is not (the cache's question) */
	if (t && json_is_number(t) && (f->temperature == 0) != (json_number_value(t) == 0))
		abort();
	if (t && !json_is_null(t) && !json_is_number(t) && f->temperature != INFINITY)
		abort();
	if (f->has_n != (n && !json_is_null(n)))
		abort();
	if (n && json_is_number(n) && !near(f->n, json_number_value(n)))
		abort();
	if (f->stream != (s && json_is_true(s)))
		abort();
	if (f->has_seed != (seed && !json_is_null(seed)))
		abort();
}

/* The same tree written two ways has one key. */
static void check_rewritten(json_t *j)
{
	char *a = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	char *b = json_dumps(j, JSON_INDENT(1) | JSON_ENSURE_ASCII | JSON_ESCAPE_SLASH |
				    JSON_PRESERVE_ORDER);
	struct canon_facts fa, fb;
	if (!a || !b)
		abort();
	if (canon_json(a, strlen(a), &fa) != 0 || canon_json(b, strlen(b), &fb) != 0)
		abort();
	if (fa.hash[0] != fb.hash[0] || fa.hash[1] != fb.hash[1])
		abort();
	free(a);
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	struct canon_facts f, g;
	int r = canon_json(p, size, &f);
	if (r != 0 && r != -EINVAL)
		abort();
	if (canon_json(p, size, &g) != r || memcmp(&f, &g, sizeof(f)) != 0)
		abort(); /* the same answer twice */
	if (r == 0 && (isnan(f.temperature) || isnan(f.n) || (unsigned)f.stream > 1))
		abort();

	if (memchr(p, 0, size)) {
		/* a raw NUL is JSON nowhere (jansson takes one after a scalar for the end) */
		if (r == 0)
			abort();
		return 0;
	}
	json_error_t err;
	json_t *j = json_loadb(p, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
	if (!j) {
		/* jansson is narrower on numbers and NUL in keys; nothing else may differ */
		if (r == 0 && !strstr(err.text, "overflow") && !strstr(err.text, "too big") &&
		    !strstr(err.text, "NUL byte in object key"))
			abort();
		return 0;
	}
	int depth = 0;
	size_t open = 0;
	shape(j, 1, 0, &depth, &open);
	int fits = json_is_object(j) && depth <= CANON_DEPTH_MAX && open <= CANON_MEMBERS_MAX;
	if ((r == 0) != fits)
		abort();
	if (r == 0) {
		check_facts(j, &f);
		check_rewritten(j);
	}
	json_decref(j);
	return 0;
}
