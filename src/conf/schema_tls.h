/*
 * schema_tls.h - the tls: sections of the config schema: listen[].tls, pools[].tls and
 * backends[].tls, as rule tables and readers for conf/schema.c's sections.
 */
#ifndef ACCELNET_CONF_SCHEMA_TLS_H
#define ACCELNET_CONF_SCHEMA_TLS_H

#include "conf/rules.h"

/* listen[].tls: its keys, and the reader (field: the struct conf_listen). */
extern const struct rule schema_tls_rules[];
int schema_read_tls(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* backends[].tls: a backend's own names (field: the struct conf_backend). */
extern const struct rule schema_backend_tls_rules[];
int schema_read_backend_tls(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* pools[].tls: its keys, and the reader (field: the struct conf_pool). */
extern const struct rule schema_upstream_tls_rules[];
int schema_read_upstream_tls(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			     void *field);

/* With pools[].tls <t>: the name backend <b> gets as SNI, and the one its certificate must
 * carry: its own (backends[].tls), else the pool's, else its host (an address: no SNI).
 * 0 or -ENOMEM. */
int schema_backend_tls_names(const struct conf_upstream_tls *t, struct conf_backend *b);

#endif
