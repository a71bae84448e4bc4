/*
 * canon.h - the key of an inference request: its JSON body canonicalised, so that two
 * requests that mean the same (keys in another order, other whitespace, "1.0" written "1.00"
 * is NOT folded: numbers are kept as written) hash the same, and the facts the cache needs
 * to decide whether the answer is deterministic.
 *
 * The body must be one JSON object (RFC 8259), at most CANON_DEPTH_MAX deep; object members
 * are sorted by key (byte order of the decoded key; a key repeated at one level makes the
 * body refused: which one the engine reads is the engine's choice), whitespace outside
 * strings dropped, strings re-encoded one way (escapes decoded, then written with the
 * fewest escapes). The canonical text is not kept: it is streamed into an XXH3-128 hash.
 */
#ifndef ACCELNET_CACHE_CANON_H
#define ACCELNET_CACHE_CANON_H

#include <stddef.h>
#include <stdint.h>

#define CANON_DEPTH_MAX 64

struct canon_facts {
	uint64_t hash[2];    /* XXH3-128 of the canonical text */
	int has_temperature; /* top-level "temperature" present */
	double temperature;  /* ... its value */
	int stream;	     /* top-level "stream": true */
	int has_seed, has_n; /* top-level "seed"; "n" */
	double n;	     /* ... its value */
};

/* Canonicalise and hash body[0..len). 0, or -EINVAL when it is not one JSON object (or too
 * deep, or repeats a key). */
int canon_json(const char *body, size_t len, struct canon_facts *out);

#endif
