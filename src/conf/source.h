/*
 * source.h - the text a config is read from: its file, the files it includes, and the
 * environment its ${VAR} references name, made into one YAML document.
 *
 * The schema reads one libyaml document. This module builds it: the main file parsed,
 * every value scalar's ${NAME}, ${NAME:-default} and $$ expanded from the environment,
 * and the top-level keys of each file that `include:` names merged in (lists appended, any
 * other key given in two files refused with both positions). Each node remembers the file
 * it came from and, when it was expanded, the text it was written as: a message about a
 * node names that file, and shows the reference, never the value it became (an
 * environment value may be a secret). See docs/config.md, "Environment, includes, units".
 */
#ifndef ACCELNET_CONF_SOURCE_H
#define ACCELNET_CONF_SOURCE_H

#include "conf/model.h"

#include <stddef.h>
#include <yaml.h>

#define CONF_INCLUDE_DEPTH_MAX 8      /* files including files, the main one counted */
#define CONF_INCLUDE_NODES_MAX 100000 /* nodes one included file may add */
#define CONF_EXPANDED_MAX (16u << 20) /* bytes of expanded values, every file together */

struct conf_source;

/* Read <path> and what it includes. 0 and *out (free with conf_source_free), or -errno with
 * <err> "FILE:LINE:COL: message". */
int conf_source_load_file(const char *path, struct conf_source **out, struct conf_error *err);
/* Read <text>; <name> stands for its file in messages. It may include nothing. */
int conf_source_load_string(const char *name, const char *text, size_t len,
			    struct conf_source **out, struct conf_error *err);
void conf_source_free(struct conf_source *s);

yaml_document_t *conf_source_doc(struct conf_source *s);
/* The file node <n> was read from, or NULL when <n> is not one of the document's. */
const char *conf_source_file(const struct conf_source *s, const yaml_node_t *n);
/* The text scalar <n> was written as when ${...} changed it, else NULL. */
const char *conf_source_orig(const struct conf_source *s, const yaml_node_t *n);

/*
 * Expand ${NAME}, ${NAME:-default} (the default when NAME is unset or empty) and $$ (one
 * '$') in <in> from the environment; any other '$' stays as it is. 0 with *out NULL when
 * nothing changed, else malloc'd; -ENOENT (NAME unset, no default: its name in var[]) or
 * -EINVAL (a malformed reference) with *at the offset of its '$'; -ENOMEM.
 */
int conf_source_expand(const char *in, char **out, size_t *at, char *var, size_t varlen);

#endif
