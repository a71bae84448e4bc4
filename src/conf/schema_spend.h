/*
 * schema_spend.h - the top-level prices: (each model's price per million tokens) and
 * routes[].budget (what each tenant may spend per window), and the check that ties them:
 * a route with a budget authenticates its tenants, has prices to charge by and opens no
 * WebSocket tunnel (whose messages no one prices).
 */
#ifndef ACCELNET_CONF_SCHEMA_SPEND_H
#define ACCELNET_CONF_SCHEMA_SPEND_H

#include "conf/rules.h"

/* prices: {MODEL: {input, cached_input, output}} (field: unused; into struct conf) */
int schema_read_prices(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* routes[].budget (field: the struct conf_route) */
extern const struct rule schema_budget_rules[];
int schema_read_budget(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* The whole config read: every route with a budget has auth and no websocket, and prices:
 * is given. 0, or -EINVAL with the message at the budget. */
int schema_spend_check(struct rules_ctx *x, yaml_node_t *root, yaml_node_t *routes, struct conf *c);

#endif
