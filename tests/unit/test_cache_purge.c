/*
 * test_cache_purge.c - the admin purge's parameters and its matching (cache/purge.h): every
 * form read right (URIs with and without a path, https, host=, percent-decoding once, '+'
 * kept), every bad one refused with a message that names the problem; keys split as
 * caching.c writes them (inference POST suffix, empty and odd hosts) and foreign keys
 * refused; exact vs prefix targets, host compared without case; tags in one or several
 * fields, trimmed, case-sensitive, not matched inside other tags or other fields; and the
 * predicate run by the store, on stored objects and on a fill whose head has not come; and
 * targets brought to the normal form requests are keyed in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "cache/key.h"
#include "cache/purge.h"
#include "cache/store.h"

static struct cache_purge P;
static char err[256];

static int parse(const char *params)
{
	err[0] = '\0';
	return cache_purge_parse(&P, params, strlen(params), err, sizeof(err));
}

static void assert_refused(const char *params, const char *says)
{
	if (parse(params) != -EINVAL)
		fail_msg("taken: %s", params);
	if (!strstr(err, says))
		fail_msg("%s: message \"%s\" does not say \"%s\"", params, err, says);
}

static void assert_uri(const char *params, enum cache_purge_kind kind, const char *host,
		       const char *target)
{
	if (parse(params) != 0)
		fail_msg("refused: %s: %s", params, err);
	assert_int_equal(P.kind, kind);
	assert_int_equal(P.host_len, strlen(host));
	assert_memory_equal(P.host, host, P.host_len);
	if (P.target_len != strlen(target) || memcmp(P.target, target, P.target_len) != 0)
		fail_msg("%s: target %.*s, expected %s", params, (int)P.target_len, P.target,
			 target);
}

static void forms_read(void **state)
{
	(void)state;
	assert_uri("uri=http://example.com/a/b?x=1", CACHE_PURGE_URI, "example.com", "/a/b?x=1");
	assert_uri("uri=HTTPS://Example.COM:8443/A", CACHE_PURGE_URI, "example.com:8443", "/A");
	assert_uri("uri=http://h", CACHE_PURGE_URI, "h", "/");
	assert_uri("uri=http://h?q", CACHE_PURGE_URI, "h", "/?q");
	assert_uri("uri=/a/b&host=Example.com", CACHE_PURGE_URI, "example.com", "/a/b");
	assert_uri("host=h&uri=/a", CACHE_PURGE_URI, "h", "/a");
	assert_uri("uri=http://h/a%3Fx%3D1%26y%3D2", CACHE_PURGE_URI, "h", "/a?x=1&y=2");
	assert_uri("uri=http://h/caf%25C3%25A9", CACHE_PURGE_URI, "h", "/caf%C3%A9");
	assert_uri("uri=http://h/a+b", CACHE_PURGE_URI, "h", "/a+b");
	assert_uri("uri=http://[::1]:8080/x", CACHE_PURGE_URI, "[::1]:8080", "/x");
	assert_uri("&&uri=http://h/x&", CACHE_PURGE_URI, "h", "/x");
	assert_uri("prefix=http://h/static/", CACHE_PURGE_PREFIX, "h", "/static/");
	assert_uri("prefix=/&host=h", CACHE_PURGE_PREFIX, "h", "/");
	assert_uri("prefix=http://h", CACHE_PURGE_PREFIX, "h", "/");

	assert_int_equal(parse("tag=product-42"), 0);
	assert_int_equal(P.kind, CACHE_PURGE_TAG);
	assert_int_equal(P.tag_len, 10);
	assert_memory_equal(P.tag, "product-42", 10);
	assert_int_equal(parse("tag=a%20b"), 0);
	assert_int_equal(P.tag_len, 3);
	assert_memory_equal(P.tag, "a b", 3);
	assert_int_equal(parse("all=1"), 0);
	assert_int_equal(P.kind, CACHE_PURGE_ALL);
}

static void bad_forms_refused(void **state)
{
	(void)state;
	assert_refused("", "say what to purge");
	assert_refused("host=h", "say what to purge");
	assert_refused("uri=http://h/a&tag=t", "one purge at a time");
	assert_refused("all=1&prefix=http://h/", "one purge at a time");
	assert_refused("uri=http://h/a&uri=http://h/b", "uri is given twice");
	assert_refused("url=http://h/a", "unknown parameter \"url\"");
	assert_refused("uri=http://h/a?x=1&y=2", "unknown parameter \"y\"");
	assert_refused("uri=http://h/a&\x01=2", "unknown parameter:");
	assert_refused("all", "all=1 purges everything");
	assert_refused("all=yes", "all=1 purges everything");
	assert_refused("uri=", "uri: empty");
	assert_refused("uri", "uri: empty");
	assert_refused("uri=/a", "a path needs host=");
	assert_refused("uri=a/b&host=h", "expected http://HOST/PATH");
	assert_refused("uri=ftp://h/a", "expected http://HOST/PATH");
	assert_refused("uri=http:///a", "the host is empty");
	assert_refused("uri=/a&host=", "host: the host is empty");
	assert_refused("uri=http://h/a&host=h", "the host is given twice");
	assert_refused("tag=t&host=h", "host= goes with a path");
	assert_refused("uri=http://user@h/a", "no user@");
	assert_refused("uri=/a&host=h/x", "only visible ASCII, without / ? #");
	assert_refused("uri=http://h/a%20b", "only visible ASCII");
	assert_refused("uri=http://h/a%0d%0aX:1", "only visible ASCII");
	assert_refused("uri=http://h/a%80", "only visible ASCII");
	assert_refused("uri=http://h/a%23frag", "no fragment");
	assert_refused("uri=http://h/a#frag", "no fragment");
	assert_refused("uri=http://h/a%2", "bad percent-encoding");
	assert_refused("uri=http://h/a%zz", "bad percent-encoding");
	assert_refused("host=h%g0&uri=/a", "host: bad percent-encoding");
	assert_refused("tag=", "tag: empty");
	assert_refused("tag=a,b", "without a comma");
	assert_refused("tag=%20a", "spaces around it");
	assert_refused("tag=a%09", "spaces around it");
	assert_refused("tag=a%0ab", "only visible ASCII");
}

/* The target brought to the normal form every request target is keyed in (http/target.h);
 * a prefix's last segment left as written; what a request could not have refused. */
