/*
 * schema_tokmodel.h - the top-level models: (each model's tokenizer, chat format and KV block
 * size, tok/tokmodel.h), loaded as the config is read, so that `accelnet check` refuses a
 * tokenizer file accelnet does not fully support with the place of the key that names it.
 */
#ifndef ACCELNET_CONF_SCHEMA_TOKMODEL_H
#define ACCELNET_CONF_SCHEMA_TOKMODEL_H

#include "conf/rules.h"

/* The keys of one model's entry (dumped as models.KEY). */
extern const struct rule schema_tokmodel_rules[];

/* models: {NAME: {tokenizer, chat_template, block_size}} (field: unused; into struct conf) */
int schema_read_tokmodels(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);

/* Frees what models: read into <c>. */
void schema_tokmodels_free(struct conf *c);

/* The entry of <c> named name[0..len) that has a tokenizer, or NULL. */
const struct conf_tokmodel *conf_tokmodel_find(const struct conf *c, const char *name, size_t len);

#endif
