/*
 * test_basic.c - the htpasswd users file: strong hashes accepted, plain and weak ones
 * refused with their line; Basic credentials checked: the right password (twice: the
 * second time from the remembered digest), a wrong one, an unknown user, malformed forms.
 */
#include "guard/basic.h"

#include <crypt.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static void refused(const char *text, const char *want)
{
	struct basic_users *u = NULL;
	char err[300];
	assert_true(basic_parse("users", text, strlen(text), &u, err, sizeof(err)) < 0);
	assert_null(u);
	if (!strstr(err, want))
		fail_msg("got '%s', expected '%s'", err, want);
}

static void weak_and_malformed_refused(void **state)
{
	(void)state;
	refused("alice:secret\n", "users:1: expected a bcrypt");
	refused("# c\nalice:$1$abc$abcdefghijklmnopqrstuv\n", "users:2: an MD5 hash");
	refused("alice:$apr1$abc$abcdefghijklmnopqrstuv\n", "MD5");
	refused("alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", "SHA-1");
	refused("alice:$5$rounds=1000$fuzzsalt$80DqW7bIsy.F/fIpohomC3RgErR4oUkxMhRAfKrTCi5\n",
		"legacy");
	refused("alice:abJnggxhB/yWI\n", "DES");
	refused("alice\n", "expected 'USER:HASH'");
	refused("al ice:$6$salt$x\n", "the user must be");
	refused("\n# nobody\n", "no users");
	refused("alice:$6$\n", "cut short or mangled");
	refused("alice:$2y$05$abc\n", "cut short or mangled");
}

static void b64(const char *s, char *out)
{
	EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)strlen(s));
}

static enum basic_result check(struct basic_users *u, const char *userpass, char *user)
{
	char enc[512];
	b64(userpass, enc);
	return basic_check(u, enc, strlen(enc), user, 65);
}

static void credentials_checked(void **state)
{
	(void)state;
	struct crypt_data cd;
	char salt[64], line[512], err[300], user[65];
	memset(&cd, 0, sizeof(cd));
	assert_non_null(crypt_gensalt_rn("$6$", 1000, NULL, 0, salt, sizeof(salt)));
	snprintf(line, sizeof(line), "alice:%s\n", crypt_rn("pa:ss word", salt, &cd, sizeof(cd)));
	assert_non_null(crypt_gensalt_rn("$2b$", 4, NULL, 0, salt, sizeof(salt)));
	snprintf(line + strlen(line), sizeof(line) - strlen(line), "bob:%s\n",
		 crypt_rn("hunter2", salt, &cd, sizeof(cd)));
	struct basic_users *u = NULL;
	if (basic_parse("users", line, strlen(line), &u, err, sizeof(err)))
		fail_msg("%s", err);
	assert_int_equal(basic_count(u), 2);
	for (int i = 0; i < 2; i++) { /* the second time from the remembered digest */
		assert_int_equal(check(u, "alice:pa:ss word", user), BASIC_OK);
		assert_string_equal(user, "alice");
		assert_int_equal(check(u, "bob:hunter2", user), BASIC_OK);
		assert_string_equal(user, "bob");
	}
	assert_int_equal(check(u, "alice:pa:ss wordX", user), BASIC_INVALID);
	assert_int_equal(check(u, "bob:hunter3", user), BASIC_INVALID);
	assert_int_equal(check(u, "carol:hunter2", user), BASIC_INVALID);
	assert_int_equal(check(u, "alice:", user), BASIC_MALFORMED);
	assert_int_equal(check(u, "alice", user), BASIC_MALFORMED);
	assert_int_equal(check(u, ":x", user), BASIC_MALFORMED);
	assert_int_equal(basic_check(u, "YWxpY2U6cGFzcw", 14, user, 65),
			 BASIC_MALFORMED); /* unpadded */
	assert_int_equal(basic_check(u, "!!!!", 4, user, 65), BASIC_MALFORMED);
	/* the remembered digest belongs to the password: a wrong one after a right one fails */
	assert_int_equal(check(u, "bob:hunter2", user), BASIC_OK);
	assert_int_equal(check(u, "bob:hunter", user), BASIC_INVALID);
	basic_free(u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(weak_and_malformed_refused),
	    cmocka_unit_test(credentials_checked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
