/*
 * schema_guard.c - the guard's sections of the config schema (see schema_guard.h): a route's
 * auth (API keys, JWT, Basic, client certificates, the identity header), its rate_limit
 * (request rates, tokens per minute, concurrency) and its api; and the rate syntax ("100/s")
 * that limits.accept_rate_per_ip shares. A credential file must be readable when the config
 * is checked: the proxy reads it whole at start, and so does `accelnet check`.
 */
#include "conf/schema_guard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_auth_tenant(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	(void)i;
	return rules_read_string(x, item, (char **)obj);
}

static int read_auth_tenants(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_auth *a = obj;
	(void)r;
	return rules_read_list(x, v, "tenants", (void **)&a->tenants, &a->ntenants, sizeof(char *),
			       read_auth_tenant);
}

static int read_tenant_from(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_auth *a = field;
	const char *s = rules_scalar(v);
	(void)r;
	if (s && strcmp(s, "subject_cn") == 0)
		a->client_cert = CERT_TENANT_SUBJECT_CN;
	else if (s && strcmp(s, "san") == 0)
		a->client_cert = CERT_TENANT_SAN;
	else
		return rules_fail(x, v, "auth: client_cert: tenant_from is subject_cn or san");
	return 0;
}

static const struct rule client_cert_rules[] = {
    {"tenant_from", RULE_SECTION, 0, 0, 0, NULL, read_tenant_from},
    RULES_END,
};

/* routes[].auth.client_cert: the tenant is named by the verified client certificate. */
static int read_client_cert(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_auth *a = obj;
	int rc = rules_read_section(x, v, "client_cert", r->sub, a);
	if (!rc && a->client_cert == CERT_TENANT_NONE)
		a->client_cert = CERT_TENANT_SUBJECT_CN;
	return rc;
}

/* A file named in auth must be readable now (the proxy reads it whole at start, and
 * `accelnet check` reads it too). */
static int auth_file_ok(struct rules_ctx *x, yaml_node_t *map, const char *key, const char *path)
{
	if (access(path, R_OK) < 0)
		return rules_fail(x, rules_value_of(x, map, key), "auth: %s '%s': %s", key, path,
				  strerror(errno));
	return 0;
}

#define JWT_ALG_NAME(name) #name,
static const char *const jwt_alg_names[] = {CONF_JWT_ALGS(JWT_ALG_NAME)};
#undef JWT_ALG_NAME

static int read_jwt_alg(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	const char *s = rules_scalar(item);
	(void)i;
	for (unsigned a = 0; s && a < CONF_JWT_NALGS; a++)
		if (strcmp(s, jwt_alg_names[a]) == 0) {
			*(unsigned *)obj = a;
			return 0;
		}
	return rules_fail(x, item, "jwt.algorithms: expected HS256, RS256 or ES256 (never none)");
}

static int read_jwt_algs(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_jwt *j = obj;
	unsigned *list = NULL;
	size_t n = 0;
	(void)r;
	int rc =
	    rules_read_list(x, v, "algorithms", (void **)&list, &n, sizeof(unsigned), read_jwt_alg);
	for (size_t i = 0; !rc && i < n; i++)
		j->algorithms |= 1u << list[i];
	free(list);
	if (!rc && !j->algorithms)
		return rules_fail(x, v, "jwt.algorithms: name at least one algorithm");
	return rc;
}

static const struct rule jwt_rules[] = {
    {"keys_file", RULE_STR, offsetof(struct conf_jwt, keys_file), 0, 0, NULL, NULL},
    {"jwks_file", RULE_STR, offsetof(struct conf_jwt, jwks_file), 0, 0, NULL, NULL},
    {"algorithms", RULE_SECTION, 0, 0, 0, NULL, read_jwt_algs},
    {"audience", RULE_STR, offsetof(struct conf_jwt, audience), 0, 0, NULL, NULL},
    {"issuer", RULE_STR, offsetof(struct conf_jwt, issuer), 0, 0, NULL, NULL},
    {"tenant_claim", RULE_STR, offsetof(struct conf_jwt, tenant_claim), 0, 0, NULL, NULL},
    {"leeway_s", RULE_UINT, offsetof(struct conf_jwt, leeway_s), 0, 3600, NULL, NULL},
    RULES_END,
};

