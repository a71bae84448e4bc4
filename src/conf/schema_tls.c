/*
 * schema_tls.c - the tls: sections of the config schema (see schema_tls.h): a listener's
 * (listen[].tls: certificates, versions, ciphers, OCSP, mutual TLS, the certificate fields'
 * header names) and a pool's (pools[].tls, backends[].tls). Each is built once with the
 * code that will use it (conf/tls.c), so a certificate that does not load, a key that does
 * not match or an unknown cipher is refused with its place in the file, never at start-up.
 */
#include "conf/schema_tls.h"
#include "conf/tls.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- listen[].tls --- */

static const struct rule tls_cert_rules[] = {
    {"cert", RULE_STR, offsetof(struct conf_tls_cert, cert), 0, 0, NULL, NULL},
    {"key", RULE_STR, offsetof(struct conf_tls_cert, key), 0, 0, NULL, NULL},
    {"ocsp_file", RULE_STR, offsetof(struct conf_tls_cert, ocsp_file), 0, 0, NULL, NULL},
    RULES_END,
};

static int read_tls_cert_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_tls_cert *c = obj;
	(void)i;
	int err = rules_read_section(x, item, "certificates", tls_cert_rules, c);
	if (!err && (!c->cert || !c->key))
		return rules_fail(x, item, "certificates: each needs 'cert' and 'key'");
	return err;
}

static int read_tls_certs(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_tls *t = obj;
	(void)r;
	return rules_read_list(x, v, "certificates", (void **)&t->more, &t->nmore,
			       sizeof(struct conf_tls_cert), read_tls_cert_item);
}

const struct rule schema_tls_rules[] = {
    {"cert", RULE_STR, offsetof(struct conf_tls, first.cert), 0, 0, NULL, NULL},
    {"key", RULE_STR, offsetof(struct conf_tls, first.key), 0, 0, NULL, NULL},
    {"certificates", RULE_SECTION, 0, 0, 0, tls_cert_rules, read_tls_certs},
    {"ciphers", RULE_STR, offsetof(struct conf_tls, ciphers), 0, 0, NULL, NULL},
    {"ciphersuites", RULE_STR, offsetof(struct conf_tls, ciphersuites), 0, 0, NULL, NULL},
    {"groups", RULE_STR, offsetof(struct conf_tls, groups), 0, 0, NULL, NULL},
    {"min_version", RULE_STR, offsetof(struct conf_tls, min_version), 0, 0, NULL, NULL},
    {"ocsp_file", RULE_STR, offsetof(struct conf_tls, first.ocsp_file), 0, 0, NULL, NULL},
    {"client_ca", RULE_STR, offsetof(struct conf_tls, client_ca), 0, 0, NULL, NULL},
    {"client_auth", RULE_STR, offsetof(struct conf_tls, client_auth), 0, 0, NULL, NULL},
    {"client_crl", RULE_STR, offsetof(struct conf_tls, client_crl), 0, 0, NULL, NULL},
    {"verify_depth", RULE_UINT, offsetof(struct conf_tls, verify_depth), 0, 10, NULL, NULL},
    {"client_subject_header", RULE_STR, offsetof(struct conf_tls, client_subject_header), 0, 0,
     NULL, NULL},
    {"client_san_header", RULE_STR, offsetof(struct conf_tls, client_san_header), 0, 0, NULL, NULL},
    {"facts_headers", RULE_BOOL, offsetof(struct conf_tls, facts_headers), 0, 0, NULL, NULL},
    {"reload_s", RULE_UINT, offsetof(struct conf_tls, reload_s), 0, 86400, NULL, NULL},
    RULES_END,
};

/* A header name of listen[].tls, <def> when not given. */
static int tls_header(struct rules_ctx *x, yaml_node_t *v, const char *key, char **name,
		      const char *def)
{
	if (!*name && !(*name = strdup(def)))
		return rules_fail(x, v, "out of memory");
	if (!rules_header_name_ok(*name))
		return rules_fail(x, rules_value_of(x, v, key),
				  "tls: %s must be a header name (letters, digits, '-' ...)", key);
	return 0;
}

