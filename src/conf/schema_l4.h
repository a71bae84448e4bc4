/*
 * schema_l4.h - listen[].mode: tcp: a listener that relays raw TCP to one pool's backends
 * (proxy/l4.h). Its keys are read with the other listener keys (conf/schema.c); what is here
 * is the check that ties a listener to its pool once every pool is read, and refuses what
 * an L4 connection cannot honour (docs/l4.md); and the reader of pools[].proxy_protocol.
 */
#ifndef ACCELNET_CONF_SCHEMA_L4_H
#define ACCELNET_CONF_SCHEMA_L4_H

#include "conf/rules.h"

/*
 * Resolve each tcp listener's pool among the pools of <c> (marking the pool l4) and refuse,
 * at the offending value: a tcp listener without a pool or with one no pool is named, one
 * with tls:, a pool: on an HTTP listener; and an L4 pool whose balancer reads what only an
 * HTTP request has (latency, a prompt, hash.key other than client_ip), or with pools.tls
 * or disaggregation; and pools.proxy_protocol on a pool that is not L4. 0 or -1 (the
 * message given).
 */
int schema_check_l4(struct rules_ctx *x, yaml_node_t *root, struct conf *c);

/* listen[].sni: its item keys, and the reader (field: the struct conf_listen). */
extern const struct rule schema_sni_rules[];
int schema_read_sni(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* pools[].proxy_protocol: none | v1 | v2 (field: the pool's unsigned proxy_protocol). */
int schema_read_proxy_protocol(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			       void *field);

#endif