static int read_jwt(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_auth *a = field;
	(void)r;
	if (!(a->jwt = calloc(1, sizeof(*a->jwt))))
		return rules_fail(x, v, "out of memory");
	struct conf_jwt *j = a->jwt;
	j->leeway_s = 30;
	int rc = rules_read_section(x, v, "jwt", jwt_rules, j);
	if (rc)
		return rc;
	if (!j->keys_file == !j->jwks_file)
		return rules_fail(x, v,
				  "jwt: give one of keys_file (PEM public keys or an HS256 "
				  "secret) or jwks_file");
	if (!j->tenant_claim && !(j->tenant_claim = strdup("sub")))
		return rules_fail(x, v, "out of memory");
	return j->keys_file ? auth_file_ok(x, v, "keys_file", j->keys_file)
			    : auth_file_ok(x, v, "jwks_file", j->jwks_file);
}

static const struct rule basic_rules[] = {
    {"users_file", RULE_STR, offsetof(struct conf_basic, users_file), 0, 0, NULL, NULL},
    RULES_END,
};

static int read_basic(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_auth *a = field;
	(void)r;
	if (!(a->basic = calloc(1, sizeof(*a->basic))))
		return rules_fail(x, v, "out of memory");
	int rc = rules_read_section(x, v, "basic", basic_rules, a->basic);
	if (rc)
		return rc;
	if (!a->basic->users_file)
		return rules_fail(x, v,
				  "basic: 'users_file' is required (htpasswd user:hash lines)");
	return auth_file_ok(x, v, "users_file", a->basic->users_file);
}

const struct rule schema_auth_rules[] = {
    {"api_keys_file", RULE_STR, offsetof(struct conf_auth, api_keys_file), 0, 0, NULL, NULL},
    {"jwt", RULE_SECTION, 0, 0, 0, jwt_rules, read_jwt},
    {"basic", RULE_SECTION, 0, 0, 0, basic_rules, read_basic},
    {"identity_header", RULE_STR, offsetof(struct conf_auth, identity_header), 0, 0, NULL, NULL},
    {"tenants", RULE_SECTION, 0, 0, 0, NULL, read_auth_tenants},
    {"pass_credentials", RULE_BOOL, offsetof(struct conf_auth, pass_credentials), 0, 0, NULL, NULL},
    {"client_cert", RULE_SECTION, 0, 0, 0, client_cert_rules, read_client_cert},
    RULES_END,
};

/* routes[].auth: one or more methods, each with its file; the identity goes to the backend
 * in a header of its own. */
int schema_read_auth(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_route *rt = field;
	(void)r;
	if (!(rt->auth = calloc(1, sizeof(*rt->auth))))
		return rules_fail(x, v, "out of memory");
	struct conf_auth *a = rt->auth;
	int rc = rules_read_section(x, v, "auth", schema_auth_rules, a);
	if (rc)
		return rc;
	if (!a->api_keys_file && !a->jwt && !a->basic && a->client_cert == CERT_TENANT_NONE)
		return rules_fail(
		    x, v, "auth: give api_keys_file, jwt, basic or client_cert (or several)");
	if (a->api_keys_file && (rc = auth_file_ok(x, v, "api_keys_file", a->api_keys_file)))
		return rc;
	if (!a->identity_header && !(a->identity_header = strdup("X-Tenant")))
		return rules_fail(x, v, "out of memory");
	if (!rules_header_name_ok(a->identity_header))
		return rules_fail(x, rules_value_of(x, v, "identity_header"),
				  "auth: identity_header must be a header name (letters, digits, "
				  "'-' ...)");
	return 0;
}