static void targets_normalised(void **state)
{
	(void)state;
	assert_uri("uri=/a%2562c&host=h", CACHE_PURGE_URI, "h", "/abc");
	assert_uri("uri=http://h//x/../a%253a%2525?q=%2563", CACHE_PURGE_URI, "h",
		   "/a%3A%25?q=%63");
	assert_uri("uri=http://h/a%25c3%25a9", CACHE_PURGE_URI, "h", "/a%C3%A9");
	assert_uri("prefix=//v1/./x&host=h", CACHE_PURGE_PREFIX, "h", "/v1/x");
	assert_uri("prefix=/a/.&host=h", CACHE_PURGE_PREFIX, "h", "/a/.");
	assert_uri("prefix=/a/..?x&host=h", CACHE_PURGE_PREFIX, "h", "/?x");
	assert_refused("uri=/a%252Fb&host=h", "encoded /");
	assert_refused("uri=/a%255Cb&host=h", "encoded /");
	assert_refused("uri=/a\\b&host=h", "backslash");
	assert_refused("uri=/../a&host=h", "above the root");
	assert_refused("prefix=/a%25&host=h", "two hex digits");
}

static void lengths_at_the_edge(void **state)
{
	(void)state;
	size_t cap = 3 * CACHE_PURGE_MAX + 16;
	char *s = malloc(cap);
	assert_non_null(s);
	/* a value of CACHE_PURGE_MAX - 1 bytes decoded is taken; one more is not */
	int n = snprintf(s, cap, "uri=http://h/");
	memset(s + n, 'a', CACHE_PURGE_MAX - 1 - 9);
	s[n + CACHE_PURGE_MAX - 1 - 9] = '\0';
	assert_int_equal(parse(s), 0);
	assert_int_equal(P.target_len, CACHE_PURGE_MAX - 1 - 8);
	strcat(s, "a");
	assert_refused(s, "uri: longer than 4095 bytes");
	/* percent-encoded bytes count once decoded */
	n = snprintf(s, cap, "tag=");
	for (int i = 0; i < CACHE_PURGE_MAX - 1; i++)
		n += snprintf(s + n, cap - (size_t)n, "%%41");
	assert_int_equal(parse(s), 0);
	assert_int_equal(P.tag_len, CACHE_PURGE_MAX - 1);
	assert_int_equal(P.tag[CACHE_PURGE_MAX - 2], 'A');
	strcat(s, "%41");
	assert_refused(s, "tag: longer than 4095 bytes");
	free(s);
}

static void split(const char *key, const char *host, const char *target)
{
	const char *h, *t;
	size_t hl, tl;
	if (cache_key_split(key, strlen(key), &h, &hl, &t, &tl) != 0)
		fail_msg("not split: %s", key);
	if (hl != strlen(host) || memcmp(h, host, hl) != 0 || tl != strlen(target) ||
	    memcmp(t, target, tl) != 0)
		fail_msg("%s: host %.*s target %.*s", key, (int)hl, h, (int)tl, t);
}

static void not_split(const char *key)
{
	const char *h, *t;
	size_t hl, tl;
	if (cache_key_split(key, strlen(key), &h, &hl, &t, &tl) == 0)
		fail_msg("split: %s", key);
}

