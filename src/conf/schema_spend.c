/*
 * schema_spend.c - prices: and routes[].budget (see schema_spend.h).
 *
 * Amounts are plain decimals in the operator's currency, read exactly into micro-units
 * (policy/spend_math.h: spend_parse_amount): "0.15" or 0.15, at most six digits after the
 * point, no sign or exponent, at most 1000000. A model is priced by the exact name a client
 * writes in "model" (no patterns: a price that silently covered a model it was not meant for
 * would be worse than a refusal).
 */
#include "conf/schema_spend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An amount at <v> into *out: 0, or a message naming <what>. */
static int read_amount(struct rules_ctx *x, yaml_node_t *v, const char *what, uint64_t *out)
{
	const char *s = rules_scalar(v);
	int rc = s ? spend_parse_amount(s, out) : -EINVAL;
	if (rc == -ERANGE)
		return rules_fail(x, v, "%s: at most %llu", what,
				  (unsigned long long)SPEND_AMOUNT_MAX);
	if (rc < 0)
		return rules_fail(x, v,
				  "%s: expected a decimal amount such as 0.15 (no sign or "
				  "exponent, at most six digits after the point)",
				  what);
	return 0;
}

static int read_price(struct rules_ctx *x, const char *model, yaml_node_t *v, struct spend_price *p)
{
	static const char *const keys[] = {"input", "cached_input", "output"};
	uint64_t *fields[] = {&p->input, &p->cached_input, &p->output};
	int given[3] = {0, 0, 0};
	if (v->type != YAML_MAPPING_NODE)
		return rules_fail(x, v,
				  "prices: %s: expected {input: ..., output: ...} (per million "
				  "tokens), found %s",
				  model, rules_kind_name(v));
	for (yaml_node_pair_t *pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *k = rules_node(x, pr->key), *val = rules_node(x, pr->value);
		const char *name = rules_scalar(k);
		size_t i = 0;
		while (i < 3 && (!name || strcmp(name, keys[i]) != 0))
			i++;
		if (i == 3)
			return rules_fail(x, k,
					  "prices: %s: unknown key '%s' (expected input, "
					  "cached_input, output)",
					  model, name ? name : "?");
		if (given[i])
			return rules_fail(x, k, "prices: %s: %s is given twice", model, keys[i]);
		char what[64];
		snprintf(what, sizeof(what), "prices: %.32s: %s", model, keys[i]);
		if (read_amount(x, val, what, fields[i]) < 0)
			return -EINVAL;
		given[i] = 1;
	}
	if (!given[0] || !given[2])
		return rules_fail(
		    x, v, "prices: %s: give both input and output (per million tokens)", model);
	if (!given[1])
		p->cached_input = p->input;
	return 0;
}

int schema_read_prices(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf *c = field;
	(void)r;
	if (v->type != YAML_MAPPING_NODE)
		return rules_fail(x, v,
				  "prices: expected a mapping of model names, e.g. prices: "
				  "{gpt-4o-mini: {input: 0.15, output: 0.60}}");
	size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	for (size_t i = 0; i < c->nprices; i++)
		free(c->prices[i].model);
	free(c->prices);
	c->nprices = 0;
	if (!(c->prices = calloc(n ? n : 1, sizeof(*c->prices))))
		return rules_fail(x, v, "out of memory");
	for (yaml_node_pair_t *pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *k = rules_node(x, pr->key);
		const char *name = rules_scalar(k);
		size_t len = name ? strlen(name) : 0;
		if (!len || len > CONF_MODEL_MAX)
			return rules_fail(x, k, "prices: expected a model name (1 to 255 bytes)");
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
				return rules_fail(x, k,
						  "prices: a model name holds a control byte");
		for (size_t i = 0; i < c->nprices; i++)
			if (strcmp(c->prices[i].model, name) == 0)
				return rules_fail(x, k, "prices: '%s' is priced twice", name);
		struct conf_price *p = &c->prices[c->nprices];
		if (read_price(x, name, rules_node(x, pr->value), &p->price) < 0)
			return -EINVAL;
		if (!(p->model = strdup(name)))
			return rules_fail(x, k, "out of memory");
		c->nprices++;
	}
	return 0;
}

static int read_budget_amount(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			      void *field)
{
	(void)r;
	uint64_t *out = field;
	if (read_amount(x, v, "budget: per_tenant", out) < 0)
		return -EINVAL;
	if (!*out)
		return rules_fail(x, v, "budget: per_tenant: must be more than 0");
	return 0;
}

static int read_window(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	const char *s = rules_scalar(v);
	(void)r;
	if (!s || spend_parse_window(s, field) < 0)
		return rules_fail(x, v,
				  "budget: window: expected a whole number of s, m, h or d, such "
				  "as 1h, 1d, 7d or 30d (1s to 3660d)");
	return 0;
}

const struct rule schema_budget_rules[] = {
    {"per_tenant", RULE_SECTION, offsetof(struct conf_budget, per_tenant), 0, 0, NULL,
     read_budget_amount},
    {"window", RULE_SECTION, offsetof(struct conf_budget, window_s), 0, 0, NULL, read_window},
    {"default_max_tokens", RULE_UINT, offsetof(struct conf_budget, default_max_tokens), 1, 10000000,
     NULL, NULL},
    {"tenants", RULE_UINT, offsetof(struct conf_budget, tenants), 16, CONF_BUDGET_TENANTS_MAX, NULL,
     NULL},
    RULES_END,
};

int schema_read_budget(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_route *rt = field;
	(void)r;
	free(rt->budget);
	if (!(rt->budget = calloc(1, sizeof(*rt->budget))))
		return rules_fail(x, v, "out of memory");
	struct conf_budget *b = rt->budget;
	b->default_max_tokens = 256;
	b->window_s = 86400;
	b->tenants = CONF_BUDGET_TENANTS;
	int rc = rules_read_section(x, v, "budget", schema_budget_rules, b);
	if (!rc && !b->per_tenant)
		return rules_fail(x, v,
				  "budget: give per_tenant, e.g. {per_tenant: 10.00, window: 1d}");
	return rc;
}

int schema_spend_check(struct rules_ctx *x, yaml_node_t *root, yaml_node_t *routes, struct conf *c)
{
	for (size_t i = 0; i < c->nroutes; i++) {
		const struct conf_route *rt = &c->routes[i];
		if (!rt->budget)
			continue;
		yaml_node_t *n = NULL;
		if (routes && routes->type == YAML_SEQUENCE_NODE &&
		    routes->data.sequence.items.start + i < routes->data.sequence.items.top)
			n = rules_value_of(x, rules_node(x, routes->data.sequence.items.start[i]),
					   "budget");
		if (!rt->auth)
			return rules_fail(x, n ? n : root,
					  "routes: budget: needs auth (a budget is each "
					  "authenticated tenant's)");
		if (rt->websocket)
			return rules_fail(x, n ? n : root,
					  "routes: budget: not with websocket (a tunnel's messages "
					  "cannot be priced)");
		if (!c->nprices)
			return rules_fail(x, n ? n : root,
					  "routes: budget: needs the top-level prices "
					  "(e.g. prices: {MODEL: {input: 0.15, output: 0.60}})");
	}
	return 0;
}