/* "N/s", "N/m" or "N/h": N (1..1000000) requests (or connections) per second, minute or
 * hour. */
int schema_read_rate(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_rate *rate = field;
	const char *s = rules_scalar(v);
	char *end = NULL;
	unsigned long n = s ? strtoul(s, &end, 10) : 0;
	if (!s || end == s || n < 1 || n > 1000000 || end[0] != '/' || end[2] != '\0' ||
	    (end[1] != 's' && end[1] != 'm' && end[1] != 'h'))
		return rules_fail(
		    x, v, "%s: %s is a rate such as 100/s, 600/m or 1000/h",
		    strcmp(r->name, "accept_rate_per_ip") == 0 ? "limits" : "rate_limit", r->name);
	rate->n = (unsigned)n;
	rate->per_s = end[1] == 's' ? 1 : end[1] == 'm' ? 60 : 3600;
	return 0;
}

const struct rule schema_rate_limit_rules[] = {
    {"per_ip", RULE_SECTION, offsetof(struct conf_rate_limit, per_ip), 0, 0, NULL,
     schema_read_rate},
    {"per_tenant", RULE_SECTION, offsetof(struct conf_rate_limit, per_tenant), 0, 0, NULL,
     schema_read_rate},
    {"per_route", RULE_SECTION, offsetof(struct conf_rate_limit, per_route), 0, 0, NULL,
     schema_read_rate},
    {"burst", RULE_UINT, offsetof(struct conf_rate_limit, burst), 1, 1000000, NULL, NULL},
    {"tokens_per_minute", RULE_UINT, offsetof(struct conf_rate_limit, tokens_per_minute), 1,
     100000000, NULL, NULL},
    {"token_burst", RULE_UINT, offsetof(struct conf_rate_limit, token_burst), 1, 100000000, NULL,
     NULL},
    {"default_max_tokens", RULE_UINT, offsetof(struct conf_rate_limit, default_max_tokens), 1,
     10000000, NULL, NULL},
    {"concurrency", RULE_UINT, offsetof(struct conf_rate_limit, concurrency), 1, 1000000, NULL,
     NULL},
    RULES_END,
};

int schema_read_rate_limit(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_route *rt = field;
	(void)r;
	if (!(rt->rate_limit = calloc(1, sizeof(*rt->rate_limit))))
		return rules_fail(x, v, "out of memory");
	struct conf_rate_limit *l = rt->rate_limit;
	l->default_max_tokens = 256;
	int rc = rules_read_section(x, v, "rate_limit", schema_rate_limit_rules, l);
	if (!rc && !l->per_ip.n && !l->per_tenant.n && !l->per_route.n && !l->tokens_per_minute &&
	    !l->concurrency)
		return rules_fail(
		    x, v,
		    "rate_limit: give per_ip or per_tenant (or per_route, tokens_per_minute, "
		    "concurrency), e.g. {per_ip: 100/s}");
	if (!rc && l->token_burst && !l->tokens_per_minute)
		return rules_fail(x, rules_value_of(x, v, "token_burst"),
				  "rate_limit: token_burst needs tokens_per_minute");
	if (!rc && l->tokens_per_minute && !l->token_burst)
		l->token_burst = l->tokens_per_minute / 6 ? l->tokens_per_minute / 6 : 1;
	return rc;
}

/* routes[].api: openai, or none (the default). */
int schema_read_api(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	const char *s = rules_scalar(v);
	(void)r;
	if (s && strcmp(s, "openai") == 0)
		*(unsigned *)field = CONF_API_OPENAI;
	else if (s && strcmp(s, "none") == 0)
		*(unsigned *)field = CONF_API_NONE;
	else
		return rules_fail(x, v, "api: expected openai or none");
	return 0;
}
