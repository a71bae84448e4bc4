/*
 * auth.h - who a request says it is (routes.auth): the credential it presents, and the
 * decision for a route.
 *
 * An API key comes as "Authorization: Bearer KEY" (the OpenAI convention) or "X-API-Key:
 * KEY". A request that presents none, or one that no entry has, is not let in (401, with a
 * Bearer challenge); one whose key is known but whose tenant the route does not admit gets
 * 403. The credential is never logged and, unless the route says otherwise, never forwarded.
 * A route may also take the tenant from a verified client certificate (mutual TLS; the
 * proxy's guard stage reads it from the connection's TLS facts).
 */
#ifndef ACCELNET_GUARD_AUTH_H
#define ACCELNET_GUARD_AUTH_H

#include "guard/apikeys.h"
#include "http/parse.h"

enum auth_result {
	AUTH_OK,
	AUTH_MISSING,	/* no credential: 401 */
	AUTH_INVALID,	/* a credential no entry has: 401 */
	AUTH_FORBIDDEN, /* a known identity the route does not admit: 403 */
};

/* The API key <h> presents, in *key; 0 when it presents none. */
int auth_presented_key(const struct http_head *h, struct http_str *key);

/*
 * Decide for request <h> against <keys>; *tenant is the authenticated identity on AUTH_OK
 * and AUTH_FORBIDDEN. <admit> (<nadmit> names; none: every tenant) lists the tenants the
 * route lets in.
 */
enum auth_result auth_check(const struct apikeys *keys, char *const *admit, size_t nadmit,
			    const struct http_head *h, const char **tenant);

/* Does a route admitting <admit> (<nadmit> names; none: every tenant) let <tenant> in? A
 * tenant named by a client certificate (routes.auth.client_cert) passes the same list. */
int auth_admits(char *const *admit, size_t nadmit, const char *tenant);

#endif
