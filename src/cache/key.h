/*
 * key.h - the cache's keys: how a request names what the store holds, written by the
 * request path (proxy/caching.c) and read back by purges (cache/purge.h), in one place.
 *
 *   "ROUTE s|p HOST TARGET"            a GET or HEAD
 *   "ROUTE s|p HOST TARGET POST HEX32"  an inference POST: its canonical body's hash
 *
 * ROUTE is the route's index in decimal, s or p the client's scheme (TLS or plain), HOST the
 * Host field lower-cased, TARGET the request target in its normal form (http/target.h: the
 * one the route matched and the backend gets; query included, as sent; it begins with '/'
 * and holds no space, the parser sees to that). Keys are compared whole by the store.
 */
#ifndef ACCELNET_CACHE_KEY_H
#define ACCELNET_CACHE_KEY_H

#include "http/parse.h"

#include <stddef.h>
#include <stdint.h>

/* Room a key needs beyond its host and target. */
#define CACHE_KEY_EXTRA 64

/* The key of a request to route <route> into out[0..cap): its length, or -1 when it does not
 * fit. */
long cache_key_build(char *out, size_t cap, size_t route, int tls, struct http_str host,
		     struct http_str target);
/* Add an inference body's hash to the key out[0..len): the new length, or -1. */
long cache_key_add_body(char *out, size_t cap, size_t len, const uint64_t hash[2]);

/* Split key[0..len) into its host and target (pointers into the key): 0, or -1 when it is not
 * a key of this form. */
int cache_key_split(const char *key, size_t len, const char **host, size_t *hlen,
		    const char **target, size_t *tlen);

#endif
