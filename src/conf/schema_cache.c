/*
 * schema_cache.c - cache: and routes[].cache (see schema_cache.h; docs/config.md, "Response
 * cache", lists every key with its default).
 */
#include "conf/schema_cache.h"
#include "policy/evict.h"

#include <stddef.h>
#include <string.h>

#define DAY_S 86400u

static int read_eviction(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	const char *s = rules_scalar(v);
	(void)r;
	if (!s || !evict_find(s))
		return rules_fail(x, v, "cache: eviction: expected one of %s", evict_names());
	return rules_read_string(x, v, field);
}

static int read_header_name(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	const char *s = rules_scalar(v);
	if (!s || !rules_header_name_ok(s))
		return rules_fail(x, v, "cache: %s: expected a header name", r->name);
	return rules_read_string(x, v, field);
}

const struct rule schema_cache_rules[] = {
    {"memory", RULE_SIZE, offsetof(struct conf_cache, memory), 65536, UINT64_C(1) << 40, NULL,
     NULL},
    {"max_object", RULE_SIZE, offsetof(struct conf_cache, max_object), 1, UINT64_C(1) << 32, NULL,
     NULL},
    {"shards", RULE_UINT, offsetof(struct conf_cache, shards), 1, 256, NULL, NULL},
    {"eviction", RULE_SECTION, offsetof(struct conf_cache, eviction), 0, 0, NULL, read_eviction},
    {"tag_header", RULE_SECTION, offsetof(struct conf_cache, tag_header), 0, 0, NULL,
     read_header_name},
    {"status_header", RULE_BOOL, offsetof(struct conf_cache, status_header), 0, 0, NULL, NULL},
    RULES_END,
};

int schema_read_cache(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_cache *c = field;
	(void)r;
	c->on = 1;
	c->memory = 256ull << 20;
	c->shards = 16;
	c->status_header = 1;
	int err = rules_read_section(x, v, "cache", schema_cache_rules, c);
	if (err)
		return err;
	if (c->shards & (c->shards - 1))
		return rules_fail(x, rules_value_of(x, v, "shards"),
				  "cache: shards: expected a power of two");
	if (c->memory / c->shards < 65536)
		return rules_fail(x, v,
				  "cache: memory: at least 64KiB per shard (%u shards): give more "
				  "memory or fewer shards",
				  c->shards);
	uint64_t share = c->memory / c->shards;
	if (!c->max_object)
		c->max_object = share / 2 < (8u << 20) ? share / 2 : (8u << 20);
	else if (c->max_object > share)
		return rules_fail(x, rules_value_of(x, v, "max_object"),
				  "cache: max_object: at most memory / shards (%llu bytes): an "
				  "object lives in one shard",
				  (unsigned long long)share);
	return 0;
}

const struct rule schema_route_cache_rules[] = {
    {"cookies", RULE_BOOL, offsetof(struct conf_route_cache, cookies), 0, 0, NULL, NULL},
    {"authorized", RULE_BOOL, offsetof(struct conf_route_cache, authorized), 0, 0, NULL, NULL},
    {"heuristic_pct", RULE_UINT, offsetof(struct conf_route_cache, heuristic_pct), 0, 100, NULL,
     NULL},
    {"heuristic_max_s", RULE_UINT, offsetof(struct conf_route_cache, heuristic_max_s), 0,
     365 * DAY_S, NULL, NULL},
    {"default_ttl_s", RULE_UINT, offsetof(struct conf_route_cache, default_ttl_s), 0, 365 * DAY_S,
     NULL, NULL},
    {"stale_while_revalidate_s", RULE_SECTION,
     offsetof(struct conf_route_cache, stale_while_revalidate_s), 0, 0, NULL, NULL},
    {"stale_if_error_s", RULE_SECTION, offsetof(struct conf_route_cache, stale_if_error_s), 0, 0,
     NULL, NULL},
    {"wait_ms", RULE_UINT, offsetof(struct conf_route_cache, wait_ms), 1, 600000, NULL, NULL},
    {"pass_s", RULE_UINT, offsetof(struct conf_route_cache, pass_s), 0, DAY_S, NULL, NULL},
    {"inference", RULE_BOOL, offsetof(struct conf_route_cache, inference), 0, 0, NULL, NULL},
    {"any_temperature", RULE_BOOL, offsetof(struct conf_route_cache, any_temperature), 0, 0, NULL,
     NULL},
    RULES_END,
};

static int read_seconds(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	uint64_t n;
	int err = rules_read_uint(x, v, 0, 365 * DAY_S, RULES_S, &n);
	(void)r;
	if (!err)
		*(int64_t *)field = (int64_t)n;
	return err;
}

int schema_read_route_cache(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_route_cache *rc = field;
	struct rule rules[sizeof(schema_route_cache_rules) / sizeof(schema_route_cache_rules[0])];
	const char *s = rules_scalar(v);
	(void)r;
	rc->heuristic_pct = 10;
	rc->heuristic_max_s = DAY_S;
	rc->stale_while_revalidate_s = -1;
	rc->stale_if_error_s = -1;
	rc->wait_ms = 5000;
	rc->pass_s = 10;
	if (s) {
		if (strcmp(s, "true") == 0)
			rc->on = 1;
		else if (strcmp(s, "false") == 0)
			rc->on = 0;
		else
			return rules_fail(x, v, "routes: cache: expected true, false or a mapping");
		return 0;
	}
	memcpy(rules, schema_route_cache_rules, sizeof(rules));
	for (size_t i = 0; rules[i].name; i++)
		if (rules[i].kind == RULE_SECTION)
			rules[i].fn = read_seconds;
	rc->on = 1;
	return rules_read_section(x, v, "cache", rules, rc);
}

int schema_cache_check(struct rules_ctx *x, yaml_node_t *root, yaml_node_t *routes, struct conf *c)
{
	for (size_t i = 0; i < c->nroutes; i++) {
		if (!c->routes[i].cache.on || c->cache.on)
			continue;
		yaml_node_t *n = NULL;
		if (routes && routes->type == YAML_SEQUENCE_NODE &&
		    routes->data.sequence.items.start + i < routes->data.sequence.items.top)
			n = rules_value_of(x, rules_node(x, routes->data.sequence.items.start[i]),
					   "cache");
		return rules_fail(x, n ? n : root,
				  "routes: cache: needs the top-level 'cache' section (its "
				  "memory), e.g. cache: {memory: 256MiB}");
	}
	return 0;
}
