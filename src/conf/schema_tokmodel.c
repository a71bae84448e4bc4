/*
 * schema_tokmodel.c - models: (see schema_tokmodel.h).
 *
 * A model is named as clients write it in "model" (the rules of prices: 1 to 255 bytes, no
 * control byte, each once). Its tokenizer.json and chat template are loaded here, with the
 * config, so a file that cannot be read, is not JSON, or uses a part accelnet does not
 * tokenize is refused at FILE:LINE:COL of the key that names it, followed by the loader's
 * own message (the file and its field); nothing is loaded later on the request path.
 */
#include "conf/schema_tokmodel.h"
#include "core/log.h"
#include "tok/tokmodel.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE_DEFAULT 16 /* vLLM's default block_size */

const struct rule schema_tokmodel_rules[] = {
    {"tokenizer", RULE_STR, offsetof(struct conf_tokmodel, tokenizer), 0, 0, NULL, NULL},
    {"chat_template", RULE_STR, offsetof(struct conf_tokmodel, chat_template), 0, 0, NULL, NULL},
    {"chat_format", RULE_STR, offsetof(struct conf_tokmodel, chat_format), 0, 0, NULL, NULL},
    {"block_size", RULE_UINT, offsetof(struct conf_tokmodel, block_size), 1, TOKMODEL_BLOCK_MAX,
     NULL, NULL},
    RULES_END,
};

void schema_tokmodels_free(struct conf *c)
{
	for (size_t i = 0; i < c->ntokmodels; i++) {
		struct conf_tokmodel *m = &c->tokmodels[i];
		free(m->name);
		free(m->tokenizer);
		free(m->chat_template);
		free(m->chat_format);
		tokmodel_free(m->tm);
		free(m->tm);
	}
	free(c->tokmodels);
	c->tokmodels = NULL;
	c->ntokmodels = 0;
}

/* Load what entry <m> names; a message at its key <at> when it cannot be. */
static int load(struct rules_ctx *x, yaml_node_t *entry, struct conf_tokmodel *m)
{
	char err[768];
	yaml_node_t *tk = rules_value_of(x, entry, "tokenizer");
	if (!m->tokenizer || !tk)
		return rules_fail(x, entry, "models: %s: tokenizer: required (a tokenizer.json)",
				  m->name);
	if (!(m->tm = calloc(1, sizeof(*m->tm))))
		return rules_fail(x, entry, "out of memory");
	if (tokmodel_load(m->tokenizer, m->chat_template, m->chat_format, m->block_size, m->tm, err,
			  sizeof(err)) < 0) {
		yaml_node_t *ct = rules_value_of(x, entry, "chat_template");
		yaml_node_t *cf = rules_value_of(x, entry, "chat_format");
		free(m->tm);
		m->tm = NULL;
		/* a message naming the template file is the template key's, chat_format's its */
		int at_chat = ct && m->chat_template && strstr(err, m->chat_template) == err;
		int at_format = cf && !strncmp(err, "chat_format:", 12);
		return rules_fail(x,
				  at_format ? cf
				  : at_chat ? ct
					    : tk,
				  "models: %s: %s", m->name, err);
	}
	if (m->tm->chat_skipped[0])
		log_warn("models: %s: %s; its chat requests are keyed on the prompt's bytes (the "
			 "text index), not its tokens",
			 m->name, m->tm->chat_skipped);
	return 0;
}

int schema_read_tokmodels(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf *c = field;
	if (v->type != YAML_MAPPING_NODE)
		return rules_fail(x, v,
				  "models: expected a mapping of model names, e.g. models: "
				  "{qwen3: {tokenizer: /models/qwen3/tokenizer.json}}");
	size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	schema_tokmodels_free(c);
	if (!(c->tokmodels = calloc(n ? n : 1, sizeof(*c->tokmodels))))
		return rules_fail(x, v, "out of memory");
	for (yaml_node_pair_t *pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *k = rules_node(x, pr->key), *entry = rules_node(x, pr->value);
		const char *name = rules_scalar(k);
		size_t len = name ? strlen(name) : 0;
		if (!len || len > CONF_MODEL_MAX)
			return rules_fail(x, k, "models: expected a model name (1 to 255 bytes)");
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
				return rules_fail(x, k,
						  "models: a model name holds a control byte");
		for (size_t i = 0; i < c->ntokmodels; i++)
			if (strcmp(c->tokmodels[i].name, name) == 0)
				return rules_fail(x, k, "models: '%s' is given twice", name);
		struct conf_tokmodel *m = &c->tokmodels[c->ntokmodels++];
		m->block_size = BLOCK_SIZE_DEFAULT;
		if (!(m->name = strdup(name)))
			return rules_fail(x, k, "out of memory");
		if (entry->type != YAML_MAPPING_NODE)
			return rules_fail(x, entry,
					  "models: %s: expected {tokenizer: FILE, ...}, found %s",
					  name, rules_kind_name(entry));
		if (rules_read_section(x, entry, "models", r->sub, m) < 0 || load(x, entry, m) < 0)
			return -EINVAL;
	}
	return 0;
}

const struct conf_tokmodel *conf_tokmodel_find(const struct conf *c, const char *name, size_t len)
{
	for (size_t i = 0; i < c->ntokmodels; i++)
		if (strlen(c->tokmodels[i].name) == len &&
		    memcmp(c->tokmodels[i].name, name, len) == 0)
			return &c->tokmodels[i];
	return NULL;
}
