/*
 * test_apikeys.c - the API keys file: plain and sha256: keys found by the key alone, every
 * malformed line refused with its line number and without the key in the message, and the
 * credential a request presents.
 */
#include "guard/apikeys.h"
#include "guard/auth.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

static struct apikeys *parse(const char *text)
{
	struct apikeys *k = NULL;
	char err[256];
	assert_int_equal(apikeys_parse("keys", text, strlen(text), &k, err, sizeof(err)), 0);
	return k;
}

static void refused(const char *text, const char *want)
{
	struct apikeys *k = NULL;
	char err[256];
	assert_true(apikeys_parse("keys", text, strlen(text), &k, err, sizeof(err)) < 0);
	if (!strstr(err, want))
		fail_msg("got '%s', expected '%s'", err, want);
	assert_null(strstr(err, "sk-")); /* a key never appears in a message */
	assert_null(k);
}

static void plain_and_hashed_keys(void **state)
{
	(void)state;
	/* sha256("sk-beta-0123456789abcdef") */
	struct apikeys *k =
	    parse("# who may call\n"
		  "acme sk-acme-0123456789abcdef\n"
		  "\n"
		  "  beta\tsha256:"
		  "fa61dcfef54660e1d703ff4408b68c3bd558da267cab3e43b819de66a28487b7\r\n");
	assert_int_equal(apikeys_count(k), 2);
	assert_string_equal(apikeys_lookup(k, "sk-acme-0123456789abcdef", 24), "acme");
	assert_null(apikeys_lookup(k, "sk-acme-0123456789abcdeF", 24));
	assert_null(apikeys_lookup(k, "sk-acme-0123456789abcde", 23));
	assert_null(apikeys_lookup(k, "", 0));
	assert_string_equal(apikeys_lookup(k, "sk-beta-0123456789abcdef", 24), "beta");
	apikeys_free(k);
}

static void hashed_key_is_found_by_the_key(void **state)
{
	(void)state;
	/* the digest of "correct horse battery staple" */
	struct apikeys *k =
	    parse("ops sha256:c4bbcb1fbec99d65bf59d85c8cb62ee2db963f0fe106f483d9afa73bd4e39a8a\n");
	const char *key = "correct horse battery staple";
	assert_string_equal(apikeys_lookup(k, key, strlen(key)), "ops");
	apikeys_free(k);
}

static void malformed_lines_are_refused(void **state)
{
	(void)state;
	refused("acme\n", "keys:1: expected 'TENANT KEY'");
	refused("# ok\nacme sk-acme-0123456789abcdef extra\n", "keys:2:");
	refused("acme short\n", "shorter than 16 bytes");
	refused("ac/me sk-acme-0123456789abcdef\n", "the tenant must be");
	refused("acme sha256:abcd\n", "64 hex digits");
	refused("acme sha256:zz9dd1a3ec4e8bf3cde1e08ee0e6c00f4f6f5b0ef1bab5ce73cc24ea2c4b0be5\n",
		"64 hex digits");
	refused("# nobody\n\n", "no keys");
	refused("acme sk-acme-0123\r456789abcdef\n", "control character");
	refused("a sk-acme-0123456789abcdef\nb sk-acme-0123456789abcdef\n", "given twice");
}

static void presented_credentials(void **state)
{
	(void)state;
	struct apikeys *k = parse("acme sk-acme-0123456789abcdef\nbeta sk-beta-0123456789abcdef\n");
	char *admit[] = {"acme"};
	struct http_head h;
	struct auth_tables t = {.keys = k};
	char tenant[APIKEYS_TENANT_MAX + 1];
	const char *why;
	const char *reqs[] = {
	    "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer sk-acme-0123456789abcdef\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: a\r\nauthorization: bearer   sk-acme-0123456789abcdef\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: a\r\nX-API-Key: sk-acme-0123456789abcdef\r\n\r\n",
	};
	for (size_t i = 0; i < 3; i++) {
		assert_true(http_parse_request(reqs[i], strlen(reqs[i]), 32768, &h) > 0);
		assert_int_equal(auth_check(&t, admit, 1, &h, 0, tenant, sizeof(tenant), &why),
				 AUTH_OK);
		assert_string_equal(tenant, "acme");
	}
	const char *missing = "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YTpi\r\n\r\n";
	assert_true(http_parse_request(missing, strlen(missing), 32768, &h) > 0);
	assert_int_equal(auth_check(&t, NULL, 0, &h, 0, tenant, sizeof(tenant), &why),
			 AUTH_MISSING);
	const char *wrong =
	    "GET / HTTP/1.1\r\nHost: a\r\nX-API-Key: sk-nobody-0123456789ab\r\n\r\n";
	assert_true(http_parse_request(wrong, strlen(wrong), 32768, &h) > 0);
	assert_int_equal(auth_check(&t, NULL, 0, &h, 0, tenant, sizeof(tenant), &why),
			 AUTH_INVALID);
	const char *other =
	    "GET / HTTP/1.1\r\nHost: a\r\nX-API-Key: sk-beta-0123456789abcdef\r\n\r\n";
	assert_true(http_parse_request(other, strlen(other), 32768, &h) > 0);
	assert_int_equal(auth_check(&t, admit, 1, &h, 0, tenant, sizeof(tenant), &why),
			 AUTH_FORBIDDEN);
	assert_string_equal(tenant, "beta");
	assert_int_equal(auth_check(&t, NULL, 0, &h, 0, tenant, sizeof(tenant), &why), AUTH_OK);
	apikeys_free(k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(plain_and_hashed_keys),
	    cmocka_unit_test(hashed_key_is_found_by_the_key),
	    cmocka_unit_test(malformed_lines_are_refused),
	    cmocka_unit_test(presented_credentials),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
