/*
 * auth.h - who a request says it is (routes.auth): the credential it presents, the methods
 * a route takes, and the decision.
 *
 * A route takes one or more methods (an ops table in auth.c, tried in this order):
 *   jwt       "Authorization: Bearer T" where T looks like a JWT (two dots);
 *   api_keys  "Authorization: Bearer KEY" (the OpenAI convention) or "X-API-Key: KEY";
 *   basic     "Authorization: Basic B64" (RFC 7617).
 * The credential goes to the first configured method that takes its form, and only to it:
 * a request passes if that method verifies it. One that presents nothing a configured
 * method takes gets 401 (AUTH_MISSING), one whose credential fails gets 401 (AUTH_INVALID);
 * both carry the route's challenges (Bearer, and Basic when basic is configured). So does
 * one presenting two credentials (two Authorization fields, two X-API-Key fields, or an
 * X-API-Key beside an Authorization other than "Bearer" of the same key). A request
 * whose identity is known but not among the route's tenants gets 403. The identity (the
 * tenant) is the key's tenant, the token's tenant claim, or the Basic user name. The
 * credential is never logged and, unless the route says otherwise, never forwarded.
 * A route may also take the tenant from a verified client certificate (client_cert: mutual
 * TLS; the proxy's guard stage reads it from the connection's TLS facts, before these).
 */
#ifndef ACCELNET_GUARD_AUTH_H
#define ACCELNET_GUARD_AUTH_H

#include "conf/model.h"
#include "guard/apikeys.h"
#include "guard/basic.h"
#include "guard/jwt.h"
#include "http/parse.h"
#include "http/rewrite.h"

#include <stdint.h>

enum auth_result {
	AUTH_OK,
	AUTH_MISSING,	/* no credential a configured method takes: 401 */
	AUTH_INVALID,	/* a credential its method refuses: 401 */
	AUTH_FORBIDDEN, /* a known identity the route does not admit: 403 */
};

/* One route's loaded material, NULL where the method is not configured. Built whole and
 * swapped whole (SIGHUP); only basic's remembered digests change after it is built. */
struct auth_tables {
	struct apikeys *keys;
	struct jwt_keys *jwt;
	struct basic_users *basic;
	struct jwt_policy jwt_policy; /* from routes.auth.jwt (its strings are the config's) */
};

/* Load every file <a> names. 0 with *out, or -errno with the file and reason in <err>. */
int auth_tables_load(const struct conf_auth *a, struct auth_tables **out, char *err, size_t errlen);
/* Free them (secrets wiped). NULL is fine. */
void auth_tables_free(struct auth_tables *t);

/* The challenges a 401 of route auth <a> carries: REWRITE_CHALLENGE_* bits. */
unsigned auth_challenges(const struct conf_auth *a);

/*
 * Decide for request <h> at time <now_s> (seconds since the epoch). On AUTH_OK and
 * AUTH_FORBIDDEN the identity is in <tenant> (<cap> bytes, APIKEYS_TENANT_MAX + 1 is
 * enough). <admit> (<nadmit> names; none: every identity) lists the tenants the route lets
 * in. *why is a short text for the client (never the credential).
 */
enum auth_result auth_check(struct auth_tables *t, char *const *admit, size_t nadmit,
			    const struct http_head *h, int64_t now_s, char *tenant, size_t cap,
			    const char **why);

/* Does a route admitting <admit> (<nadmit> names; none: every tenant) let <tenant> in? A
 * tenant named by a client certificate (routes.auth.client_cert) passes the same list. */
int auth_admits(char *const *admit, size_t nadmit, const char *tenant);

#endif
