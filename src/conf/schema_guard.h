/*
 * schema_guard.h - the guard's sections of the config schema: routes[].auth,
 * routes[].rate_limit and routes[].api as rule tables and readers for conf/schema.c's route
 * table, and the reader of a rate ("100/s", "600/m", "1000/h").
 */
#ifndef ACCELNET_CONF_SCHEMA_GUARD_H
#define ACCELNET_CONF_SCHEMA_GUARD_H

#include "conf/rules.h"

/* routes[].auth (field: the struct conf_route). */
extern const struct rule schema_auth_rules[];
int schema_read_auth(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* routes[].rate_limit (field: the struct conf_route). */
extern const struct rule schema_rate_limit_rules[];
int schema_read_rate_limit(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* A rate into the struct conf_rate at <field>. */
int schema_read_rate(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* routes[].api: openai or none (field: the unsigned it sets). */
int schema_read_api(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

#endif