static void keys_split(void **state)
{
	(void)state;
	split("0 p example.com /a/b?x=1", "example.com", "/a/b?x=1");
	split("12 s h:8443 /", "h:8443", "/");
	split("3 p  /x", "", "/x"); /* HTTP/1.0 without Host */
	split("0 p a b /x", "a b", "/x");
	split("1 p h /v1/embeddings POST 0123456789abcdef0123456789ABCDEF", "h", "/v1/embeddings");
	split("1 p h /v1/e?x=1 POST 0123456789abcdef0123456789abcdef", "h", "/v1/e?x=1");
	/* a target that merely looks like the suffix's start is a target */
	split("1 p h /POST", "h", "/POST");
	not_split("");
	not_split("0");
	not_split("0 p");
	not_split("0 p ");
	not_split("0 x h /a");
	not_split("p h /a");
	not_split("0 p h a");
	not_split("0 p /a");
	not_split("0 p h /a ");
	not_split("1 p h /v1 POST 0123456789abcdef0123456789abcdeg");
	not_split("1 p h POST 0123456789abcdef0123456789abcdef");
	not_split("1 p  POST 0123456789abcdef0123456789abcdef");
}

static int test_key(const char *key)
{
	return cache_purge_test(&P, key, strlen(key), NULL, 0);
}

static void uri_and_prefix_match(void **state)
{
	(void)state;
	assert_int_equal(parse("uri=http://Example.com/a/b?x=1"), 0);
	assert_true(test_key("0 p example.com /a/b?x=1"));
	assert_true(test_key("7 s example.com /a/b?x=1"));
	assert_true(test_key("2 p example.com /a/b?x=1 POST 0123456789abcdef0123456789abcdef"));
	assert_false(test_key("0 p example.com /a/b"));
	assert_false(test_key("0 p example.com /a/b?x=12"));
	assert_false(test_key("0 p example.com /a/b?x=1&y"));
	assert_false(test_key("0 p example.com:80 /a/b?x=1"));
	assert_false(test_key("0 p other.com /a/b?x=1"));
	assert_false(test_key("0 p example.co /a/b?x=1"));
	assert_false(test_key("garbage"));

	assert_int_equal(parse("prefix=/static/&host=h"), 0);
	assert_true(test_key("0 p h /static/"));
	assert_true(test_key("0 p h /static/app.js?v=3"));
	assert_true(test_key("0 s h /static/x POST 0123456789abcdef0123456789abcdef"));
	assert_false(test_key("0 p h /static"));
	assert_false(test_key("0 p h /Static/a"));
	assert_false(test_key("0 p h2 /static/a"));
	assert_false(test_key("0 p h /api/static/a"));

	assert_int_equal(parse("all=1"), 0);
	assert_true(test_key("0 p h /a"));
	assert_true(test_key("anything"));
}

#define HEAD(fields) "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" fields

static int has(const char *head, const char *tag)
{
	return cache_purge_head_has_tag(head, strlen(head), "Cache-Tag", 9, tag, strlen(tag));
}

static void tags_match(void **state)
{
	(void)state;
	const char *h = HEAD("Cache-Tag: a, b ,c,\t d-1 \r\nX: y\r\n");
	assert_true(has(h, "a"));
	assert_true(has(h, "b"));
	assert_true(has(h, "c"));
	assert_true(has(h, "d-1"));
	assert_false(has(h, "d"));
	assert_false(has(h, "A"));
	assert_false(has(h, "y"));
	assert_false(has(h, ""));
	/* several fields of the name all count; the name's case does not matter */
	h = HEAD("cache-tag: one\r\nX-Cache-Tag: two\r\nCACHE-TAG: three\r\n");
	assert_true(has(h, "one"));
	assert_true(has(h, "three"));
	assert_false(has(h, "two"));
	/* a last line without its CRLF, an empty list, empty members */
	assert_true(has(HEAD("Cache-Tag: x,y"), "y"));
	assert_false(has(HEAD("Cache-Tag:\r\n"), "x"));
	assert_true(has(HEAD("Cache-Tag: ,, x ,\r\n"), "x"));
	/* inside a tag with spaces, or in the status line: no */
	assert_true(has(HEAD("Cache-Tag: a b, c\r\n"), "a b"));
	assert_false(has(HEAD("Cache-Tag: a b, c\r\n"), "a"));
	assert_false(has("HTTP/1.1 200 Cache-Tag: a", "a"));
	assert_false(has("", "a"));
	/* another field name */
	h = HEAD("Surrogate-Key: k1\r\nCache-Tag: k2\r\n");
	assert_true(cache_purge_head_has_tag(h, strlen(h), "surrogate-key", 13, "k1", 2));
	assert_false(cache_purge_head_has_tag(h, strlen(h), "surrogate-key", 13, "k2", 2));

	/* through cache_purge_test: the configured field, or Cache-Tag */
	assert_int_equal(parse("tag=k2"), 0);
	assert_true(cache_purge_test(&P, "0 p h /a", 8, h, strlen(h)));
	assert_false(cache_purge_test(&P, "0 p h /a", 8, NULL, 0));
	P.field = "Surrogate-Key";
	P.field_len = 13;
	assert_false(cache_purge_test(&P, "0 p h /a", 8, h, strlen(h)));
	assert_int_equal(parse("tag=k1"), 0);
	P.field = "Surrogate-Key";
	P.field_len = 13;
	assert_true(cache_purge_test(&P, "0 p h /a", 8, h, strlen(h)));
}

