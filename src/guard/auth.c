/*
 * auth.c - reading a request's credential, the methods as an ops table, and deciding (see
 * auth.h).
 */
#include "guard/auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What a request presents. */
struct auth_cred {
	enum { CRED_NONE, CRED_BEARER, CRED_API_KEY, CRED_BASIC, CRED_MANY } kind;
	struct http_str v; /* the token, key or base64 after the scheme */
};

/* "<scheme> <value>": the scheme is case-insensitive (RFC 9110 11.1), then spaces. */
static int scheme_value(struct http_str v, const char *scheme, struct http_str *out)
{
	size_t sl = strlen(scheme);
	if (v.len <= sl || strncasecmp(v.p, scheme, sl) != 0 || v.p[sl] != ' ')
		return 0;
	uint32_t i = (uint32_t)sl;
	while (i < v.len && v.p[i] == ' ')
		i++;
	out->p = v.p + i;
	out->len = v.len - i;
	return out->len > 0;
}

/* The one Authorization and the one X-API-Key field of <h> (NULL where none); -1 when a
 * name is given twice. */
static int fields_of(const struct http_head *h, const struct http_header **a,
		     const struct http_header **x)
{
	*a = *x = NULL;
	for (unsigned i = 0; i < h->nheaders; i++) {
		const struct http_header *f = &h->headers[i];
		const struct http_header **slot = http_str_eq(f->name, "authorization") ? a
						  : http_str_eq(f->name, "x-api-key")	? x
											: NULL;
		if (slot && *slot)
			return -1;
		if (slot)
			*slot = f;
	}
	return 0;
}

/* The guard verifies one credential, and a backend given the fields (pass_credentials) may
 * read another: two Authorization fields, two X-API-Key fields, or an X-API-Key beside an
 * Authorization that is not "Bearer" of the same key, are CRED_MANY, refused. */
static struct auth_cred presented(const struct http_head *h)
{
	struct auth_cred c = {CRED_NONE, {NULL, 0}};
	const struct http_header *a, *x;
	if (fields_of(h, &a, &x) < 0) {
		c.kind = CRED_MANY;
		return c;
	}
	if (a) {
		if (scheme_value(a->value, "bearer", &c.v))
			c.kind = CRED_BEARER;
		else if (scheme_value(a->value, "basic", &c.v))
			c.kind = CRED_BASIC;
		if (x && (c.kind != CRED_BEARER || c.v.len != x->value.len ||
			  memcmp(c.v.p, x->value.p, c.v.len) != 0))
			c.kind = CRED_MANY;
		return c;
	}
	if (x && x->value.len) {
		c.kind = CRED_API_KEY;
		c.v = x->value;
	}
	return c;
}

static int looks_like_jwt(struct http_str v)
{
	const char *d1 = memchr(v.p, '.', v.len);
	return d1 && memchr(d1 + 1, '.', v.len - (size_t)(d1 + 1 - v.p));
}

/* --- the methods --- */

struct auth_method {
	const char *name;
	int (*configured)(const struct auth_tables *t);
	int (*takes)(const struct auth_cred *c);
	/* 1 with the identity in <tenant>, or 0 with *why */
	int (*verify)(struct auth_tables *t, const struct auth_cred *c, int64_t now, char *tenant,
		      size_t cap, const char **why);
};

static int jwt_configured(const struct auth_tables *t)
{
	return t->jwt != NULL;
}

static int jwt_takes(const struct auth_cred *c)
{
	return c->kind == CRED_BEARER && looks_like_jwt(c->v);
}

static int jwt_method_verify(struct auth_tables *t, const struct auth_cred *c, int64_t now,
			     char *tenant, size_t cap, const char **why)
{
	enum jwt_result r = jwt_verify(t->jwt, &t->jwt_policy, c->v.p, c->v.len, now, tenant, cap);
	*why = jwt_result_text(r);
	return r == JWT_OK;
}

static int keys_configured(const struct auth_tables *t)
{
	return t->keys != NULL;
}

static int keys_takes(const struct auth_cred *c)
{
	return c->kind == CRED_BEARER || c->kind == CRED_API_KEY;
}

static int keys_verify(struct auth_tables *t, const struct auth_cred *c, int64_t now, char *tenant,
		       size_t cap, const char **why)
{
	(void)now;
	const char *who = apikeys_lookup(t->keys, c->v.p, c->v.len);
	*why = "the API key is not valid";
	if (!who || strlen(who) >= cap)
		return 0;
	memcpy(tenant, who, strlen(who) + 1);
	return 1;
}

static int basic_configured(const struct auth_tables *t)
{
	return t->basic != NULL;
}

