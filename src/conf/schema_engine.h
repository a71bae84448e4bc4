/*
 * schema_engine.h - the keys by which a pool learns from the inference engines behind it:
 * pools[].engine (speak the engine's own gRPC API, tokenizing in the proxy),
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
/* backends[].kv_events_replay: "tcp://HOST:PORT" of the engine's replay socket. */
int schema_read_kv_events_replay(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				 void *field);
/* A backend entry <item> read whole: kv_events_replay only with kv_events, on another
 * address. 0 or the error reported. */
int schema_engine_check_backend(struct rules_ctx *x, yaml_node_t *item,
				const struct conf_backend *b);

/* Pool <p> (entry <item>, pools[<i>] of <c>) read whole: its backends' kv_events sockets
 * against those of every backend before them, the earlier pools' included: a replay socket
 * is one engine's, so two backends give the same kv_events_replay only with the same
 * kv_events (the same engine, in two pools), and no backend's kv_events is another's
 * kv_events_replay. 0 or the error reported. */
int schema_engine_check_kv_sockets(struct rules_ctx *x, yaml_node_t *item, const struct conf *c,
				   size_t i, const struct conf_pool *p);

/* pools[].engine: {api, model} (field: the struct conf_engine). */
extern const struct rule schema_engine_rules[];
int schema_read_engine(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* Once the whole config is read: pool <i>'s engine names a model with a tokenizer, and its
 * backends speak HTTP/2. 0 or -1 (the failure told, at <item>'s engine). */
int schema_engine_check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf *c, size_t i);

/* The defaults of pools[].engine_metrics, before a block is read. */
void schema_engine_metrics_defaults(struct conf_engine_metrics *e);

#endif
