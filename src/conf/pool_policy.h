/*
 * pool_policy.h - a pool's balancer, as the config sees it: the keys each balancer declares
 * (policy/opt.h) turned into rules of the pool's tables, the checks that follow from the
 * chosen one, and building its state.
 */
#ifndef ACCELNET_CONF_POOL_POLICY_H
#define ACCELNET_CONF_POOL_POLICY_H

#include "conf/rules.h"

#define POOL_POLICY_RULES_MAX 40
#define POOL_POLICY_SECTIONS_MAX 4

/* The pool's key table and the section tables that balancers add keys to. */
struct pool_policy_tables {
	struct rule pool[POOL_POLICY_RULES_MAX];
	struct rule sections[POOL_POLICY_SECTIONS_MAX][POOL_POLICY_RULES_MAX];
	size_t nsections;
};

/*
 * Build the pool's key table in *t: the schema's <base> rules (offsets into struct
 * conf_pool), then every key a registered balancer declares, once each. A key declared in
 * a section that <base> has (hash) joins that section's table; one in a section it lacks
 * gets a new section. Tables that do not fit are a bug (asserted).
 */
void pool_policy_build_rules(struct pool_policy_tables *t, const struct rule *base);

/*
 * After the pool mapping <item> is read into <p> (its balancer chosen): refuse a hash:
 * section for an unkeyed balancer and another balancer's key given a value, set the
 * chosen balancer's defaults for keys not given, and fix the key of a prompt-keyed one.
 * 0, or -EINVAL with the message in x->err.
 */
int pool_policy_check(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p);

/* Build the balancer's per-pool state from the pool's backends (its prepare()). */
int pool_policy_prepare(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p);

#endif
