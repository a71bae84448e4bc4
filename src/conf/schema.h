/*
 * schema.h - the proxy's config schema: the key tables of every section of docs/config.md,
 * the defaults, and the checks that need more than one key.
 */
#ifndef ACCELNET_CONF_SCHEMA_H
#define ACCELNET_CONF_SCHEMA_H

#include "conf/rules.h"

/* Fill <c> with the defaults of every key outside lists. */
void schema_set_defaults(struct conf *c);
/* Read the document <root> into <c> (defaults already set) and check it whole. 0 or -EINVAL
 * with the message in x->err; <c> is then partly filled and the caller frees it. */
int schema_read(struct rules_ctx *x, yaml_node_t *root, struct conf *c);
/* Every key path this build accepts ("pools.backends.weight"), one per line. */
void schema_print_keys(FILE *out);

#endif
