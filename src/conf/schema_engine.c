/*
 * schema_engine.c - pools[].engine, pools[].engine_metrics and backends[].kv_events and
 * kv_events_replay (see
 * schema_engine.h). An engine's model is named, so it is resolved only once the whole config
 * is read (models: may come after pools:).
 * The metrics path is held to what a request line may carry, as health.path is; the events
 * address to tcp://HOST:PORT, the form an engine's publisher binds (vLLM's
 * --kv-events-config endpoint; the replay socket's its replay_endpoint), so a typo is
 * refused here rather than retried forever.
 */
#include "conf/schema_engine.h"
#include "conf/schema_tokmodel.h"

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

int schema_read_kv_events_replay(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				 void *field)
{
	char **addr = field;
	const char *s = rules_scalar(v);
	(void)r;
	if (!s || strncmp(s, "tcp://", 6) != 0 || strlen(s) > KV_EVENTS_MAX || !host_port_ok(s + 6))
		return rules_fail(x, v,
				  "kv_events_replay: expected tcp://HOST:PORT, the address of the "
				  "engine's KV-event replay socket (vLLM's replay_endpoint, e.g. "
				  "tcp://10.0.0.7:5558)");
	return rules_read_string(x, v, addr);
}

int schema_engine_check_backend(struct rules_ctx *x, yaml_node_t *item,
				const struct conf_backend *b)
{
	if (b->kv_events_replay && !b->kv_events)
		return rules_fail(x, rules_value_of(x, item, "kv_events_replay"),
				  "kv_events_replay: it asks the engine again for the KV events "
				  "lost on the way from kv_events: give kv_events too");
	if (b->kv_events_replay && !strcmp(b->kv_events_replay, b->kv_events))
		return rules_fail(x, rules_value_of(x, item, "kv_events_replay"),
				  "kv_events_replay: the replay socket is another port than "
				  "kv_events' (vLLM's replay_endpoint, e.g. tcp://10.0.0.7:5558)");
	return 0;
}

/* What is wrong with backend <b>'s event sockets beside backend <o>'s, or NULL. */
static const char *kv_clash(const struct conf_backend *b, const struct conf_backend *o)
{
	if (!b->kv_events || !o->kv_events)
		return NULL;
	if (b->kv_events_replay && o->kv_events_replay &&
	    !strcmp(b->kv_events_replay, o->kv_events_replay) && strcmp(b->kv_events, o->kv_events))
		return "its kv_events_replay is also that backend's, whose kv_events differ: a gap "
		       "would be filled with another engine's KV events";
	if ((b->kv_events_replay && !strcmp(b->kv_events_replay, o->kv_events)) ||
	    (o->kv_events_replay && !strcmp(o->kv_events_replay, b->kv_events)))
		return "one's kv_events is the other's kv_events_replay: an engine's publisher and "
		       "its replay socket are two ports";
	return NULL;
}

int schema_engine_check_kv_sockets(struct rules_ctx *x, yaml_node_t *item, const struct conf *c,
				   size_t i, const struct conf_pool *p)
{
	for (size_t j = 0; j < p->nbackends; j++) {
		const struct conf_backend *b = &p->backends[j];
		for (size_t k = 0; k <= i; k++) {
			const struct conf_pool *q = k < i ? &c->pools[k] : p;
			size_t n = k < i ? q->nbackends : j;
			for (size_t l = 0; l < n; l++) {
				const char *why = kv_clash(b, &q->backends[l]);
				if (why)
					return rules_fail(x, rules_value_of(x, item, "backends"),
							  "pool '%s': backend %s beside backend %s "
							  "of pool '%s': %s",
							  p->name, b->ep.address,
							  q->backends[l].ep.address, q->name, why);
			}
		}
	}
	return 0;
}

static int read_api(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	static const char *const names[] = {"openai", "sglang-grpc", "vllm-grpc"};
	struct conf_engine *e = obj;
	(void)r;
	return rules_read_choice(x, v, "engine: api", names, 3, &e->api);
}

const struct rule schema_engine_rules[] = {
    {"api", RULE_SECTION, 0, 0, 0, NULL, read_api},
    {"model", RULE_STR, offsetof(struct conf_engine, model), 0, 0, NULL, NULL},
    RULES_END,
};

int schema_read_engine(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_engine *e = field;
	int err = rules_read_section(x, v, "engine", r->sub, e);
	if (err)
		return err;
	if (e->api != CONF_ENGINE_OPENAI && !e->model)
		return rules_fail(x, v,
				  "engine: 'model' is required: the models: entry whose tokenizer "
				  "turns requests into the engine's token ids");
	return 0;
}

int schema_engine_check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf *c, size_t i)
{
	struct conf_pool *p = &c->pools[i];
	if (p->engine.api == CONF_ENGINE_OPENAI)
		return 0;
	yaml_node_t *e = rules_value_of(x, item, "engine");
	yaml_node_t *m = e ? rules_value_of(x, e, "model") : NULL;
	const struct conf_tokmodel *tm =
	    conf_tokmodel_find(c, p->engine.model, strlen(p->engine.model));
	if (!tm)
		return rules_fail(
		    x, m ? m : item,
		    "engine: model '%s' has no tokenizer: give it one under models: "
		    "({%s: {tokenizer: PATH}}); the proxy tokenizes for a gRPC engine",
		    p->engine.model, p->engine.model);
	if (p->pd.enabled)
		return rules_fail(x, e ? e : item,
				  "engine: pool '%s' disaggregates, which its gRPC API does not "
				  "carry here yet; give the pool api: openai",
				  p->name);
	for (size_t k = 0; k < p->nbackends; k++)
		if (p->backends[k].protocol == CONF_PROTO_HTTP1)
			return rules_fail(
			    x, e ? e : item,
			    "engine: api %s is gRPC, over HTTP/2: backend %s "
			    "speaks HTTP/1.1 (give the pool protocol: h2c, or h2 with "
			    "tls)",
			    p->engine.api == CONF_ENGINE_VLLM_GRPC ? "vllm-grpc" : "sglang-grpc",
			    p->backends[k].ep.address);
	p->engine.tm = tm;
	return 0;
}
