/*
 * schema_engine.h - the keys by which a pool learns from the inference engines behind it:
 * pools[].engine_metrics (scrape their Prometheus metrics as a load signal) and
 * backends[].kv_events (subscribe to a backend's KV-cache events), as rule tables and
 * readers for conf/schema.c's sections.
 */
#ifndef ACCELNET_CONF_SCHEMA_ENGINE_H
#define ACCELNET_CONF_SCHEMA_ENGINE_H

#include "conf/rules.h"

/* pools[].engine_metrics: its keys, and the reader (field: the struct conf_engine_metrics). */
extern const struct rule schema_engine_metrics_rules[];
int schema_read_engine_metrics(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			       void *field);

/* backends[].kv_events: "tcp://HOST:PORT" (field: the char * of struct conf_backend). */
int schema_read_kv_events(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* The defaults of pools[].engine_metrics, before a block is read. */
void schema_engine_metrics_defaults(struct conf_engine_metrics *e);

#endif