/* listen[].tls's mutual TLS keys: only with client_ca, and consistent. */
static int read_tls_client(struct rules_ctx *x, yaml_node_t *v, struct conf_tls *t)
{
	if (!t->client_ca && (t->client_auth || t->client_crl))
		return rules_fail(
		    x, rules_value_of(x, v, t->client_auth ? "client_auth" : "client_crl"),
		    "tls: client_auth and client_crl need client_ca (the CAs client "
		    "certificates must chain to)");
	if (t->client_auth && strcmp(t->client_auth, "required") != 0 &&
	    strcmp(t->client_auth, "optional") != 0)
		return rules_fail(x, rules_value_of(x, v, "client_auth"),
				  "tls: client_auth is \"required\" or \"optional\"");
	if (!rules_value_of(x, v, "verify_depth"))
		t->verify_depth = 3;
	if (tls_header(x, v, "client_subject_header", &t->client_subject_header,
		       "X-Client-Subject") ||
	    tls_header(x, v, "client_san_header", &t->client_san_header, "X-Client-SAN"))
		return -EINVAL;
	return 0;
}

/* listen[].tls: read, then built once with the listener's own code (net/tls_listen.c), so a
 * certificate that does not load, a key that does not match or an unknown cipher is refused
 * here, with its place, and never at start-up. */
int schema_read_tls(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_listen *l = field;
	char err[300];
	(void)r;
	if (!(l->tls = calloc(1, sizeof(*l->tls))))
		return rules_fail(x, v, "out of memory");
	struct conf_tls *t = l->tls;
	int rc = rules_read_section(x, v, "tls", schema_tls_rules, t);
	if (rc)
		return rc;
	if (!t->first.cert != !t->first.key)
		return rules_fail(x, v, "tls: 'cert' and 'key' go together");
	if (!t->first.cert && !t->nmore)
		return rules_fail(x, v,
				  "tls: a certificate is required: 'cert' and 'key' (PEM files)");
	if (t->min_version && strcmp(t->min_version, "1.2") != 0 &&
	    strcmp(t->min_version, "1.3") != 0)
		return rules_fail(x, rules_value_of(x, v, "min_version"),
				  "tls: min_version is \"1.2\" or \"1.3\" (older versions are not "
				  "offered)");
	if ((rc = read_tls_client(x, v, t)))
		return rc;
	struct net_tls_listener *built = NULL;
	rc = conf_tls_build(t, &built, err, sizeof(err));
	net_tls_listener_free(built);
	if (rc)
		return rules_fail(x, v, "tls: %s", err);
	return 0;
}

/* --- pools[].tls, backends[].tls --- */

