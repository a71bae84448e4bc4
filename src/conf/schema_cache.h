/*
 * schema_cache.h - the keys of the response cache: the top-level cache: section (the store)
 * and routes[].cache (true, or a mapping of what the route allows), as rule tables and
 * readers for conf/schema.c, and the check that ties the two.
 */
#ifndef ACCELNET_CONF_SCHEMA_CACHE_H
#define ACCELNET_CONF_SCHEMA_CACHE_H

#include "conf/rules.h"

/* cache: (field: struct conf_cache) */
extern const struct rule schema_cache_rules[];
int schema_read_cache(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* routes[].cache: true, false or a mapping (field: struct conf_route_cache) */
extern const struct rule schema_route_cache_rules[];
int schema_read_route_cache(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* A route that caches needs the cache: section (<routes>: the routes list's node). */
int schema_cache_check(struct rules_ctx *x, yaml_node_t *root, yaml_node_t *routes, struct conf *c);

#endif
