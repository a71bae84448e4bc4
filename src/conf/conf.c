/*
 * conf.c - loading a config file whole: YAML text to a checked struct conf, or one message.
 *
 * conf/source.c makes the text one libyaml document whose nodes remember their file, line
 * and column (the file, what it includes, ${VAR} expanded); the schema (conf/schema.c) reads
 * that tree through the rule engine (conf/rules.c), so every complaint names FILE:LINE:COL.
 * A load builds a fresh struct conf and either returns it whole or frees it: the caller
 * keeps what it ran before. This file owns the life of a
 * struct conf (made, freed) and nothing about its keys.
 */
#include "conf/conf.h"
#include "conf/schema.h"
#include "conf/source.h"
#include "conf/schema_forward.h"
#include "conf/schema_tokmodel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* Read the document <src> built into a fresh struct conf; <src> is freed. */
static int conf_load(const char *name, struct conf_source *src, struct conf **out,
		     struct conf_error *err)
{
	struct conf *c = calloc(1, sizeof(*c));
	struct rules_ctx x = {.file = name, .doc = conf_source_doc(src), .err = err, .src = src};
	int rc = -EINVAL;

	if (!c || !(c->file = strdup(name))) {
		snprintf(err->msg, sizeof(err->msg), "%s: out of memory", name);
		rc = -ENOMEM;
		goto out;
	}
	schema_set_defaults(c);
	yaml_node_t *root = yaml_document_get_root_node(x.doc);
	if (!root)
		snprintf(err->msg, sizeof(err->msg), "%s:1:1: the file is empty", name);
	else
		rc = schema_read(&x, root, c);
out:
	conf_source_free(src);
	if (rc) {
		conf_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int conf_load_string(const char *name, const char *text, size_t len, struct conf **out,
		     struct conf_error *err)
{
	struct conf_source *src;
	int rc = conf_source_load_string(name, text, len, &src, err);
	return rc ? rc : conf_load(name, src, out, err);
}

int conf_load_file(const char *path, struct conf **out, struct conf_error *err)
{
	struct conf_source *src;
	int rc = conf_source_load_file(path, &src, err);
	return rc ? rc : conf_load(path, src, out, err);
}

static void tls_cert_free(struct conf_tls_cert *c)
{
	free(c->cert);
	free(c->key);
	free(c->ocsp_file);
}

static void conf_tls_free(struct conf_tls *t)
{
	if (!t)
		return;
	tls_cert_free(&t->first);
	for (size_t i = 0; i < t->nmore; i++)
		tls_cert_free(&t->more[i]);
	free(t->more);
	free(t->ciphers);
	free(t->ciphersuites);
	free(t->groups);
	free(t->min_version);
	free(t->client_ca);
	free(t->client_crl);
	free(t->client_auth);
	free(t->client_subject_header);
	free(t->client_san_header);
	free(t);
}

static void conf_upstream_tls_free(struct conf_upstream_tls *t)
{
	if (!t)
		return;
	free(t->ca);
	free(t->sni);
	free(t->verify_name);
	free(t->cert);
	free(t->key);
	free(t->ciphers);
	free(t->ciphersuites);
	free(t->min_version);
	free(t);
}

static void conf_auth_free(struct conf_auth *a)
{
	if (!a)
		return;
	free(a->api_keys_file);
	if (a->jwt) {
		free(a->jwt->keys_file);
		free(a->jwt->jwks_file);
		free(a->jwt->audience);
		free(a->jwt->issuer);
		free(a->jwt->tenant_claim);
		free(a->jwt);
	}
	if (a->basic) {
		free(a->basic->users_file);
		free(a->basic);
	}
	free(a->identity_header);
	for (size_t i = 0; i < a->ntenants; i++)
		free(a->tenants[i]);
	free(a->tenants);
	free(a);
}

void conf_free(struct conf *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nlistens; i++) {
		free(c->listens[i].address);
		free(c->listens[i].pool_name);
		for (size_t j = 0; j < c->listens[i].nsni; j++) {
			free(c->listens[i].sni[j].name);
			free(c->listens[i].sni[j].pool_name);
		}
		free(c->listens[i].sni);
		conf_tls_free(c->listens[i].tls);
	}
	free(c->listens);
	free(c->admin.address);
	free(c->admin_token_file);
	free(c->admin_state_file);
	free(c->access_log.path);
	free(c->access_log.syslog_socket);
	free(c->user);
	free(c->group);
	free(c->trusted_proxies);
	free(c->admin_backend_networks);
	free(c->discovery.resolvers);
	free(c->cluster.redis);
	free(c->cluster.host);
	free(c->cluster.key_prefix);
	free(c->cluster.password_file);
	for (size_t i = 0; i < c->npools; i++) {
		struct conf_pool *p = &c->pools[i];
		for (size_t j = 0; j < p->nbackends; j++) {
			free(p->backends[j].ep.address);
			free(p->backends[j].tls_sni);
			free(p->backends[j].tls_verify_name);
			free(p->backends[j].tls.sni);
			free(p->backends[j].tls.verify_name);
			for (size_t k = 0; k < p->backends[j].nmodels; k++)
				free(p->backends[j].models[k]);
			free(p->backends[j].models);
			free(p->backends[j].kv_events);
			free(p->backends[j].kv_events_replay);
			free(p->backends[j].discover_name);
			conf_fwd_free(p->backends[j].fwd);
		}
		free(p->backends);
		free(p->name);
		free(p->health.path);
		free(p->engine_metrics.path);
		free(p->engine.model);
		free(p->pd.prefill_name);
		free(p->hash.header);
		free(p->session.header);
		free(p->session.cookie);
		free(p->load_header);
		conf_upstream_tls_free(p->tls);
		lb_state_free(&p->lb);
		conf_fwd_free(p->fwd);
	}
	free(c->pools);
	for (size_t i = 0; i < c->nroutes; i++) {
		struct conf_route *r = &c->routes[i];
		free(r->name);
		free(r->path_prefix);
		free(r->host);
		free(r->sni);
		free(r->method);
		free(r->header_name);
		free(r->header_value);
		free(r->model);
		free(r->priority_header);
		free(r->tenant_header);
		conf_auth_free(r->auth);
		free(r->rate_limit);
		free(r->budget);
		conf_fwd_free(r->fwd);
	}
	free(c->routes);
	for (size_t i = 0; i < c->nprices; i++)
		free(c->prices[i].model);
	free(c->prices);
	schema_tokmodels_free(c);
	free(c->cache.eviction);
	free(c->cache.tag_header);
	free(c->models.json);
	free(c->models.names);
	free(c->models.obj);
	free(c->file);
	free(c);
}

void conf_print_keys(FILE *out)
{
	schema_print_keys(out);
}
