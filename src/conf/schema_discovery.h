/*
 * schema_discovery.h - the keys of service discovery: the top-level discovery: section (how
 * names are resolved) and backends[].discover / max_backends (which backends are names),
 * with the address reader that leaves such a name unresolved at load, and the check of a
 * pool that has them.
 */
#ifndef ACCELNET_CONF_SCHEMA_DISCOVERY_H
#define ACCELNET_CONF_SCHEMA_DISCOVERY_H

#include "conf/rules.h"

#define DISCOVER_MAX_DEFAULT 16

/* discovery: (field: struct conf) */
extern const struct rule schema_discovery_rules[];
int schema_read_discovery(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);
void schema_discovery_defaults(struct conf *c);

/* backends[].discover (field: enum conf_discover) */
int schema_read_backend_discover(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				 void *field);
/* backends[].address (field: the backend's struct conf_listen): resolved now, unless the
 * backend's discover (read before it) says it is a name to resolve while running */
int schema_read_backend_address(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				void *field);
/* A pool's backends with discover: each has max_backends slots; the pool's total fits. */
int schema_discovery_check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p);

#endif
