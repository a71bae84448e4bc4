/*
 * schema_cluster.h - the top-level cluster: section: where the Redis that instances share
 * their limits through listens, how often they sync, and how they name and reach it.
 */
#ifndef ACCELNET_CONF_SCHEMA_CLUSTER_H
#define ACCELNET_CONF_SCHEMA_CLUSTER_H

#include "conf/rules.h"

/* cluster: (field: struct conf_cluster) */
extern const struct rule schema_cluster_rules[];
int schema_read_cluster(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);
void schema_cluster_defaults(struct conf *c);

#endif
