/*
 * schema_discovery.c - the discovery keys (see schema_discovery.h).
 *
 * A backend with discover: a is "NAME:PORT": every address the name's A and AAAA records
 * give, at PORT. With discover: srv it is "NAME", whose SRV records give targets, ports and
 * weights. Either is kept as a name here: nothing is resolved at load, since the answer is
 * the running proxy's to follow (control/discover.c). The resolvers are IP literals, since
 * the resolver of names cannot itself need one.
 */
#include "conf/schema_discovery.h"
#include "net/addr.h"
#include "policy/lb.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESOLVERS_MAX 8

static int read_resolvers(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	char **out = field;
	char text[RESOLVERS_MAX * 64] = "";
	size_t used = 0, n = 0;
	(void)r;
	if (v->type != YAML_SEQUENCE_NODE)
		return rules_fail(x, v,
				  "discovery.resolvers: expected a list such as "
				  "[127.0.0.1:53], found %s",
				  rules_kind_name(v));
	for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
	     it++, n++) {
		yaml_node_t *item = rules_node(x, *it);
		const char *s = rules_scalar(item), *why = NULL;
		struct net_addr a;
		char host[64], one[72];
		if (n == RESOLVERS_MAX)
			return rules_fail(x, item, "discovery.resolvers: at most %d",
					  RESOLVERS_MAX);
		if (!s || net_addr_parse(s, &a, &why) < 0)
			return rules_fail(x, item, "discovery.resolvers: '%s': %s", s ? s : "",
					  why ? why : "expected IP:PORT");
		/* an IP literal only: the host part must read back as itself */
		const char *colon = strrchr(s, ':');
		size_t hl = (size_t)(colon - s);
		if (hl && s[0] == '[')
			s++, hl -= 2;
		unsigned char bin[16];
		if (hl >= sizeof(host))
			hl = sizeof(host) - 1;
		memcpy(host, s, hl);
		host[hl] = '\0';
		if (inet_pton(AF_INET, host, bin) != 1 && inet_pton(AF_INET6, host, bin) != 1)
			return rules_fail(x, item,
					  "discovery.resolvers: '%s' is not an IP address (a "
					  "resolver cannot be a name)",
					  host);
		net_addr_format((struct sockaddr *)&a.ss, one, sizeof(one));
		used +=
		    (size_t)snprintf(text + used, sizeof(text) - used, "%s%s", n ? "," : "", one);
	}
	if (!n)
		return rules_fail(x, v,
				  "discovery.resolvers: empty (leave it out for the "
				  "system's resolvers)");
	free(*out);
	if (!(*out = strdup(text)))
		return rules_fail(x, v, "out of memory");
	return 0;
}

#define MS_MAX 3600000

const struct rule schema_discovery_rules[] = {
    {"resolvers", RULE_SECTION, offsetof(struct conf, discovery.resolvers), 0, 0, NULL,
     read_resolvers},
    {"min_ttl_ms", RULE_UINT, offsetof(struct conf, discovery.min_ttl_ms), 100, MS_MAX, NULL, NULL},
    {"max_ttl_ms", RULE_UINT, offsetof(struct conf, discovery.max_ttl_ms), 100, MS_MAX, NULL, NULL},
    {"timeout_ms", RULE_UINT, offsetof(struct conf, discovery.timeout_ms), 10, 60000, NULL, NULL},
    RULES_END,
};

void schema_discovery_defaults(struct conf *c)
{
	c->discovery.min_ttl_ms = 1000;
	c->discovery.max_ttl_ms = 300000;
	c->discovery.timeout_ms = 2000;
}

int schema_read_discovery(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf *c = field;
	int err = rules_read_section(x, v, "discovery", r->sub, c);
	if (!err && c->discovery.min_ttl_ms > c->discovery.max_ttl_ms)
		return rules_fail(x, v, "discovery: min_ttl_ms (%u) exceeds max_ttl_ms (%u)",
				  c->discovery.min_ttl_ms, c->discovery.max_ttl_ms);
	return err;
}

int schema_read_backend_discover(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				 void *field)
{
	enum conf_discover *d = field;
	const char *s = rules_scalar(v);
	(void)r;
	if (s && strcmp(s, "a") == 0)
		*d = DISCOVER_A;
	else if (s && strcmp(s, "srv") == 0)
		*d = DISCOVER_SRV;
	else
		return rules_fail(x, v, "backends: discover: expected a or srv, found '%s'",
				  s ? s : rules_kind_name(v));
	return 0;
}

/* A DNS name as written: letters, digits, '-', '_' and dots, at most 253 bytes. */
static int name_ok(const char *s, size_t len)
{
	if (!len || len > 253 || s[0] == '.')
		return 0;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
			return 0;
	}
	return 1;
}

int schema_read_backend_address(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				void *field)
{
	struct conf_listen *ep = field;
	struct conf_backend *b =
	    (struct conf_backend *)(void *)((char *)field - offsetof(struct conf_backend, ep));
	(void)r;
	if (b->discover == DISCOVER_NONE)
		return rules_read_addr(x, v, ep);
	int err = rules_read_string(x, v, &ep->address);
	if (err)
		return err;
	const char *s = ep->address, *colon = strrchr(s, ':');
	size_t len = colon ? (size_t)(colon - s) : strlen(s);
	if (b->discover == DISCOVER_A) {
		char *end = NULL;
		unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
		if (!colon || !*(colon + 1) || *end || port < 1 || port > 65535)
			return rules_fail(x, v,
					  "backends: discover: a needs address NAME:PORT, e.g. "
					  "api.service.consul:8080; found '%s'",
					  s);
		b->discover_port = (unsigned)port;
	} else if (colon) {
		return rules_fail(
		    x, v,
		    "backends: discover: srv takes a name without a port (the SRV "
		    "records give the ports), e.g. _api._tcp.service.consul; found '%s'",
		    s);
	}
	if (!name_ok(s, len))
		return rules_fail(x, v, "backends: '%.*s' is not a DNS name", (int)len, s);
	if (!(b->discover_name = strndup(s, len)))
		return rules_fail(x, v, "out of memory");
	return 0;
}

int schema_discovery_check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p)
{
	size_t slots = 0, named = 0;
	for (size_t j = 0; j < p->nbackends; j++) {
		const struct conf_backend *b = &p->backends[j];
		if (b->discover == DISCOVER_NONE) {
			if (b->discover_max)
				return rules_fail(x, item,
						  "pool '%s': backend %s has max_backends but no "
						  "discover",
						  p->name, b->ep.address);
			slots++;
			continue;
		}
		named++;
		if (b->kv_events)
			return rules_fail(x, item,
					  "pool '%s': backend %s: kv_events cannot follow a "
					  "discovered name's addresses",
					  p->name, b->ep.address);
		if (b->tls.given)
			return rules_fail(x, item,
					  "pool '%s': backend %s: per-backend tls is not taken "
					  "with discover (the pool's tls is)",
					  p->name, b->ep.address);
		slots += b->discover_max ? b->discover_max : DISCOVER_MAX_DEFAULT;
	}
	if (named && p->balance->prepare)
		return rules_fail(x, item,
				  "pool '%s': balance %s fixes its backends at load, so it cannot "
				  "take discovered ones; use round-robin, least-connections, p2c, "
				  "peak-ewma or llm",
				  p->name, p->balance->name);
	if (slots > LB_MAX_BACKENDS)
		return rules_fail(x, item,
				  "pool '%s': %zu backends with the discovered ones' max_backends; "
				  "at most %d per pool",
				  p->name, slots, LB_MAX_BACKENDS);
	return 0;
}
