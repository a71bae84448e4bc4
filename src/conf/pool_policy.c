/*
 * pool_policy.c - the balancers' own keys, read from their declarations.
 *
 * Each balancer lists the config keys it reads as plain data in its ops table (policy/opt.h):
 * name, section, type, bounds, default, offset into its per-pool state. Here those lists
 * become ordinary rules of the pool's key table, so the rule engine reads them, reports
 * their errors and dumps them (`accelnet check --keys`) like any schema key. Because the
 * pool's balancer may be named after its keys, the checks wait until the whole pool is
 * read: a key of another balancer is refused when it asks for something (true, or a number
 * other than 0; false or 0 is the same as leaving it out), and the chosen one's keys not
 * given take their declared defaults. The lb_ops flags say the rest: a keyed balancer takes
 * the pool's hash: section (how the proxy hashes a request, conf_hash), a prompt-keyed one
 * hashes the prompt and so refuses hash.key.
 */
#include "conf/pool_policy.h"
#include "core/check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Does <a> hold the rule named <name>? Returns it, or NULL. */
static struct rule *rule_named(struct rule *a, const char *name)
{
	for (; a->name; a++)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

static size_t rules_count(const struct rule *a)
{
	size_t n = 0;
	while (a[n].name)
		n++;
	return n;
}

static void rule_append(struct rule *a, struct rule r)
{
	size_t n = rules_count(a);
	ASSERT(n + 1 < POOL_POLICY_RULES_MAX);
	a[n] = r;
	a[n + 1] = (struct rule)RULES_END;
}

/* The table that keys of <section> go into, made on first use. */
static struct rule *section_table(struct pool_policy_tables *t, const char *section)
{
	struct rule *r = rule_named(t->pool, section);
	for (size_t i = 0; r && i < t->nsections; i++)
		if (r->sub == t->sections[i])
			return t->sections[i];
	ASSERT(t->nsections < POOL_POLICY_SECTIONS_MAX);
	struct rule *sub = t->sections[t->nsections++];
	sub[0] = (struct rule)RULES_END;
	if (r) {
		ASSERT(r->kind == RULE_SECTION && r->sub);
		ASSERT(rules_count(r->sub) < POOL_POLICY_RULES_MAX);
		memcpy(sub, r->sub, (rules_count(r->sub) + 1) * sizeof(*sub));
		r->sub = sub;
	} else {
		rule_append(t->pool, (struct rule){section, RULE_SECTION, 0, 0, 0, sub, NULL});
	}
	return sub;
}

void pool_policy_build_rules(struct pool_policy_tables *t, const struct rule *base)
{
	ASSERT(rules_count(base) < POOL_POLICY_RULES_MAX);
	memcpy(t->pool, base, (rules_count(base) + 1) * sizeof(*base));
	t->nsections = 0;
	const struct lb_ops *ops;
	for (size_t i = 0; (ops = lb_at(i)); i++) {
		for (const struct policy_opt *o = ops->opts; o && o->name; o++) {
			struct rule *table = o->section ? section_table(t, o->section) : t->pool;
			struct rule r = {o->name,
					 o->type == POLICY_OPT_BOOL ? RULE_BOOL : RULE_UINT,
					 offsetof(struct conf_pool, lb) + o->off,
					 o->min,
					 o->max,
					 NULL,
					 NULL};
			struct rule *had = rule_named(table, o->name);
			if (had) { /* declared by an earlier balancer: the same key */
				ASSERT(had->kind == r.kind && had->off == r.off);
				ASSERT(had->min == r.min && had->max == r.max);
				continue;
			}
			rule_append(table, r);
		}
	}
}

/* Does <ops> declare the key <section>.<name>? */
static const struct policy_opt *declared(const struct lb_ops *ops, const struct policy_opt *k)
{
	for (const struct policy_opt *o = ops->opts; o && o->name; o++)
		if (strcmp(o->name, k->name) == 0 &&
		    (o->section && k->section ? strcmp(o->section, k->section) == 0
					      : o->section == k->section))
			return o;
	return NULL;
}

enum which { DECLARES, KEYED, KEYED_BY_HASH_KEY };

/* "a", "a and b", "a, b and c": the balancers that <which> (of <k>, for DECLARES). */
static void names_of(char *out, size_t len, enum which which, const struct policy_opt *k)
{
	const struct lb_ops *ops, *list[32];
	size_t n = 0, used = 0;
	for (size_t i = 0; (ops = lb_at(i)) && n < 32; i++)
		if ((which == DECLARES && declared(ops, k)) || (which == KEYED && ops->keyed) ||
		    (which == KEYED_BY_HASH_KEY && ops->keyed && !ops->prompt))
			list[n++] = ops;
	out[0] = '\0';
	for (size_t i = 0; i < n && used < len; i++)
		used += (size_t)snprintf(out + used, len - used, "%s%s",
					 i == 0	      ? ""
					 : i + 1 == n ? " and "
						      : ", ",
					 list[i]->name);
}

/* The node of <k>'s value in the pool mapping <item>, or NULL when not given. */
static yaml_node_t *given(struct rules_ctx *x, yaml_node_t *item, const struct policy_opt *k)
{
	yaml_node_t *in = k->section ? rules_value_of(x, item, k->section) : item;
	return in ? rules_value_of(x, in, k->name) : NULL;
}

static unsigned *value_at(struct conf_pool *p, const struct policy_opt *k)
{
	return (unsigned *)(void *)((char *)&p->lb + k->off);
}

/* Refuse a key that another balancer declares and that <p>'s does not, given a value. */
static int check_foreign(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p)
{
	const struct lb_ops *ops;
	char names[256];
	for (size_t i = 0; (ops = lb_at(i)); i++)
		for (const struct policy_opt *k = ops->opts; k && k->name; k++) {
			if (declared(p->balance, k) || !given(x, item, k) || !*value_at(p, k))
				continue;
			names_of(names, sizeof(names), DECLARES, k);
			return rules_fail(x, item, "pool '%s': %s%s%s is for %s balancing", p->name,
					  k->section ? k->section : "", k->section ? "." : "",
					  k->name, names);
		}
	return 0;
}

int pool_policy_check(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p)
{
	const struct lb_ops *lb = p->balance;
	yaml_node_t *hash = rules_value_of(x, item, "hash");
	char names[256];

	if (hash && !lb->keyed) {
		names_of(names, sizeof(names), KEYED, NULL);
		return rules_fail(x, hash, "pool '%s': 'hash' is for %s balancing, not %s", p->name,
				  names, lb->name);
	}
	int err = check_foreign(x, item, p);
	if (err)
		return err;
	for (const struct policy_opt *k = lb->opts; k && k->name; k++)
		if (!given(x, item, k))
			*value_at(p, k) = k->def;
	if (lb->prompt) {
		if (p->hash.key != HASH_KEY_CLIENT_IP || p->hash.header) {
			names_of(names, sizeof(names), KEYED_BY_HASH_KEY, NULL);
			return rules_fail(x, hash,
					  "pool '%s': %s hashes the prompt; hash.key is for %s",
					  p->name, lb->name, names);
		}
		p->hash.key = HASH_KEY_PROMPT;
	}
	return 0;
}

int pool_policy_prepare(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p)
{
	unsigned *weights = NULL;
	const char **names = NULL;
	int err = 0;

	if (!p->balance->prepare)
		return 0;
	weights = calloc(p->nbackends, sizeof(*weights));
	names = calloc(p->nbackends, sizeof(*names));
	if (!weights || !names) {
		err = rules_fail(x, item, "out of memory");
		goto out;
	}
	for (size_t j = 0; j < p->nbackends; j++) {
		weights[j] = p->backends[j].weight;
		names[j] = p->backends[j].ep.address;
	}
	err = p->balance->prepare(&p->lb, weights, names, p->nbackends);
	if (err)
		err = rules_fail(x, item, "pool '%s': cannot prepare '%s' balancing (%s)", p->name,
				 p->balance->name, strerror(-err));
out:
	free(weights);
	free(names);
	return err;
}
