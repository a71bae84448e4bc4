/*
 * basic.h - HTTP Basic authentication (RFC 7617) against an htpasswd file.
 *
 * The users file holds one "USER:HASH" line per user ('#' comments and blank lines allowed),
 * as `htpasswd -B` writes it. USER is the tenant (1-64 of A-Z a-z 0-9 . _ : @ -). HASH must be
 * a strong crypt(3) hash: bcrypt ($2y$, $2b$), yescrypt ($y$, $gy$), scrypt ($7$) or
 * sha512crypt ($6$), and one libxcrypt does not call legacy; plain passwords, DES, MD5
 * ($1$, $apr1$), SHA-1 ({SHA}), sha256crypt ($5$) and $2a$ are refused when the file is
 * read, with its place.
 *
 * A slow hash is the point: each wrong password costs an attacker the full verification.
 * A right one need not cost every request that too, so each user keeps the SHA-256 of the
 * last password verified for it, salted with a random value of the table's own: a request
 * whose password hashes to it is let in without crypt. The digest is kept in four relaxed
 * atomic words: a torn mix of two writers' digests matches no password, so the worst a race
 * can do is one more full verification. A reloaded file starts with none remembered. An
 * unknown user costs a full verification too (against another user's hash), so the time of
 * an answer does not tell which users exist.
 *
 * A table is built once and then read by any number of threads (only those digests change).
 */
#ifndef ACCELNET_GUARD_BASIC_H
#define ACCELNET_GUARD_BASIC_H

#include <stddef.h>

#define BASIC_CRED_MAX 1024 /* bytes of a decoded "user:password" */

struct basic_users;

/* Read <path>: 0 with *out, or -errno with "PATH:LINE: what is wrong" in <err>. */
int basic_load(const char *path, struct basic_users **out, char *err, size_t errlen);
/* The same from text in memory (<name> for messages): for tests and the fuzzer. */
int basic_parse(const char *name, const char *text, size_t len, struct basic_users **out, char *err,
		size_t errlen);
void basic_free(struct basic_users *u);
size_t basic_count(const struct basic_users *u);

enum basic_result {
	BASIC_OK,
	BASIC_MALFORMED, /* not base64 of "user:password" */
	BASIC_INVALID,	 /* no such user, or the wrong password */
};

/*
 * Check the credentials of "Authorization: Basic <b64>[0..len)". On BASIC_OK the user name
 * is copied to <user> (<cap> bytes; 65 is enough). The decoded password is wiped.
 */
enum basic_result basic_check(struct basic_users *u, const char *b64, size_t len, char *user,
			      size_t cap);

#endif
