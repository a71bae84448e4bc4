/*
 * schema_pd.c - pools[].disaggregation (see schema_pd.h). The prefill pool is named, so it
 * is resolved only once every pool is read; a pool may not prefill for itself, and a prefill
 * pool is an ordinary pool: one that decodes for a third is refused, which rules out every
 * cycle as well as chains.
 */
#include "conf/schema_pd.h"

#include <string.h>

static int read_protocol(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	static const char *const names[] = {"vllm", "sglang"};
	struct conf_pd *pd = obj;
	(void)r;
	return rules_read_choice(x, v, "disaggregation: protocol", names, 2, &pd->protocol);
}

static int read_on_failure(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	static const char *const names[] = {"retry", "decode_only"};
	struct conf_pd *pd = obj;
	(void)r;
	return rules_read_choice(x, v, "disaggregation: on_prefill_failure", names, 2,
				 &pd->decode_only);
}

const struct rule schema_pd_rules[] = {
    {"prefill_pool", RULE_STR, offsetof(struct conf_pd, prefill_name), 0, 0, NULL, NULL},
    {"protocol", RULE_SECTION, 0, 0, 0, NULL, read_protocol},
    {"min_prompt_bytes", RULE_UINT, offsetof(struct conf_pd, min_prompt_bytes), 0, 1u << 30, NULL,
     NULL},
    {"on_prefill_failure", RULE_SECTION, 0, 0, 0, NULL, read_on_failure},
    {"bootstrap_port", RULE_UINT, offsetof(struct conf_pd, bootstrap_port), 0, 65535, NULL, NULL},
    RULES_END,
};

int schema_read_pd(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_pd *pd = field;
	pd->enabled = 1;
	int err = rules_read_section(x, v, "disaggregation", r->sub, pd);
	if (err)
		return err;
	if (!pd->prefill_name)
		return rules_fail(x, v, "disaggregation: 'prefill_pool' is required");
	return 0;
}

int schema_pd_check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf *c, size_t i)
{
	struct conf_pool *p = &c->pools[i];
	if (!p->pd.enabled)
		return 0;
	yaml_node_t *d = rules_value_of(x, item, "disaggregation");
	yaml_node_t *n = d ? rules_value_of(x, d, "prefill_pool") : NULL;
	size_t j = 0;
	while (j < c->npools && strcmp(c->pools[j].name, p->pd.prefill_name) != 0)
		j++;
	if (j == c->npools)
		return rules_fail(x, n ? n : item, "disaggregation: no pool named '%s'",
				  p->pd.prefill_name);
	if (j == i)
		return rules_fail(x, n ? n : item,
				  "disaggregation: pool '%s' cannot prefill for itself", p->name);
	if (c->pools[j].pd.enabled)
		return rules_fail(
		    x, n ? n : item,
		    "disaggregation: prefill pool '%s' has a disaggregation of its own "
		    "(a chain or a cycle of pools); a prefill pool is an ordinary pool",
		    p->pd.prefill_name);
	/* the prefill request is written and read as HTTP/1.1 on the connection itself (pd.c),
	 * which an HTTP/2 backend's stream is not: every prefill would fail, and its backend be
	 * marked failed for it */
	for (size_t k = 0; k < c->pools[j].nbackends; k++)
		if (c->pools[j].backends[k].protocol != CONF_PROTO_HTTP1)
			return rules_fail(
			    x, n ? n : item,
			    "disaggregation: prefill pool '%s': backend %s speaks "
			    "HTTP/2, but the prefill request goes over HTTP/1.1 (give "
			    "that pool protocol: http1)",
			    p->pd.prefill_name, c->pools[j].backends[k].ep.address);
	p->pd.prefill_pool = j;
	return 0;
}
