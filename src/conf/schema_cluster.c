/*
 * schema_cluster.c - the cluster: keys (see schema_cluster.h).
 *
 * redis is HOST:PORT, HOST a name or an IP literal ([v6] in brackets). A name is not
 * resolved at load: the cluster's own thread connects (and resolves) while running, so a
 * Redis that is away at start-up does not stop the gateway from starting; it then enforces
 * its limits locally until Redis answers. The password file must be readable now; what it
 * holds is read when connecting.
 */
#include "conf/schema_cluster.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY_PREFIX_MAX 64

static int read_redis(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_cluster *cl = field;
	(void)r;
	int err = rules_read_string(x, v, &cl->redis);
	if (err)
		return err;
	const char *s = cl->redis, *colon = strrchr(s, ':'), *host = s;
	size_t hl = colon ? (size_t)(colon - s) : 0;
	char *end = NULL;
	unsigned long port = colon && colon[1] ? strtoul(colon + 1, &end, 10) : 0;
	if (!colon || !hl || !end || *end || port < 1 || port > 65535)
		return rules_fail(x, v,
				  "cluster: redis '%s': expected HOST:PORT, e.g. 127.0.0.1:6379 or "
				  "redis.internal:6379",
				  s);
	if (host[0] == '[') {
		if (hl < 3 || host[hl - 1] != ']')
			return rules_fail(x, v, "cluster: redis '%s': expected [IPv6]:PORT", s);
		host++, hl -= 2;
	}
	for (size_t i = 0; i < hl; i++) {
		char ch = host[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == ':'))
			return rules_fail(x, v,
					  "cluster: redis '%s': the host is neither a name nor an "
					  "IP address",
					  s);
	}
	free(cl->host);
	if (!(cl->host = strndup(host, hl)))
		return rules_fail(x, v, "out of memory");
	cl->port = (unsigned)port;
	return 0;
}

static int read_key_prefix(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	char **out = field;
	(void)r;
	int err = rules_read_string(x, v, out);
	if (err)
		return err;
	size_t n = strlen(*out);
	if (!n || n > KEY_PREFIX_MAX)
		return rules_fail(x, v, "cluster: key_prefix: 1 to %d characters", KEY_PREFIX_MAX);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)(*out)[i] <= ' ' || (unsigned char)(*out)[i] >= 0x7f)
			return rules_fail(x, v,
					  "cluster: key_prefix '%s': printable characters only, no "
					  "spaces",
					  *out);
	return 0;
}

const struct rule schema_cluster_rules[] = {
    {"redis", RULE_SECTION, 0, 0, 0, NULL, read_redis},
    {"sync_ms", RULE_UINT, offsetof(struct conf_cluster, sync_ms), 10, 10000, NULL, NULL},
    {"timeout_ms", RULE_UINT, offsetof(struct conf_cluster, timeout_ms), 10, 60000, NULL, NULL},
    {"key_prefix", RULE_SECTION, offsetof(struct conf_cluster, key_prefix), 0, 0, NULL,
     read_key_prefix},
    {"password_file", RULE_STR, offsetof(struct conf_cluster, password_file), 0, 0, NULL, NULL},
    {"max_instances", RULE_UINT, offsetof(struct conf_cluster, max_instances), 1, 100000, NULL,
     NULL},
    RULES_END,
};

void schema_cluster_defaults(struct conf *c)
{
	c->cluster.sync_ms = 100;
	c->cluster.timeout_ms = 500;
	c->cluster.max_instances = 64;
}

int schema_read_cluster(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_cluster *cl = field;
	int err = rules_read_section(x, v, "cluster", r->sub, cl);
	if (err)
		return err;
	if (!cl->redis)
		return rules_fail(x, v, "cluster: 'redis' is required, e.g. 127.0.0.1:6379");
	if (cl->password_file && access(cl->password_file, R_OK) < 0)
		return rules_fail(x, rules_value_of(x, v, "password_file"),
				  "cluster: password_file '%s': %s", cl->password_file,
				  strerror(errno));
	return 0;
}
