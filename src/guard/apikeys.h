/*
 * apikeys.h - API keys: who may call a route, and as which tenant.
 *
 * The keys file holds one "TENANT KEY" pair per line ('#' starts a comment; blank lines are
 * skipped). KEY is the secret clients present, or "sha256:HEX" (64 hex digits) to store only
 * its SHA-256. Either way the table keeps digests alone: a plain key is hashed as it is read
 * and its bytes wiped. A presented key is hashed and looked up by digest, and the match is
 * confirmed with a constant-time compare, so neither the file's keys nor the time a lookup
 * takes tell an attacker anything about a key it does not hold.
 *
 * A table is built once and then only read, by any number of threads.
 */
#ifndef ACCELNET_GUARD_APIKEYS_H
#define ACCELNET_GUARD_APIKEYS_H

#include <stddef.h>
#include <stdint.h>

#define APIKEYS_TENANT_MAX 64 /* bytes of a tenant name: [A-Za-z0-9._:@-] */
#define APIKEYS_KEY_MAX 512   /* bytes of a key */

struct apikeys;

/*
 * Read <path>: 0 with *out, or -errno with "PATH:LINE: what is wrong" in <err> (a key's
 * bytes never appear in a message). An empty table is an error: it would lock everyone out.
 */
int apikeys_load(const char *path, struct apikeys **out, char *err, size_t errlen);
/* The same from text in memory (<name> for messages): for tests and the fuzzer. */
int apikeys_parse(const char *name, const char *text, size_t len, struct apikeys **out, char *err,
		  size_t errlen);
void apikeys_free(struct apikeys *k);
/* Is <p>[0..len) a tenant name (1-64 of A-Z a-z 0-9 . _ : @ -)? Every method's identity is. */
int apikeys_tenant_ok(const char *p, size_t len);
size_t apikeys_count(const struct apikeys *k);

/* The tenant of key <key>[0..len), or NULL when no entry has it. */
const char *apikeys_lookup(const struct apikeys *k, const char *key, size_t len);

#endif