static int is_ip_literal(const char *host)
{
	unsigned char a[sizeof(struct in6_addr)];
	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

const struct rule schema_backend_tls_rules[] = {
    {"sni", RULE_STR, offsetof(struct conf_backend, tls.sni), 0, 0, NULL, NULL},
    {"verify_name", RULE_STR, offsetof(struct conf_backend, tls.verify_name), 0, 0, NULL, NULL},
    RULES_END,
};

/* backends[].tls: names of one backend of a TLS pool (the pool's tls says the rest). */
int schema_read_backend_tls(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_backend *b = field;
	int rc = rules_read_section(x, v, "tls", r->sub, b);
	if (rc)
		return rc;
	b->tls.given = 1;
	if (b->tls.sni && (!b->tls.sni[0] || is_ip_literal(b->tls.sni)))
		return rules_fail(x, rules_value_of(x, v, "sni"),
				  "tls: sni is a host name (SNI never carries an address)");
	if (b->tls.verify_name && !b->tls.verify_name[0])
		return rules_fail(x, rules_value_of(x, v, "verify_name"),
				  "tls: verify_name is a host name or address");
	return 0;
}

const struct rule schema_upstream_tls_rules[] = {
    {"ca", RULE_STR, offsetof(struct conf_upstream_tls, ca), 0, 0, NULL, NULL},
    {"verify", RULE_BOOL, offsetof(struct conf_upstream_tls, verify), 0, 0, NULL, NULL},
    {"sni", RULE_STR, offsetof(struct conf_upstream_tls, sni), 0, 0, NULL, NULL},
    {"verify_name", RULE_STR, offsetof(struct conf_upstream_tls, verify_name), 0, 0, NULL, NULL},
    {"cert", RULE_STR, offsetof(struct conf_upstream_tls, cert), 0, 0, NULL, NULL},
    {"key", RULE_STR, offsetof(struct conf_upstream_tls, key), 0, 0, NULL, NULL},
    {"ciphers", RULE_STR, offsetof(struct conf_upstream_tls, ciphers), 0, 0, NULL, NULL},
    {"ciphersuites", RULE_STR, offsetof(struct conf_upstream_tls, ciphersuites), 0, 0, NULL, NULL},
    {"min_version", RULE_STR, offsetof(struct conf_upstream_tls, min_version), 0, 0, NULL, NULL},
    RULES_END,
};

/* pools[].tls: read, then the client context built once, so a CA, certificate or key file
 * that does not load, or a cipher list OpenSSL does not know, is refused here with its
 * place. Each backend's names are resolved in check_pool(), once its address is known. */
int schema_read_upstream_tls(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_pool *p = field;
	char err[300];
	(void)r;
	if (!(p->tls = calloc(1, sizeof(*p->tls))))
		return rules_fail(x, v, "out of memory");
	struct conf_upstream_tls *t = p->tls;
	t->verify = 1;
	int rc = rules_read_section(x, v, "tls", schema_upstream_tls_rules, t);
	if (rc)
		return rc;
	if (!t->cert != !t->key)
		return rules_fail(x, v,
				  "tls: 'cert' and 'key' (the client certificate) go together");
	if (t->min_version && strcmp(t->min_version, "1.2") != 0 &&
	    strcmp(t->min_version, "1.3") != 0)
		return rules_fail(x, rules_value_of(x, v, "min_version"),
				  "tls: min_version is \"1.2\" or \"1.3\" (older versions are not "
				  "offered)");
	if (t->sni && (!t->sni[0] || is_ip_literal(t->sni)))
		return rules_fail(x, rules_value_of(x, v, "sni"),
				  "tls: sni is a host name (SNI never carries an address; leave it "
				  "out to send none)");
	if (t->verify_name && !t->verify_name[0])
		return rules_fail(x, rules_value_of(x, v, "verify_name"),
				  "tls: verify_name is a host name or address");
	if (!t->verify && (t->ca || t->verify_name))
		return rules_fail(x, v,
				  "tls: 'ca' and 'verify_name' mean nothing with verify: false");
	struct ssl_ctx_st *built = NULL;
	rc = conf_upstream_tls_build(t, &built, err, sizeof(err));
	net_tls_ctx_free(built);
	if (rc)
		return rules_fail(x, v, "tls: %s", err);
	return 0;
}

/* With pools[].tls: the name backend <b> gets as SNI, and the one its certificate must
 * carry: its own (backends[].tls), else the pool's, else its host (an address: no SNI).
 * 0 or -ENOMEM. */
int schema_backend_tls_names(const struct conf_upstream_tls *t, struct conf_backend *b)
{
	char host[256];
	const char *a = b->ep.address;
	snprintf(host, sizeof(host), "%s", a[0] == '[' ? a + 1 : a);
	char *end = a[0] == '[' ? strchr(host, ']') : strrchr(host, ':');
	if (end)
		*end = '\0';
	const char *sni = b->tls.sni		? b->tls.sni
			  : t->sni		? t->sni
			  : is_ip_literal(host) ? NULL
						: host;
	const char *name = b->tls.verify_name ? b->tls.verify_name
			   : b->tls.sni	      ? b->tls.sni
			   : t->verify_name   ? t->verify_name
			   : sni	      ? sni
					      : host;
	if (sni && !(b->tls_sni = strdup(sni)))
		return -ENOMEM;
	if (t->verify && !(b->tls_verify_name = strdup(name)))
		return -ENOMEM;
	return 0;
}
