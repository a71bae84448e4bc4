/*
 * schema_l4.c - the whole-config check of listen[].mode: tcp (see schema_l4.h).
 *
 * A pool serves either HTTP routes or tcp listeners, never both: its backends speak one
 * protocol, its health check is one kind (a TCP connect for an L4 pool, control/health.c),
 * and an L4 connection holds its backend slot for as long as it lasts, which a route's
 * queue would wait behind. conf/schema.c refuses a route or spillover to an L4 pool; this
 * file marks the pools, so it runs first.
 */
#include "conf/schema_l4.h"
#include "conf/model.h"
#include "policy/lb.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

const struct rule schema_sni_rules[] = {
    {"name", RULE_STR, offsetof(struct conf_sni_route, name), 0, 0, NULL, NULL},
    {"pool", RULE_STR, offsetof(struct conf_sni_route, pool_name), 0, 0, NULL, NULL},
    RULES_END,
};

/* A server name as a ClientHello carries one (net/sni.h), or "*." and one: lower-cased. */
static int sni_name_ok(char *s)
{
	size_t n = strlen(s);
	if (!strncmp(s, "*.", 2))
		s += 2, n -= 2;
	if (!n || n > 253)
		return 0;
	for (; *s; s++) {
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
			return 0;
		*s = (char)tolower((unsigned char)*s);
	}
	return 1;
}

static int read_sni_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_sni_route *r = obj;
	(void)i;
	int err = rules_read_section(x, item, "sni", schema_sni_rules, r);
	if (err)
		return err;
	if (!r->name || !r->pool_name)
		return rules_fail(x, item, "sni: each item needs 'name' and 'pool'");
	if (!sni_name_ok(r->name))
		return rules_fail(x, rules_value_of(x, item, "name"),
				  "sni: '%s' is no server name (letters, digits, '-', '.'; "
				  "or '*.' and one, for one label under it)",
				  r->name);
	return 0;
}

int schema_read_sni(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_listen *l = field;
	(void)r;
	return rules_read_list(x, v, "sni", (void **)&l->sni, &l->nsni, sizeof(*l->sni),
			       read_sni_item);
}

/* Index of the pool called <name> in <c>, or c->npools. */
static size_t pool_index(const struct conf *c, const char *name)
{
	size_t j = 0;
	while (j < c->npools && strcmp(c->pools[j].name, name) != 0)
		j++;
	return j;
}

/* The node of item <i> of the sequence under <key> of <root>, or <root>. */
static yaml_node_t *item_of(struct rules_ctx *x, yaml_node_t *root, const char *key, size_t i)
{
	yaml_node_t *seq = rules_value_of(x, root, key);
	if (!seq || seq->type != YAML_SEQUENCE_NODE)
		return root;
	if (seq->data.sequence.items.start + i >= seq->data.sequence.items.top)
		return root;
	return rules_node(x, seq->data.sequence.items.start[i]);
}

/* The value of <key> in mapping <item>, or <item> itself (a scalar listener). */
static yaml_node_t *value_or(struct rules_ctx *x, yaml_node_t *item, const char *key)
{
	yaml_node_t *v = item->type == YAML_MAPPING_NODE ? rules_value_of(x, item, key) : NULL;
	return v ? v : item;
}