static int basic_takes(const struct auth_cred *c)
{
	return c->kind == CRED_BASIC;
}

static int basic_verify(struct auth_tables *t, const struct auth_cred *c, int64_t now, char *tenant,
			size_t cap, const char **why)
{
	(void)now;
	enum basic_result r = basic_check(t->basic, c->v.p, c->v.len, tenant, cap);
	*why = r == BASIC_MALFORMED ? "the Basic credentials are malformed"
				    : "the user name or password is not valid";
	return r == BASIC_OK;
}

static const struct auth_method methods[] = {
    {"jwt", jwt_configured, jwt_takes, jwt_method_verify},
    {"api_keys", keys_configured, keys_takes, keys_verify},
    {"basic", basic_configured, basic_takes, basic_verify},
};

/* --- loading and deciding --- */

void auth_tables_free(struct auth_tables *t)
{
	if (!t)
		return;
	apikeys_free(t->keys);
	jwks_free(t->jwt);
	basic_free(t->basic);
	free(t);
}

int auth_tables_load(const struct conf_auth *a, struct auth_tables **out, char *err, size_t errlen)
{
	struct auth_tables *t = calloc(1, sizeof(*t));
	int rc = -ENOMEM;
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return rc;
	}
	if (a->api_keys_file && (rc = apikeys_load(a->api_keys_file, &t->keys, err, errlen)) < 0)
		goto fail;
	if (a->basic && (rc = basic_load(a->basic->users_file, &t->basic, err, errlen)) < 0)
		goto fail;
	if (a->jwt) {
		const struct conf_jwt *j = a->jwt;
		jwt_init();
		int jwks = j->jwks_file != NULL;
		const char *path = jwks ? j->jwks_file : j->keys_file;
		if ((rc = jwks_load(path, jwks, &t->jwt, err, errlen)) < 0)
			goto fail;
		unsigned have = jwks_algorithms(t->jwt);
		t->jwt_policy = (struct jwt_policy){
		    .algorithms = j->algorithms ? j->algorithms & have : have,
		    .audience = j->audience,
		    .issuer = j->issuer,
		    .tenant_claim = j->tenant_claim,
		    .leeway_s = j->leeway_s,
		};
		if (!t->jwt_policy.algorithms) {
			snprintf(err, errlen, "%s: no key for any of jwt.algorithms", path);
			rc = -EINVAL;
			goto fail;
		}
	}
	*out = t;
	return 0;
fail:
	auth_tables_free(t);
	return rc;
}

unsigned auth_challenges(const struct conf_auth *a)
{
	if (!a)
		return REWRITE_CHALLENGE_BEARER;
	return (a->api_keys_file || a->jwt ? REWRITE_CHALLENGE_BEARER : 0) |
	       (a->basic ? REWRITE_CHALLENGE_BASIC : 0);
}

enum auth_result auth_check(struct auth_tables *t, char *const *admit, size_t nadmit,
			    const struct http_head *h, int64_t now_s, char *tenant, size_t cap,
			    const char **why)
{
	struct auth_cred c = presented(h);
	const struct auth_method *m = NULL;
	tenant[0] = '\0';
	/* what the route takes, and nothing else (a route without Basic never mentions it) */
	*why = !t->jwt && !t->basic    ? "an API key is required (Authorization: Bearer KEY, or "
					 "X-API-Key: KEY)"
	       : !t->keys && !t->jwt   ? "a user name and password are required (Basic)"
	       : !t->keys && !t->basic ? "a token is required (Authorization: Bearer TOKEN)"
	       : !t->basic	       ? "an API key or a token is required (Authorization: Bearer)"
			   : "credentials are required (Authorization: Bearer or Basic)";
	if (c.kind == CRED_MANY) {
		*why = "more than one credential (Authorization, X-API-Key): send one";
		return AUTH_INVALID;
	}
	for (size_t i = 0; !m && c.kind != CRED_NONE && i < sizeof(methods) / sizeof(*methods); i++)
		if (methods[i].configured(t) && methods[i].takes(&c))
			m = &methods[i];
	if (!m)
		return AUTH_MISSING;
	if (!m->verify(t, &c, now_s, tenant, cap, why)) {
		tenant[0] = '\0';
		return AUTH_INVALID;
	}
	if (auth_admits(admit, nadmit, tenant))
		return AUTH_OK;
	*why = "this route does not admit your tenant";
	return AUTH_FORBIDDEN;
}

int auth_admits(char *const *admit, size_t nadmit, const char *tenant)
{
	if (!nadmit)
		return 1;
	for (size_t i = 0; i < nadmit; i++)
		if (strcmp(admit[i], tenant) == 0)
			return 1;
	return 0;
}
