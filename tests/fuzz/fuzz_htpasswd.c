/*
 * fuzz_htpasswd.c - libFuzzer target: the Basic users file (htpasswd) parser on any bytes,
 * and Basic credentials of any bytes against a fixed table. Neither may crash or leak; a
 * table it accepts has users; credentials other than alice's password (40 'Z's, which no
 * fuzzer is likely to build) never pass.
 */
#include "guard/basic.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* sha512crypt of "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ" with 1000 rounds (cheap) */
static const char users_doc[] =
    "alice:$6$rounds=1000$fuzzsalt$XjjcJufVhSMnnjKjS0kaVF9dqlCHXPQqrFteMG29YNeskMSWDVHKGIfeh/"
    "6DhxiccOuQEAJ5Cwf7OUFXKnAOw0\n";

static struct basic_users *fixed;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256], user[65];
	if (!fixed && basic_parse("fixed", users_doc, strlen(users_doc), &fixed, err, sizeof(err)))
		abort();
	struct basic_users *u = NULL;
	if (basic_parse("fuzz", (const char *)data, size, &u, err, sizeof(err)) < 0) {
		if (u || !memchr(err, '\0', sizeof(err)))
			abort();
	} else {
		if (!basic_count(u))
			abort();
		basic_free(u);
	}
	if (size <= 2048 &&
	    basic_check(fixed, (const char *)data, size, user, sizeof(user)) == BASIC_OK)
		abort();
	return 0;
}