static int check_listener(struct rules_ctx *x, yaml_node_t *item, struct conf *c,
			  struct conf_listen *l)
{
	if (!l->l4) {
		if (l->pool_name || l->nsni)
			return rules_fail(x, value_or(x, item, l->pool_name ? "pool" : "sni"),
					  "listen: '%s' is for 'mode: tcp'; an HTTP listener's "
					  "requests find their pool through routes",
					  l->pool_name ? "pool" : "sni");
		return 0;
	}
	if (!l->pool_name && !l->nsni)
		return rules_fail(x, value_or(x, item, "mode"),
				  "listen: 'mode: tcp' needs 'pool' (the pool whose backends get "
				  "the connections) or 'sni'");
	yaml_node_t *seq = value_or(x, item, "sni");
	for (size_t k = 0; k < l->nsni; k++) {
		struct conf_sni_route *r = &l->sni[k];
		yaml_node_t *it = seq->type == YAML_SEQUENCE_NODE
				      ? rules_node(x, seq->data.sequence.items.start[k])
				      : seq;
		r->pool = pool_index(c, r->pool_name);
		if (r->pool == c->npools)
			return rules_fail(x, value_or(x, it, "pool"), "sni: no pool named '%s'",
					  r->pool_name);
		c->pools[r->pool].l4 = 1;
	}
	if (l->tls)
		return rules_fail(x, value_or(x, item, "tls"),
				  "listen: 'mode: tcp' relays bytes as they are and terminates no "
				  "TLS; remove 'tls' (to route TLS by its server name untouched, "
				  "give 'sni')");
	if (!l->pool_name)
		return 0;
	size_t j = pool_index(c, l->pool_name);
	if (j == c->npools)
		return rules_fail(x, value_or(x, item, "pool"), "listen: no pool named '%s'",
				  l->pool_name);
	l->pool = j;
	c->pools[j].l4 = 1;
	return 0;
}

static int check_pool(struct rules_ctx *x, yaml_node_t *item, const struct conf_pool *p)
{
	const struct lb_ops *lb = p->balance;
	if (lb->latency || lb->prompt || lb->blocks)
		return rules_fail(x, value_or(x, item, "balance"),
				  "pools: '%s' takes 'mode: tcp' connections, which carry no "
				  "request for balance '%s' to read; use round-robin, "
				  "weighted-round-robin, least-connections, p2c or consistent-hash",
				  p->name, lb->name);
	if (lb->keyed && p->hash.key != HASH_KEY_CLIENT_IP)
		return rules_fail(x, value_or(x, item, "hash"),
				  "pools: '%s' takes 'mode: tcp' connections: hash.key can only be "
				  "client_ip",
				  p->name);
	if (p->tls)
		return rules_fail(x, value_or(x, item, "tls"),
				  "pools: '%s' takes 'mode: tcp' connections, relayed as they are: "
				  "'tls' to its backends is not possible",
				  p->name);
	if (p->pd.enabled)
		return rules_fail(x, value_or(x, item, "disaggregation"),
				  "pools: '%s' takes 'mode: tcp' connections: 'disaggregation' "
				  "needs HTTP requests",
				  p->name);
	return 0;
}

int schema_read_proxy_protocol(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			       void *field)
{
	static const char *const names[] = {"none", "v1", "v2"};
	(void)r;
	return rules_read_choice(x, v, "pools: proxy_protocol", names, 3, field);
}

int schema_check_l4(struct rules_ctx *x, yaml_node_t *root, struct conf *c)
{
	int http = 0;
	for (size_t i = 0; i < c->nlistens; i++) {
		http |= !c->listens[i].l4;
		if (check_listener(x, item_of(x, root, "listen", i), c, &c->listens[i]) < 0)
			return -1;
	}
	for (size_t j = 0; j < c->npools; j++) {
		yaml_node_t *item = item_of(x, root, "pools", j);
		if (c->pools[j].l4 && check_pool(x, item, &c->pools[j]) < 0)
			return -1;
		if (!c->pools[j].l4 && c->pools[j].proxy_protocol)
			return rules_fail(x, value_or(x, item, "proxy_protocol"),
					  "pools: '%s': proxy_protocol is for pools that take "
					  "'mode: tcp' connections (HTTP backends hear "
					  "X-Forwarded-For)",
					  c->pools[j].name);
		for (size_t k = 0; c->pools[j].l4 && k < c->pools[j].nbackends; k++)
			if (c->pools[j].backends[k].protocol != CONF_PROTO_HTTP1)
				return rules_fail(x, item,
						  "pools: '%s': protocol is for pools that serve "
						  "routes ('mode: tcp' relays bytes as they come)",
						  c->pools[j].name);
	}
	if (http && !c->nroutes && c->pools[0].l4)
		return rules_fail(x, item_of(x, root, "pools", 0),
				  "pools: without routes, HTTP requests go to the first pool, but "
				  "'%s' takes 'mode: tcp' connections; add routes, or put an HTTP "
				  "pool first",
				  c->pools[0].name);
	return 0;
}
