/*
 * canon.h - the key of an inference request: its JSON body canonicalised, so that two
 * requests that mean the same (keys in another order, other whitespace, other escapes for
 * the same characters) hash the same, and the facts the cache needs to decide whether the
 * answer is deterministic. Numbers are NOT folded: they are kept as written, so "1.0" and
 * "1.00" (or "0" and "-0") are two keys.
 *
 * The body must be one JSON object (RFC 8259, strictly: UTF-8 checked, no raw control
 * characters in strings, no lone surrogate escapes, numbers by the grammar, whitespace only
 * around it), at most CANON_DEPTH_MAX deep; object members are sorted by key (byte order of
 * the decoded key; a key repeated at one level makes the body refused: which one the engine
 * reads is the engine's choice), whitespace outside strings dropped, strings re-encoded one
 * way (escapes decoded, then written with the fewest escapes). The objects open at any point
 * (an object and those it sits in) hold at most CANON_MEMBERS_MAX members together. The
 * canonical form is not kept: it is hashed as it is read, as a tree (each member's value is
 * hashed on its own and its digest stands for it in its object), so no byte is read twice
 * whatever the nesting (canon.c says why and what it costs).
 */
#ifndef ACCELNET_CACHE_CANON_H
#define ACCELNET_CACHE_CANON_H

#include <stddef.h>
#include <stdint.h>

#define CANON_DEPTH_MAX 64
#define CANON_MEMBERS_MAX 4096

struct canon_facts {
	uint64_t hash[2];    /* the XXH3-128 tree hash of the canonical form: low, high */
	int has_temperature; /* top-level "temperature" present (null reads as absent) */
	double temperature;  /* ... its value; +inf when it is not a number */
	int stream;	     /* top-level "stream": true */
	int has_seed, has_n; /* top-level "seed"; "n" (null reads as absent) */
	double n;	     /* ... its value; +inf when it is not a number */
};

/* Canonicalise and hash body[0..len). 0, or -EINVAL when it is not one JSON object (or too
 * deep, or repeats a key, or has too many members open at once); *out is zeroed then.
 * Allocates nothing; uses under 200 KiB of stack. */
int canon_json(const char *body, size_t len, struct canon_facts *out);

#endif
