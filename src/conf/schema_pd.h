/*
 * schema_pd.h - pools[].disaggregation: the pool decodes, and its requests are prefilled first
 * on another pool (proxy/pd.h), as a rule table and reader for conf/schema.c's pool section,
 * and the check that resolves the prefill pool once every pool is read.
 */
#ifndef ACCELNET_CONF_SCHEMA_PD_H
#define ACCELNET_CONF_SCHEMA_PD_H

#include "conf/rules.h"

/* pools[].disaggregation: its keys, and the reader (field: the struct conf_pd). */
extern const struct rule schema_pd_rules[];
int schema_read_pd(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/*
 * Resolve pool <i>'s prefill_pool (its item node <item>) among the pools of <c>: refused at
 * the value when no pool has that name, when it is the pool itself, or when the prefill pool
 * decodes for another (a chain, and so any cycle). 0 or -1 (the message given).
 */
int schema_pd_check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf *c, size_t i);

#endif
