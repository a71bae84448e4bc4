/*
 * schema_model.h - the keys of the config that name models: a route's match.model (a '*'
 * and '?' pattern on the request body's "model") and a backend's models (the names it
 * serves), as readers for conf/schema.c's sections.
 */
#ifndef ACCELNET_CONF_SCHEMA_MODEL_H
#define ACCELNET_CONF_SCHEMA_MODEL_H

#include "conf/rules.h"

/* routes[].match.model (obj: the struct conf_route). */
int schema_read_match_model(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj);
/* pools[].backends[].models (obj: the struct conf_backend). */
int schema_read_backend_models(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			       void *obj);

/* c->models: what GET /v1/models answers (conf/model.h), once the routes know their pools;
 * refused at <routes> when it would not fit CONF_MODELS_JSON_MAX. 0 or -EINVAL. */
int schema_model_list(struct rules_ctx *x, yaml_node_t *routes, struct conf *c);

#endif
