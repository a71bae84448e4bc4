/*
 * jsonview.h - one strict reading of a JSON request body: the top-level fields the proxy acts
 * on (model, max_tokens, n, stream, the prompt, cache_salt), found in one pass that validates the
 * whole body.
 *
 * The proxy and the backend must read a body the same way, or a route, a token reservation or
 * a cache entry is chosen for a request the backend serves differently. Backends read JSON
 * leniently (Python's json: the last of two equal keys wins, NaN and Infinity accepted, a lone
 * surrogate escape kept), so the only safe reading is one that leaves nothing to choose:
 * json_view_read() accepts RFC 8259 JSON only, and refuses what parsers read differently:
 *
 *   - a key twice in the top-level object (compared decoded: "mod\u0065l" is "model"), or
 *     "role"/"content" twice in a message of "messages", "text"/"type" twice in a content part;
 *   - NaN, Infinity, -Infinity, or any number off the grammar (01, 1., .5, +1);
 *   - a lone surrogate escape (\uD800 without its low half, or a low half alone);
 *   - bytes that are not UTF-8 (overlong forms, surrogates, past U+10FFFF), raw control bytes
 *     in a string;
 *   - nesting deeper than JSON_VIEW_DEPTH_MAX, more than JSON_VIEW_KEYS_MAX top-level keys, a
 *     top-level key longer than JSON_VIEW_KEY_MAX bytes decoded;
 *   - anything but whitespace after the value, or a body cut short.
 *
 * A valid body that is not an object (a list, a string) names none of the fields. The view
 * holds offsets, not pointers: the body may move between reads (buffers grow), and the view is
 * read against the same bytes at their new place. Nothing is allocated.
 */
#ifndef ACCELNET_HTTP_JSONVIEW_H
#define ACCELNET_HTTP_JSONVIEW_H

#include <stddef.h>
#include <stdint.h>

#define JSON_VIEW_DEPTH_MAX 64
#define JSON_VIEW_KEYS_MAX 256
#define JSON_VIEW_KEY_MAX 255

/* max_tokens when the body names none; when it names one that is not a whole number */
#define JSON_VIEW_TOKENS_NONE (-1)
#define JSON_VIEW_TOKENS_BAD (-2)

/* The bytes body[s..e) of one value (a string's quotes included); e == 0: absent. */
struct json_span {
	uint32_t s, e;
};

struct json_view {
	struct json_span model;		/* the top-level "model", when it is a string */
	struct json_span prompt;	/* "prompt" (a string or a list) or "messages" (a list) */
	struct json_span prev_response; /* the top-level "previous_response_id", a string */
	struct json_span cache_salt;	/* the top-level "cache_salt" (vLLM's), a string */
	/* the larger of the top-level "max_tokens" and "max_completion_tokens": a whole number
	 * below 2^31 (1, 1.0 and 1e0 are 1, as pydantic reads them); JSON_VIEW_TOKENS_NONE when
	 * neither is there (or null); JSON_VIEW_TOKENS_BAD when one is there as anything else */
	long max_tokens;
	/* the larger of the top-level "n" and "best_of" (how many answers the backend writes,
	 * each up to max_tokens), read as max_tokens is; the same NONE and BAD */
	long choices;
	unsigned stream : 1;   /* top-level "stream": true */
	unsigned messages : 1; /* the prompt is "messages" */
};

/*
 * Read body[0..len) (the whole body; at most UINT32_MAX bytes). 0 with *v filled, or -EINVAL
 * with *why (a static string, for a 400) saying what is wrong; *v is then empty.
 */
int json_view_read(struct json_view *v, const char *body, size_t len, const char **why);

/*
 * The model of view <v> of <body>, decoded (escapes, \uXXXX as UTF-8) into out[0..cap),
 * NUL-terminated, its length in *outlen. 1, or -1 when the body names none, the name holds a
 * NUL or does not fit in cap - 1 bytes.
 */
int json_view_model(const struct json_view *v, const char *body, char *out, size_t cap,
		    size_t *outlen);

/*
 * Is the JSON string key body[ks..ke) (quotes included, valid) <name> once decoded? The plain
 * bytes are compared when it holds no escape; else it is decoded first.
 */
int json_key_is(const char *body, size_t ks, size_t ke, const char *name);

#endif
