/*
 * purge.h - what an admin purge asks for, and which stored objects it means.
 *
 * A purge names its objects by URI (a host and a request target, exactly), by prefix (a host
 * and the start of a target), by tag (a member of the list in the response field
 * cache.tag_header), or all of them. Its parameters come as "name=value&..." (the admin
 * request's query, or a form body), each value percent-decoded once ('+' is a plus, not a
 * space: request targets keep '+' as they are sent); cache_purge_parse() reads and checks
 * them. cache_purge_test() then judges one object from its key and stored head alone: it
 * splits the keys cache/key.h defines ("ROUTE s|p HOST TARGET", and " POST" plus 32 hex
 * digits after them for an inference POST). So a URI purge takes every route's and both
 * schemes' copies, every Vary variant and every inference body posted to that target.
 *
 * Everything here is pure (bytes in, a verdict out; no locks, no allocation, no I/O), so
 * cache_purge_pred() can be the store's predicate, run under a shard lock.
 */
#ifndef ACCELNET_CACHE_PURGE_H
#define ACCELNET_CACHE_PURGE_H

#include <stddef.h>
#include <stdint.h>

struct cache_obj;

#define CACHE_PURGE_MAX 4096 /* the longest host, target or tag a purge takes */

enum cache_purge_kind {
	CACHE_PURGE_URI = 1, /* host and target equal */
	CACHE_PURGE_PREFIX,  /* host equal, target starting with the given one */
	CACHE_PURGE_TAG,     /* the stored head's tag field lists the tag */
	CACHE_PURGE_ALL,
};

struct cache_purge {
	enum cache_purge_kind kind;
	/* the tag field's name (CACHE_PURGE_TAG): set by the caller, compared without case */
	const char *field;
	size_t field_len;
	size_t host_len, target_len, tag_len;
	char host[CACHE_PURGE_MAX]; /* lower-cased, port as clients send it in Host */
	char target[CACHE_PURGE_MAX];
	char tag[CACHE_PURGE_MAX];
};

/*
 * Read the parameters params[0..len) into <p> (field left NULL). Exactly one of
 *   uri=http://HOST/TARGET   (or https://; or uri=/TARGET with host=HOST)
 *   prefix=http://HOST/START (or prefix=/START with host=HOST)
 *   tag=TAG
 *   all=1
 * 0, or -EINVAL with a message for the user in err[0..errlen): an unknown or repeated
 * parameter, none or several of the above, bad percent-encoding, a host or target with a
 * byte a request could not have (a space, a control, non-ASCII, '#'), an empty or
 * over-long value, a tag with a comma or with spaces around it.
 */
int cache_purge_parse(struct cache_purge *p, const char *params, size_t len, char *err,
		      size_t errlen);

/*
 * Does the stored head head[0..hlen) (cache/head.h: the status line, then "Name: value"
 * lines) list <tag> in a field named field[0..flen)? Each such field's value is a
 * comma-separated list; members are trimmed of spaces and tabs and compared exactly.
 */
int cache_purge_head_has_tag(const char *head, size_t hlen, const char *field, size_t flen,
			     const char *tag, size_t tlen);

/* 1 when <p> means the object with key[0..klen) and head[0..hlen) (NULL: none yet), else 0. */
int cache_purge_test(const struct cache_purge *p, const char *key, size_t klen, const char *head,
		     size_t hlen);

/* cache_purge_test() on a stored object, <arg> the struct cache_purge: the store's predicate
 * for cache_purge_match() (an object whose head has not come is judged by its key alone). */
int cache_purge_pred(void *arg, const struct cache_obj *o);

#endif