/* A complete object under <key> with the stored head <head>. */
static void put(struct cache_store *s, const char *key, const char *head)
{
	struct cache_times t = {0};
	size_t len = strlen(key);
	struct cache_obj *o = cache_fill_begin(s, key, len, cache_key_hash(key, len));
	assert_non_null(o);
	assert_int_equal(cache_fill_head(s, o, head, strlen(head), 200, &t, NULL, 0, NULL, 0, 2),
			 0);
	assert_int_equal(cache_fill_body(s, o, "ok", 2), 0);
	cache_fill_end(s, o, 1);
	cache_obj_put(s, o);
}

static int stored(struct cache_store *s, const char *key)
{
	size_t len = strlen(key);
	struct cache_obj *o = cache_lookup(s, key, len, cache_key_hash(key, len), NULL, NULL, NULL);
	if (o)
		cache_obj_put(s, o);
	return o != NULL;
}

static void store_predicate(void **state)
{
	(void)state;
	struct cache_store_conf c = {
	    .memory = 1 << 20, .max_object = 4096, .shards = 4, .evict = &evict_sieve};
	struct cache_store *s;
	char key[64];
	assert_int_equal(cache_store_new(&c, &s), 0);
	put(s, "0 p h /a", HEAD("Cache-Tag: red\r\n"));
	put(s, "1 s h /a", HEAD("Cache-Tag: blue\r\n"));
	put(s, "0 p h /a?v=2", HEAD("Cache-Tag: red, blue\r\n"));
	put(s, "0 p h /b", HEAD(""));
	put(s, "0 p g /a", HEAD("Cache-Tag: green\r\n"));
	/* a fill whose head has not come: found by its key, never by a tag */
	struct cache_obj *fill = cache_fill_begin(s, "0 p h /c", 8, cache_key_hash("0 p h /c", 8));
	assert_non_null(fill);
	for (int i = 0; i < 300; i++) { /* several rounds of drops in each shard */
		snprintf(key, sizeof(key), "0 p many /x/%d", i);
		put(s, key, HEAD("Cache-Tag: many\r\n"));
	}

	assert_int_equal(parse("tag=red"), 0);
	assert_int_equal(cache_purge_match(s, cache_purge_pred, &P), 2);
	assert_false(stored(s, "0 p h /a"));
	assert_false(stored(s, "0 p h /a?v=2"));
	assert_true(stored(s, "1 s h /a"));

	assert_int_equal(parse("tag=nothing"), 0);
	assert_int_equal(cache_purge_match(s, cache_purge_pred, &P), 0);

	assert_int_equal(parse("uri=http://h/a"), 0);
	assert_int_equal(cache_purge_match(s, cache_purge_pred, &P), 1);
	assert_false(stored(s, "1 s h /a"));
	assert_true(stored(s, "0 p g /a"));

	assert_int_equal(parse("tag=many"), 0);
	assert_int_equal(cache_purge_match(s, cache_purge_pred, &P), 300);
	assert_false(stored(s, "0 p many /x/7"));

	assert_int_equal(parse("prefix=http://h/"), 0);
	assert_int_equal(cache_purge_match(s, cache_purge_pred, &P), 2); /* /b and the fill */
	assert_true(stored(s, "0 p g /a"));

	struct cache_store_stats st;
	cache_store_stats(s, &st);
	assert_int_equal(st.evicted_purge, 305);
	assert_int_equal(st.objects, 1);

	assert_int_equal(parse("all=1"), 0);
	assert_int_equal(cache_purge_match(s, cache_purge_pred, &P), 1);
	cache_store_stats(s, &st);
	assert_int_equal(st.objects, 0);
	cache_fill_end(s, fill, 0);
	cache_obj_put(s, fill);
	cache_store_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(forms_read),	    cmocka_unit_test(bad_forms_refused),
	    cmocka_unit_test(lengths_at_the_edge),  cmocka_unit_test(keys_split),
	    cmocka_unit_test(uri_and_prefix_match), cmocka_unit_test(tags_match),
	    cmocka_unit_test(store_predicate),	    cmocka_unit_test(targets_normalised),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
