/*
 * conf.h - loading and checking the YAML configuration (see docs/config.md).
 *
 * Loading is all or nothing: on any error the partial result is freed, <err> says
 * "FILE:LINE:COL: what was wrong and what was expected", and the caller keeps whatever it ran
 * before. Unknown keys are errors, so a typo never silently falls back to a default.
 *
 * The folder: source.c makes a file, the files it includes and the ${VAR}s it names one
 * YAML document whose nodes remember their file; conf.c loads it whole and owns the life
 * of a struct conf (model.h); rules.c is the generic YAML rule engine (key tables, typed
 * readers, durations and sizes, FILE:LINE:COL messages); schema.c holds the proxy's key tables,
 * defaults and cross-checks, with the tls: sections in schema_tls.c and a route's auth, rate_limit
 * and api in schema_guard.c; tls.c builds a tls: section into what OpenSSL uses; and pool_policy.c
 * reads the keys each balancer declares for itself in its ops table (policy/opt.h), so the schema
 * names none of them.
 */
#ifndef ACCELNET_CONF_CONF_H
#define ACCELNET_CONF_CONF_H

#include "conf/model.h"

#include <stdio.h>

/* Load <path>. 0 and *out set (free with conf_free), or -EINVAL/-ENOENT/... with <err>. */
int conf_load_file(const char *path, struct conf **out, struct conf_error *err);
/* Load from memory; <name> stands for the file name in messages. */
int conf_load_string(const char *name, const char *text, size_t len, struct conf **out,
		     struct conf_error *err);
void conf_free(struct conf *conf);
/* Print every key path this build accepts ("pools.backends.weight"), one per line. */
void conf_print_keys(FILE *out);

#endif
