/*
 * schema_engine.c - pools[].engine_metrics and backends[].kv_events (see schema_engine.h).
 * The metrics path is held to what a request line may carry, as health.path is; the events
 * address to tcp://HOST:PORT, the form an engine's publisher binds (vLLM's
 * --kv-events-config endpoint), so a typo is refused here rather than retried forever.
 */
#include "conf/schema_engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ENGINE_PATH_MAX 256
#define KV_EVENTS_MAX 255 /* the whole address */

const struct rule schema_engine_metrics_rules[] = {
    {"path", RULE_STR, offsetof(struct conf_engine_metrics, path), 0, 0, NULL, NULL},
    {"interval_ms", RULE_UINT, offsetof(struct conf_engine_metrics, interval_ms), 10, 3600000, NULL,
     NULL},
    {"timeout_ms", RULE_UINT, offsetof(struct conf_engine_metrics, timeout_ms), 1, 60000, NULL,
     NULL},
    {"max_bytes", RULE_SIZE, offsetof(struct conf_engine_metrics, max_bytes), 1024, 64u << 20, NULL,
     NULL},
    RULES_END,
};

void schema_engine_metrics_defaults(struct conf_engine_metrics *e)
{
	e->interval_ms = 1000;
	e->timeout_ms = 500;
	e->max_bytes = 1u << 20;
}

int schema_read_engine_metrics(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			       void *field)
{
	struct conf_engine_metrics *e = field;
	if (!e->path && !(e->path = strdup("/metrics")))
		return rules_fail(x, v, "out of memory");
	e->enabled = 1;
	int err = rules_read_section(x, v, "engine_metrics", r->sub, e);
	if (err)
		return err;
	if (e->path[0] != '/' || strlen(e->path) > ENGINE_PATH_MAX)
		return rules_fail(x, rules_value_of(x, v, "path"),
				  "engine_metrics: 'path' must start with '/' and be at most %d "
				  "characters",
				  ENGINE_PATH_MAX);
	for (const char *c = e->path; *c; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			return rules_fail(x, rules_value_of(x, v, "path"),
					  "engine_metrics: 'path' may hold only visible ASCII "
					  "characters (percent-encode the others)");
	if (e->timeout_ms > e->interval_ms)
		return rules_fail(x, v,
				  "engine_metrics: 'timeout_ms' (%u) exceeds 'interval_ms' (%u): a "
				  "scrape must end before the next one starts",
				  e->timeout_ms, e->interval_ms);
	return 0;
}

/* Is <s> HOST:PORT, HOST a name, an IPv4 address or a bracketed IPv6 one, PORT 1..65535? */
static int host_port_ok(const char *s)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s)
		return 0;
	for (const char *c = s; c < colon; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f || *c == '/')
			return 0;
	if (s[0] == '[' ? colon[-1] != ']' : memchr(s, ':', (size_t)(colon - s)) != NULL)
		return 0; /* an IPv6 address goes in brackets */
	unsigned long port = 0;
	const char *p = colon + 1;
	if (!*p || strlen(p) > 5)
		return 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		port = port * 10 + (unsigned long)(*p - '0');
	}
	return port >= 1 && port <= 65535;
}

int schema_read_kv_events(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	char **addr = field;
	const char *s = rules_scalar(v);
	(void)r;
	if (!s || strncmp(s, "tcp://", 6) != 0 || strlen(s) > KV_EVENTS_MAX || !host_port_ok(s + 6))
		return rules_fail(x, v,
				  "kv_events: expected tcp://HOST:PORT, the address the engine "
				  "publishes its KV-cache events on (e.g. tcp://10.0.0.7:5557)");
	return rules_read_string(x, v, addr);
}
