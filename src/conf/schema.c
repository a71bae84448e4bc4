/*
 * schema.c - the proxy's config schema: which keys each section takes, their defaults, and
 * the checks that need more than one key (see docs/config.md).
 *
 * Every section is a table of rules for the engine in conf/rules.c: a key, how its value is
 * read, where it goes in struct conf. A value the engine cannot read alone (a balancer's
 * name, a hash key, a pool named by a route) has a small reader here; a check that needs
 * the whole section (an address is required, a path must start with '/') runs after the
 * section is read; a check that needs the whole file (a route names a pool defined
 * anywhere) runs last, in check_whole(). The pool's table also holds the keys each
 * balancer declares for itself (conf/pool_policy.c adds them), so the schema names none
 * of them. Keys of the config contract whose features are not built yet (see "Not yet
 * built" in docs/config.md) are refused by name, so nobody believes a feature is on when
 * it is not.
 */
#include "conf/schema.h"
#include "core/container.h"
#include "core/loop.h"
#include "conf/pool_policy.h"
#include "conf/schema_guard.h"
#include "conf/schema_model.h"
#include "conf/schema_cache.h"
#include "conf/schema_cluster.h"
#include "conf/schema_discovery.h"
#include "conf/schema_engine.h"
#include "conf/schema_forward.h"
#include "conf/schema_l4.h"
#include "conf/schema_spend.h"
#include "conf/schema_tokmodel.h"
#include "conf/schema_pd.h"
#include "conf/schema_tls.h"

#include <ctype.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#define MS_MAX 86400000u

/* What a load keeps beside struct conf until the whole file is read. */
struct load {
	struct conf *conf;
	const struct pool_policy_tables *pool; /* the pool's keys, balancers' included */
	/* route -> pool names, resolved once every pool is known */
	yaml_node_t **route_pool_nodes, **route_spill_nodes;
	yaml_node_t *pools; /* the pools: list, for a message naming an earlier pool */
};

static struct load *load_of(struct rules_ctx *x)
{
	return x->user;
}

/* --- listen, admin, timeouts, limits, trusted_proxies --- */

/* listen[].reuse_port: own | shared (whether another process may listen on the address) */
static int read_reuse_port(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	static const char *const names[] = {"own", "shared"};
	(void)r;
	return rules_read_choice(x, v, "listen: reuse_port", names, 2,
				 &((struct conf_listen *)field)->shared);
}

/* listen[].mode: http | tcp (raw TCP to listen[].pool, proxy/l4.h) */
static int read_listen_mode(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	static const char *const names[] = {"http", "tcp"};
	(void)r;
	return rules_read_choice(x, v, "listen: mode", names, 2,
				 &((struct conf_listen *)field)->l4);
}

static const struct rule listen_rules[] = {
    {"address", RULE_ADDR, 0, 0, 0, NULL, NULL},
    {"tls", RULE_SECTION, 0, 0, 0, schema_tls_rules, schema_read_tls},
    {"reuse_port", RULE_SECTION, 0, 0, 0, NULL, read_reuse_port},
    {"http2", RULE_BOOL, offsetof(struct conf_listen, http2), 0, 0, NULL, NULL},
    {"mode", RULE_SECTION, 0, 0, 0, NULL, read_listen_mode},
    {"pool", RULE_STR, offsetof(struct conf_listen, pool_name), 0, 0, NULL, NULL},
    {"idle_ms", RULE_UINT, offsetof(struct conf_listen, idle_ms), 1, MS_MAX, NULL, NULL},
    {"drain_ms", RULE_UINT, offsetof(struct conf_listen, drain_ms), 0, MS_MAX, NULL, NULL},
    {"sni", RULE_SECTION, 0, 0, 0, schema_sni_rules, schema_read_sni},
    RULES_END,
};

static int read_listen_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_listen *l = obj;
	(void)i;
	l->http2 = 1; /* listen[].http2: on unless turned off */
	/* listen[].idle_ms, listen[].drain_ms: mode: tcp's */
	l->idle_ms = 300000;
	l->drain_ms = 30000;
	if (item->type == YAML_SCALAR_NODE)
		return rules_read_addr(x, item, l);
	int err = rules_read_section(x, item, "listen", listen_rules, l);
	if (!err && !l->address)
		return rules_fail(x, item, "listen: 'address' is required, e.g. 127.0.0.1:8080");
	return err;
}

static int read_listen(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf *c = load_of(x)->conf;
	(void)r, (void)field;
	return rules_read_list(x, v, "listen", (void **)&c->listens, &c->nlistens,
			       sizeof(struct conf_listen), read_listen_item);
}

static int read_backend_network(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	(void)i;
	return rules_read_cidr(x, item, "admin: backend_networks", obj);
}

static int read_backend_networks(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				 void *field)
{
	struct conf *c = load_of(x)->conf;
	(void)r, (void)field;
	return rules_read_list(x, v, "admin: backend_networks", (void **)&c->admin_backend_networks,
			       &c->nadmin_backend_networks, sizeof(struct net_cidr),
			       read_backend_network);
}

static const struct rule admin_rules[] = {
    {"address", RULE_ADDR, offsetof(struct conf, admin), 0, 0, NULL, NULL},
    {"token_file", RULE_STR, offsetof(struct conf, admin_token_file), 0, 0, NULL, NULL},
    {"state_file", RULE_STR, offsetof(struct conf, admin_state_file), 0, 0, NULL, NULL},
    {"backend_networks", RULE_SECTION, 0, 0, 0, NULL, read_backend_networks},
    RULES_END,
};

static int addr_is_loopback(const struct net_addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ntohl(((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr) >> 24 == 127;
	const struct in6_addr *in6 = &((const struct sockaddr_in6 *)&a->ss)->sin6_addr;
	return IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
}

/* admin: its rules are offsets into struct conf, which <field> is. */
static int read_admin(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf *c = field;
	c->has_admin = 1;
	int err = rules_read_section(x, v, "admin", r->sub, c);
	if (err)
		return err;
	if (!c->admin.address)
		return rules_fail(x, v, "admin: 'address' is required, e.g. 127.0.0.1:8399");
	if (c->admin_token_file && access(c->admin_token_file, R_OK) < 0)
		return rules_fail(x, rules_value_of(x, v, "token_file"),
				  "admin: token_file '%s': %s", c->admin_token_file,
				  strerror(errno));
	if (!c->admin_token_file && !addr_is_loopback(&c->admin.addr))
		return rules_fail(x, rules_value_of(x, v, "address"),
				  "admin: %s can be reached from other hosts: set 'token_file' (a "
				  "file holding the token every admin request must then carry), or "
				  "use a loopback address such as 127.0.0.1",
				  c->admin.address);
	return 0;
}

#define TIMEOUT(name, min)                                                                         \
	{                                                                                          \
#name, RULE_UINT, offsetof(struct conf_timeouts, name), min, MS_MAX, NULL, NULL    \
	}

static const struct rule timeout_rules[] = {
    TIMEOUT(connect_ms, 1),
    TIMEOUT(header_ms, 1),
    TIMEOUT(idle_ms, 1),
    TIMEOUT(first_byte_ms, 1),
    TIMEOUT(between_bytes_ms, 1),
    TIMEOUT(shutdown_ms, 0),
    TIMEOUT(body_ms, 0),
    TIMEOUT(send_ms, 0),
    TIMEOUT(tunnel_idle_ms, 1),
    TIMEOUT(tunnel_drain_ms, 0),
    RULES_END,
};

/* limits.path: normalize | refuse (enum conf_path's order) */
static int read_limits_path(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	(void)r;
	static const char *const names[] = {"normalize", "refuse"};
	return rules_read_choice(x, v, "limits: path", names, 2, field);
}

static const struct rule limit_rules[] = {
    {"max_connections", RULE_UINT, offsetof(struct conf_limits, max_connections), 1, 10000000, NULL,
     NULL},
    {"max_header_bytes", RULE_UINT, offsetof(struct conf_limits, max_header_bytes), 1024, 1048576,
     NULL, NULL},
    {"max_body_bytes", RULE_SIZE, offsetof(struct conf_limits, max_body_bytes), 0, UINT64_MAX, NULL,
     NULL},
    {"body_buffer_bytes", RULE_SIZE, offsetof(struct conf_limits, body_buffer_bytes), 0,
     CONF_BODY_BUFFER_MAX, NULL, NULL},
    {"min_body_rate", RULE_UINT, offsetof(struct conf_limits, min_body_rate), 0, 1u << 30, NULL,
     NULL},
    {"max_uri_bytes", RULE_UINT, offsetof(struct conf_limits, max_uri_bytes), 0, 1048576, NULL,
     NULL},
    {"max_requests_per_connection", RULE_UINT,
     offsetof(struct conf_limits, max_requests_per_connection), 0, 100000000, NULL, NULL},
    {"max_connections_per_ip", RULE_UINT, offsetof(struct conf_limits, max_connections_per_ip), 0,
     10000000, NULL, NULL},
    {"max_headers", RULE_UINT, offsetof(struct conf_limits, max_headers), 1, CONF_MAX_HEADERS, NULL,
     NULL},
    {"accept_rate_per_ip", RULE_SECTION, offsetof(struct conf_limits, accept_rate_per_ip), 0, 0,
     NULL, schema_read_rate},
    {"max_buffer_memory", RULE_SIZE, offsetof(struct conf_limits, max_buffer_memory), 0, UINT64_MAX,
     NULL, NULL},
    {"path", RULE_SECTION, offsetof(struct conf_limits, path), 0, 0, NULL, read_limits_path},
    {"max_tunnels", RULE_UINT, offsetof(struct conf_limits, max_tunnels), 0, 10000000, NULL, NULL},
    {"http2_max_streams", RULE_UINT, offsetof(struct conf_limits, h2_max_streams), 1, 1000, NULL,
     NULL},
    {"http2_max_header_list", RULE_SIZE, offsetof(struct conf_limits, h2_max_header_list), 1024,
     16u << 20, NULL, NULL},
    {"http2_stream_window", RULE_SIZE, offsetof(struct conf_limits, h2_stream_window), 1024,
     INT32_MAX, NULL, NULL},
    {"http2_connection_window", RULE_SIZE, offsetof(struct conf_limits, h2_conn_window), 65535,
     INT32_MAX, NULL, NULL},
    {"http2_max_resets", RULE_UINT, offsetof(struct conf_limits, h2_max_resets), 0, 1000000, NULL,
     NULL},
    {"http2_max_control_frames", RULE_UINT, offsetof(struct conf_limits, h2_max_control), 0,
     1000000, NULL, NULL},
    RULES_END,
};

static int read_trusted_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	(void)i;
	return rules_read_cidr(x, item, "trusted_proxies", obj);
}

static int read_trusted_proxies(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				void *field)
{
	struct conf *c = load_of(x)->conf;
	(void)r, (void)field;
	return rules_read_list(x, v, "trusted_proxies", (void **)&c->trusted_proxies,
			       &c->ntrusted_proxies, sizeof(struct net_cidr), read_trusted_item);
}

/* --- pools --- */

static const char *const protocol_names[] = {"http1", "h2", "h2c"};

static int read_protocol(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	(void)r;
	return rules_read_choice(x, v, "protocol", protocol_names, 3, field);
}

static int read_backend_protocol(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				 void *field)
{
	struct conf_backend *b = container_of(field, struct conf_backend, protocol);
	b->protocol_given = 1;
	return read_protocol(x, r, v, field);
}

/* Each backend's protocol, its own or the pool's; HTTP/2 over TLS needs the pool's tls, and
 * h2c none. */
static int check_protocol(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p)
{
	for (size_t j = 0; j < p->nbackends; j++) {
		struct conf_backend *b = &p->backends[j];
		if (!b->protocol_given)
			b->protocol = p->protocol;
		b->http2_connections = p->http2_connections;
		if (b->protocol == CONF_PROTO_H2 && !p->tls)
			return rules_fail(x, item,
					  "pool '%s': backend %s speaks h2 (HTTP/2 over TLS) but "
					  "the pool has no tls; use h2c for HTTP/2 over plain TCP, "
					  "or give pools[].tls",
					  p->name, b->ep.address);
		if (p->health.grpc && b->protocol == CONF_PROTO_HTTP1)
			return rules_fail(
			    x, item,
			    "pool '%s': health.protocol: grpc asks over HTTP/2, but "
			    "backend %s speaks http1 (give the pool protocol: h2c or h2)",
			    p->name, b->ep.address);
		if (b->protocol == CONF_PROTO_H2C && p->tls)
			return rules_fail(x, item,
					  "pool '%s': backend %s speaks h2c (HTTP/2 over plain "
					  "TCP) but the pool has tls; use h2 for HTTP/2 over TLS",
					  p->name, b->ep.address);
	}
	return 0;
}

static const struct rule backend_rules[] = {
    {"address", RULE_SECTION, offsetof(struct conf_backend, ep), 0, 0, NULL,
     schema_read_backend_address},
    {"discover", RULE_SECTION, offsetof(struct conf_backend, discover), 0, 0, NULL,
     schema_read_backend_discover},
    {"max_backends", RULE_UINT, offsetof(struct conf_backend, discover_max), 1, LB_MAX_BACKENDS,
     NULL, NULL},
    {"weight", RULE_UINT, offsetof(struct conf_backend, weight), 1, 1000, NULL, NULL},
    {"protocol", RULE_SECTION, offsetof(struct conf_backend, protocol), 0, 0, NULL,
     read_backend_protocol},
    {"max_concurrency", RULE_UINT, offsetof(struct conf_backend, max_concurrency), 0, 1000000, NULL,
     NULL},
    {"tls", RULE_SECTION, 0, 0, 0, schema_backend_tls_rules, schema_read_backend_tls},
    {"models", RULE_SECTION, 0, 0, 0, NULL, schema_read_backend_models},
    {"kv_events", RULE_SECTION, offsetof(struct conf_backend, kv_events), 0, 0, NULL,
     schema_read_kv_events},
    {"kv_events_replay", RULE_SECTION, offsetof(struct conf_backend, kv_events_replay), 0, 0, NULL,
     schema_read_kv_events_replay},
    {"api_key_file", RULE_SECTION, offsetof(struct conf_backend, fwd), 0, 0, NULL,
     schema_read_api_key_file},
    {"api_key_header", RULE_SECTION, offsetof(struct conf_backend, fwd), 0, 0, NULL,
     schema_read_api_key_header},
    RULES_END,
};

static int read_backend_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_backend *b = obj;
	(void)i;
	b->weight = 1;
	if (item->type == YAML_SCALAR_NODE)
		return rules_read_addr(x, item, &b->ep);
	/* discover first: it says how the address reads */
	yaml_node_t *d =
	    item->type == YAML_MAPPING_NODE ? rules_value_of(x, item, "discover") : NULL;
	if (d && schema_read_backend_discover(x, NULL, d, &b->discover) < 0)
		return -EINVAL;
	int err = rules_read_section(x, item, "backends", backend_rules, b);
	if (!err && !b->ep.address)
		return rules_fail(x, item, "backends: 'address' is required, e.g. 127.0.0.1:9101");
	return err ? err : schema_engine_check_backend(x, item, b);
}

static int read_backends(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_pool *p = obj;
	(void)r;
	if (v->type == YAML_SEQUENCE_NODE &&
	    v->data.sequence.items.top - v->data.sequence.items.start > LB_MAX_BACKENDS)
		return rules_fail(x, v, "backends: at most %d per pool", LB_MAX_BACKENDS);
	return rules_read_list(x, v, "backends", (void **)&p->backends, &p->nbackends,
			       sizeof(struct conf_backend), read_backend_item);
}

static int read_health_protocol(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				void *field)
{
	static const char *const names[] = {"http", "grpc"};
	(void)r;
	return rules_read_choice(x, v, "health: protocol", names, 2, field);
}

static const struct rule health_rules[] = {
    {"path", RULE_STR, offsetof(struct conf_health, path), 0, 0, NULL, NULL},
    {"interval_ms", RULE_UINT, offsetof(struct conf_health, interval_ms), 10, MS_MAX, NULL, NULL},
    {"timeout_ms", RULE_UINT, offsetof(struct conf_health, timeout_ms), 1, MS_MAX, NULL, NULL},
    {"fall", RULE_UINT, offsetof(struct conf_health, fall), 1, 1000, NULL, NULL},
    {"rise", RULE_UINT, offsetof(struct conf_health, rise), 1, 1000, NULL, NULL},
    {"protocol", RULE_SECTION, offsetof(struct conf_health, grpc), 0, 0, NULL,
     read_health_protocol},
    RULES_END,
};

static int read_health(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_health *h = field;
	h->enabled = 1;
	int err = rules_read_section(x, v, "health", r->sub, h);
	if (err)
		return err;
	if (h->path[0] != '/')
		return rules_fail(x, v, "health: 'path' must start with '/'");
	if (strlen(h->path) > CONF_HEALTH_PATH_MAX)
		return rules_fail(x, v, "health: 'path' is longer than %d characters",
				  CONF_HEALTH_PATH_MAX);
	for (const char *c = h->path; *c; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			return rules_fail(x, v,
					  "health: 'path' may hold only visible ASCII characters "
					  "(no spaces or line breaks: percent-encode them)");
	return 0;
}

static int read_balance(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	const struct lb_ops **ops = field;
	const char *name = rules_scalar(v);
	(void)r;
	if (!name)
		return rules_fail(x, v, "balance: expected a name, found %s", rules_kind_name(v));
	if (!(*ops = lb_find(name)))
		return rules_fail(x, v, "balance: unknown policy '%s'; expected one of: %s", name,
				  lb_names());
	return 0;
}

static int read_discipline(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	const struct qdisc_ops **ops = field;
	const char *name = rules_scalar(v);
	(void)r;
	if (!name)
		return rules_fail(x, v, "queue.discipline: expected a name, found %s",
				  rules_kind_name(v));
	if (!(*ops = qdisc_find(name)))
		return rules_fail(x, v,
				  "queue.discipline: unknown discipline '%s'; expected one of: %s",
				  name, qdisc_names());
	return 0;
}

static const struct rule queue_rules[] = {
    {"discipline", RULE_SECTION, offsetof(struct conf_pool, queue_discipline), 0, 0, NULL,
     read_discipline},
    {"max", RULE_UINT, offsetof(struct conf_pool, queue_max), 0, 10000000, NULL, NULL},
    {"timeout_ms", RULE_UINT, offsetof(struct conf_pool, queue_timeout_ms), 1, MS_MAX, NULL, NULL},
    RULES_END,
};

static const struct rule outlier_rules[] = {
    {"consecutive_5xx", RULE_UINT, offsetof(struct conf_outlier, consecutive_5xx), 0, 1000, NULL,
     NULL},
    {"latency_factor", RULE_UINT, offsetof(struct conf_outlier, latency_factor), 0, 1000, NULL,
     NULL},
    {"ejection_ms", RULE_UINT, offsetof(struct conf_outlier, ejection_ms), 1, MS_MAX, NULL, NULL},
    {"max_ejection_pct", RULE_UINT, offsetof(struct conf_outlier, max_ejection_pct), 0, 100, NULL,
     NULL},
    RULES_END,
};

static int read_hash_key(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_hash *h = field;
	const char *k = rules_scalar(v);
	(void)r;
	if (k && strcmp(k, "client_ip") == 0)
		h->key = HASH_KEY_CLIENT_IP;
	else if (k && strcmp(k, "path") == 0)
		h->key = HASH_KEY_PATH;
	else if (k && strncmp(k, "header:", 7) == 0 && k[7]) {
		h->key = HASH_KEY_HEADER;
		free(h->header);
		if (!(h->header = strdup(k + 7)))
			return rules_fail(x, v, "out of memory");
	} else
		return rules_fail(x, v,
				  "hash.key: expected client_ip, path or header:NAME (e.g. "
				  "header:X-Session-Id)");
	return 0;
}

/* hash: how the proxy hashes a request for a keyed balancer; the balancers add their own
 * keys (balance_factor) to this table. Offsets into the pool. */
static const struct rule hash_rules[] = {
    {"key", RULE_SECTION, offsetof(struct conf_pool, hash), 0, 0, NULL, read_hash_key},
    {"prefix_bytes", RULE_UINT, offsetof(struct conf_pool, hash.prefix_bytes), 1, 65536, NULL,
     NULL},
    {"body_max_bytes", RULE_UINT, offsetof(struct conf_pool, hash.body_max_bytes), 64, 1048576,
     NULL, NULL},
    RULES_END,
};

/* session: which parts of a request name its conversation, and the table that remembers
 * where each went. */
static const struct rule session_rules[] = {
    {"header", RULE_STR, offsetof(struct conf_session, header), 0, 0, NULL, NULL},
    {"cookie", RULE_STR, offsetof(struct conf_session, cookie), 0, 0, NULL, NULL},
    {"responses_api", RULE_BOOL, offsetof(struct conf_session, responses_api), 0, 0, NULL, NULL},
    {"ttl_s", RULE_UINT, offsetof(struct conf_session, ttl_s), 1, 30 * 86400, NULL, NULL},
    {"max_entries", RULE_UINT, offsetof(struct conf_session, max_entries), 16, 16777216, NULL,
     NULL},
    RULES_END,
};

static int read_session(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_session *s = field;
	s->enabled = 1;
	if (!s->header && !(s->header = strdup("x-session-id")))
		return rules_fail(x, v, "out of memory");
	int err = rules_read_section(x, v, "session", r->sub, s);
	if (err)
		return err;
	if (s->cookie && !s->cookie[0])
		return rules_fail(x, v, "session: 'cookie' is empty (leave it out for none)");
	if (!s->header[0] && !s->cookie && !s->responses_api)
		return rules_fail(x, v,
				  "session: nothing names a session (give header, cookie or "
				  "responses_api: true)");
	return 0;
}

#define POOL_UINT(key, field, min, max)                                                            \
	{                                                                                          \
		key, RULE_UINT, offsetof(struct conf_pool, field), min, max, NULL, NULL            \
	}

/* The pool's own keys; conf/pool_policy.c appends each balancer's. */
static const struct rule pool_rules[] = {
    {"name", RULE_STR, offsetof(struct conf_pool, name), 0, 0, NULL, NULL},
    {"balance", RULE_SECTION, offsetof(struct conf_pool, balance), 0, 0, NULL, read_balance},
    {"backends", RULE_SECTION, 0, 0, 0, backend_rules, read_backends},
    {"health", RULE_SECTION, offsetof(struct conf_pool, health), 0, 0, health_rules, read_health},
    POOL_UINT("fail_timeout_ms", fail_timeout_ms, 1, MS_MAX),
    {"queue", RULE_SECTION, 0, 0, 0, queue_rules, NULL},
    POOL_UINT("ewma_decay_ms", ewma_decay_ms, 1, MS_MAX),
    POOL_UINT("hedge_after_ms", hedge_after_ms, 0, MS_MAX),
    {"protocol", RULE_SECTION, offsetof(struct conf_pool, protocol), 0, 0, NULL, read_protocol},
    POOL_UINT("http2_connections", http2_connections, 1, 64),
    POOL_UINT("spare_backends", spare_backends, 0, LB_MAX_BACKENDS),
    {"load_header", RULE_STR, offsetof(struct conf_pool, load_header), 0, 0, NULL, NULL},
    POOL_UINT("load_ttl_ms", load_ttl_ms, 1, MS_MAX),
    POOL_UINT("slow_start_ms", slow_start_ms, 0, MS_MAX),
    POOL_UINT("retry_budget_pct", retry_budget_pct, 0, 100),
    {"outlier", RULE_SECTION, offsetof(struct conf_pool, outlier), 0, 0, outlier_rules, NULL},
    {"hash", RULE_SECTION, 0, 0, 0, hash_rules, NULL},
    {"session", RULE_SECTION, offsetof(struct conf_pool, session), 0, 0, session_rules,
     read_session},
    {"tls", RULE_SECTION, 0, 0, 0, schema_upstream_tls_rules, schema_read_upstream_tls},
    {"engine", RULE_SECTION, offsetof(struct conf_pool, engine), 0, 0, schema_engine_rules,
     schema_read_engine},
    {"engine_metrics", RULE_SECTION, offsetof(struct conf_pool, engine_metrics), 0, 0,
     schema_engine_metrics_rules, schema_read_engine_metrics},
    {"disaggregation", RULE_SECTION, offsetof(struct conf_pool, pd), 0, 0, schema_pd_rules,
     schema_read_pd},
    {"request_headers", RULE_SECTION, offsetof(struct conf_pool, fwd), 0, 0,
     schema_fwd_headers_rules, schema_read_request_headers},
    {"response_headers", RULE_SECTION, offsetof(struct conf_pool, fwd), 0, 0,
     schema_fwd_headers_rules, schema_read_response_headers},
    {"api_key_file", RULE_SECTION, offsetof(struct conf_pool, fwd), 0, 0, NULL,
     schema_read_api_key_file},
    {"api_key_header", RULE_SECTION, offsetof(struct conf_pool, fwd), 0, 0, NULL,
     schema_read_api_key_header},
    {"proxy_protocol", RULE_SECTION, offsetof(struct conf_pool, proxy_protocol), 0, 0, NULL,
     schema_read_proxy_protocol},
    RULES_END,
};

static void pool_set_defaults(struct conf_pool *p)
{
	p->balance = &lb_round_robin;
	p->health.interval_ms = 1000;
	p->health.fall = 3;
	p->health.rise = 2;
	p->fail_timeout_ms = 10000;
	p->queue_max = 1000;
	p->queue_timeout_ms = 5000;
	p->queue_discipline = &qdisc_fair;
	p->ewma_decay_ms = 1000;
	p->load_ttl_ms = 1000;
	p->retry_budget_pct = 20;
	p->http2_connections = 1;
	p->spare_backends = UINT32_MAX; /* not given: check_spare() chooses */
	p->outlier = (struct conf_outlier){.ejection_ms = 30000, .max_ejection_pct = 50};
	p->hash = (struct conf_hash){
	    .key = HASH_KEY_CLIENT_IP, .prefix_bytes = 256, .body_max_bytes = 16384};
	p->session = (struct conf_session){.ttl_s = 3600, .max_entries = 100000};
	schema_engine_metrics_defaults(&p->engine_metrics);
}

/*
 * pools[].spare_backends: slots for backends the admin API adds. Not given: CONF_SPARE_DEFAULT,
 * as many as fit under LB_MAX_BACKENDS, and none for a pool whose balancer fixes its backends
 * at load (its schedule or ring would never name them) or that speaks TLS to its backends (an
 * added backend's certificate name is not known); given there, refused.
 */
static int check_spare(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p)
{
	size_t slots = 0;
	for (size_t j = 0; j < p->nbackends; j++)
		slots += !p->backends[j].discover      ? 1
			 : p->backends[j].discover_max ? p->backends[j].discover_max
						       : DISCOVER_MAX_DEFAULT;
	int cannot = p->balance->prepare || p->tls || p->has_models;
	if (p->spare_backends == UINT32_MAX) {
		size_t room = slots < LB_MAX_BACKENDS ? LB_MAX_BACKENDS - slots : 0;
		p->spare_backends = cannot			? 0
				    : room < CONF_SPARE_DEFAULT ? (unsigned)room
								: CONF_SPARE_DEFAULT;
		return 0;
	}
	yaml_node_t *v = rules_value_of(x, item, "spare_backends");
	if (p->spare_backends && p->balance->prepare)
		return rules_fail(x, v,
				  "pool '%s': balance %s fixes its backends at load, so it cannot "
				  "take added ones; use round-robin, least-connections, p2c, "
				  "peak-ewma or llm, or spare_backends: 0",
				  p->name, p->balance->name);
	if (p->spare_backends && p->has_models)
		return rules_fail(x, v,
				  "pool '%s': its backends list their models, and one added at run "
				  "time could list none (it would take every model no other lists, "
				  "and none would be 'not found'); spare_backends: 0",
				  p->name);
	if (p->spare_backends && p->tls)
		return rules_fail(x, v,
				  "pool '%s': backends cannot be added at run time to a pool with "
				  "tls (their certificate names are not known); spare_backends: 0",
				  p->name);
	if (slots + p->spare_backends > LB_MAX_BACKENDS)
		return rules_fail(x, v,
				  "pool '%s': %zu backends and %u spare ones; at most %d per pool",
				  p->name, slots, p->spare_backends, LB_MAX_BACKENDS);
	return 0;
}

/* The checks of one pool <p> (index <i>) once all its keys are read. */
static int check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p, size_t i)
{
	struct conf *c = load_of(x)->conf;
	if (!p->name)
		return rules_fail(x, item, "pools: 'name' is required");
	if (!p->backends)
		return rules_fail(x, item, "pool '%s': 'backends' is required", p->name);
	for (size_t j = 0; j < i; j++)
		if (strcmp(c->pools[j].name, p->name) == 0) {
			char first[300];
			rules_where(x,
				    rules_node(x, load_of(x)->pools->data.sequence.items.start[j]),
				    first, sizeof(first));
			return rules_fail(x, item, "pool '%s' is defined twice: here and at %s",
					  p->name, first);
		}
	for (size_t j = 0; j < p->nbackends; j++) {
		p->can_queue |= p->backends[j].max_concurrency > 0;
		p->has_models |= p->backends[j].nmodels > 0;
		p->has_kv_events |= p->backends[j].kv_events != NULL;
		if (p->backends[j].tls.given && !p->tls)
			return rules_fail(x, rules_value_of(x, item, "backends"),
					  "pool '%s': backend %s has 'tls' but the pool has none "
					  "(pools[].tls turns TLS on)",
					  p->name, p->backends[j].ep.address);
		if (p->tls && schema_backend_tls_names(p->tls, &p->backends[j]) < 0)
			return rules_fail(x, item, "out of memory");
	}
	int derr = check_protocol(x, item, p);
	if (derr || (derr = schema_discovery_check_pool(x, item, p)) ||
	    (derr = schema_engine_check_kv_sockets(x, item, c, i, p)) ||
	    (derr = schema_forward_check_pool(x, item, p)))
		return derr;
	if (!p->health.timeout_ms)
		p->health.timeout_ms = p->health.interval_ms < 2000 ? p->health.interval_ms : 2000;
	int err = pool_policy_check(x, item, p);
	if (err || (err = check_spare(x, item, p)))
		return err;
	if (p->hash.prefix_bytes > p->hash.body_max_bytes)
		return rules_fail(x, rules_value_of(x, item, "hash"),
				  "pool '%s': hash.prefix_bytes (%u) exceeds hash.body_max_bytes "
				  "(%u)",
				  p->name, p->hash.prefix_bytes, p->hash.body_max_bytes);
	return pool_policy_prepare(x, item, p);
}

static int read_pool_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_pool *p = obj;
	pool_set_defaults(p);
	if (!(p->health.path = strdup("/health")))
		return rules_fail(x, item, "out of memory");
	int err = rules_read_section(x, item, "pools", load_of(x)->pool->pool, p);
	if (!err && !p->load_header && !(p->load_header = strdup("X-Queue-Depth")))
		return rules_fail(x, item, "out of memory");
	return err ? err : check_pool(x, item, p, i);
}

static int read_pools(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf *c = load_of(x)->conf;
	(void)r, (void)field;
	load_of(x)->pools = v;
	return rules_read_list(x, v, "pools", (void **)&c->pools, &c->npools,
			       sizeof(struct conf_pool), read_pool_item);
}

/* --- routes --- */

static const struct rule header_match_rules[] = {
    {"name", RULE_STR, offsetof(struct conf_route, header_name), 0, 0, NULL, NULL},
    {"value", RULE_STR, offsetof(struct conf_route, header_value), 0, 0, NULL, NULL},
    RULES_END,
};

static int read_header_match(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_route *rt = obj;
	int err = rules_read_section(x, v, "match.header", r->sub, rt);
	if (!err && !rt->header_name)
		return rules_fail(x, v, "match.header: 'name' is required");
	return err;
}

static const struct rule match_rules[] = {
    {"path_prefix", RULE_STR, offsetof(struct conf_route, path_prefix), 0, 0, NULL, NULL},
    {"host", RULE_STR, offsetof(struct conf_route, host), 0, 0, NULL, NULL},
    {"method", RULE_STR, offsetof(struct conf_route, method), 0, 0, NULL, NULL},
    {"sni", RULE_STR, offsetof(struct conf_route, sni), 0, 0, NULL, NULL},
    {"header", RULE_SECTION, 0, 0, 0, header_match_rules, read_header_match},
    {"model", RULE_SECTION, 0, 0, 0, NULL, schema_read_match_model},
    RULES_END,
};

static int read_match(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_route *rt = obj;
	int err = rules_read_section(x, v, "match", r->sub, rt);
	if (!err && rt->path_prefix && rt->path_prefix[0] != '/')
		return rules_fail(x, v, "match: 'path_prefix' must start with '/'");
	if (!err && rt->sni &&
	    (!rt->sni[0] || strchr(rt->sni + (rt->sni[0] == '*'), '*') ||
	     (rt->sni[0] == '*' && rt->sni[1] != '.')))
		return rules_fail(x, rules_value_of(x, v, "sni"),
				  "match: 'sni' is a host name, or *.domain for one label");
	return err;
}

static int read_route_pool(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct load *l = load_of(x);
	(void)r;
	if (!rules_scalar(v))
		return rules_fail(x, v, "pool: expected a pool name, found %s", rules_kind_name(v));
	l->route_pool_nodes[(struct conf_route *)obj - l->conf->routes] = v;
	return 0;
}

static int read_priority(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_route *rt = obj;
	const char *name = rules_scalar(v);
	int c = name ? qdisc_priority(name, strlen(name)) : -1;
	(void)r;
	if (c < 0)
		return rules_fail(x, v, "priority: expected low, normal or high");
	rt->priority = (unsigned)c;
	return 0;
}

static int read_spill_pool(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct load *l = load_of(x);
	struct conf_route *rt = obj;
	(void)r;
	if (!rules_scalar(v))
		return rules_fail(x, v, "spillover.pool: expected a pool name, found %s",
				  rules_kind_name(v));
	l->route_spill_nodes[rt - l->conf->routes] = v;
	rt->has_spill = 1;
	return 0;
}

static const struct rule spill_rules[] = {
    {"pool", RULE_SECTION, 0, 0, 0, NULL, read_spill_pool},
    {"after_ms", RULE_UINT, offsetof(struct conf_route, spill_after_ms), 0, MS_MAX, NULL, NULL},
    RULES_END,
};

static int read_spillover(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct conf_route *rt = obj;
	int err = rules_read_section(x, v, "spillover", r->sub, rt);
	if (!err && !rt->has_spill)
		return rules_fail(x, v, "spillover: 'pool' is required");
	return err;
}

/* routes[].name: the route's label in metrics and /status; a letter, then letters, digits,
 * '_', '-' or '.', at most 64 bytes, so it never reads as another route's default (its
 * index) and needs no escaping anywhere. Unique among the routes. */
static int read_route_name(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *obj)
{
	struct load *l = load_of(x);
	struct conf_route *rt = obj;
	const char *s = rules_scalar(v);
	size_t n = s ? strlen(s) : 0;
	int ok = n >= 1 && n <= 64 && isalpha((unsigned char)s[0]);
	(void)r;
	for (size_t i = 1; ok && i < n; i++)
		ok = isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-' || s[i] == '.';
	if (!ok)
		return rules_fail(x, v,
				  "routes: name: expected a letter, then letters, digits, '_', '-' "
				  "or '.' (at most 64 bytes)");
	for (struct conf_route *o = l->conf->routes; o < rt; o++)
		if (o->name && strcmp(o->name, s) == 0)
			return rules_fail(x, v, "routes: name '%s' is already route %zu's", s,
					  (size_t)(o - l->conf->routes));
	return rules_read_string(x, v, &rt->name);
}

static const struct rule route_rules[] = {
    {"name", RULE_SECTION, 0, 0, 0, NULL, read_route_name},
    {"match", RULE_SECTION, 0, 0, 0, match_rules, read_match},
    {"pool", RULE_SECTION, 0, 0, 0, NULL, read_route_pool},
    {"priority", RULE_SECTION, 0, 0, 0, NULL, read_priority},
    {"priority_header", RULE_STR, offsetof(struct conf_route, priority_header), 0, 0, NULL, NULL},
    {"tenant_header", RULE_STR, offsetof(struct conf_route, tenant_header), 0, 0, NULL, NULL},
    {"sse_heartbeat_ms", RULE_UINT, offsetof(struct conf_route, sse_heartbeat_ms), 0, MS_MAX, NULL,
     NULL},
    {"spillover", RULE_SECTION, 0, 0, 0, spill_rules, read_spillover},
    {"auth", RULE_SECTION, 0, 0, 0, schema_auth_rules, schema_read_auth},
    {"rate_limit", RULE_SECTION, 0, 0, 0, schema_rate_limit_rules, schema_read_rate_limit},
    {"budget", RULE_SECTION, 0, 0, 0, schema_budget_rules, schema_read_budget},
    {"api", RULE_SECTION, offsetof(struct conf_route, api), 0, 0, NULL, schema_read_api},
    {"cache", RULE_SECTION, offsetof(struct conf_route, cache), 0, 0, schema_route_cache_rules,
     schema_read_route_cache},
    {"access_log", RULE_BOOL, offsetof(struct conf_route, access_log), 0, 0, NULL, NULL},
    {"websocket", RULE_BOOL, offsetof(struct conf_route, websocket), 0, 0, NULL, NULL},
    {"grpc_web", RULE_BOOL, offsetof(struct conf_route, grpc_web), 0, 0, NULL, NULL},
    {"rewrite", RULE_SECTION, offsetof(struct conf_route, fwd), 0, 0, schema_rewrite_rules,
     schema_read_rewrite},
    {"request_headers", RULE_SECTION, offsetof(struct conf_route, fwd), 0, 0,
     schema_fwd_headers_rules, schema_read_request_headers},
    {"response_headers", RULE_SECTION, offsetof(struct conf_route, fwd), 0, 0,
     schema_fwd_headers_rules, schema_read_response_headers},
    RULES_END,
};

/* What a route is before its keys are read: the defaults docs/config.md gives. */
static void route_defaults(struct conf_route *rt)
{
	rt->priority = QD_NORMAL;
	rt->spill_after_ms = 1000;
	rt->access_log = 1;
}

static int read_route_item(struct rules_ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_route *rt = obj;
	route_defaults(rt);
	int err = rules_read_section(x, item, "routes", route_rules, rt);
	if (err)
		return err;
	if (!load_of(x)->route_pool_nodes[i])
		return rules_fail(x, item, "routes: 'pool' is required");
	load_of(x)->conf->model_routes |= rt->model != NULL;
	if (!rt->path_prefix && !(rt->path_prefix = strdup("/")))
		return rules_fail(x, item, "out of memory");
	return 0;
}

static int read_routes(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct load *l = load_of(x);
	(void)r, (void)field;
	if (v->type == YAML_SEQUENCE_NODE && !l->route_pool_nodes) {
		size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
		l->route_pool_nodes = calloc(n ? n : 1, sizeof(*l->route_pool_nodes));
		l->route_spill_nodes = calloc(n ? n : 1, sizeof(*l->route_spill_nodes));
		if (!l->route_pool_nodes || !l->route_spill_nodes)
			return rules_fail(x, v, "out of memory");
	}
	return rules_read_list(x, v, "routes", (void **)&l->conf->routes, &l->conf->nroutes,
			       sizeof(struct conf_route), read_route_item);
}

/* --- the whole file --- */

/* user: / group: must name an account of this host: checked now, so a typo stops the check
 * and not the start after the listeners are open. */
static int read_user(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	(void)r;
	int rc = rules_read_string(x, v, (char **)field);
	if (!rc && !getpwnam(*(char **)field))
		return rules_fail(x, v, "user: no account '%s' on this host", *(char **)field);
	return rc;
}

static int read_group(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	(void)r;
	int rc = rules_read_string(x, v, (char **)field);
	if (!rc && !getgrnam(*(char **)field))
		return rules_fail(x, v, "group: no group '%s' on this host", *(char **)field);
	return rc;
}

/* access_log: {path, format, sample, syslog_socket} */
static int read_alog_format(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	(void)r;
	static const char *const names[] = {"json", "combined"};
	return rules_read_choice(x, v, "access_log: format", names, 2, field);
}

static int read_alog_sample(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	(void)r;
	char *s = NULL, *end;
	int err = rules_read_string(x, v, &s);
	if (err)
		return err;
	double d = strtod(s, &end);
	if (end == s || *end || !(d >= 0.0 && d <= 1.0))
		err = rules_fail(x, v,
				 "access_log: sample '%s': expected a number from 0 to 1 "
				 "(the share of requests logged)",
				 s);
	else
		*(double *)field = d;
	free(s);
	return err;
}

static const struct rule access_log_rules[] = {
    {"path", RULE_STR, offsetof(struct conf_access_log, path), 0, 0, NULL, NULL},
    {"format", RULE_SECTION, offsetof(struct conf_access_log, format), 0, 0, NULL,
     read_alog_format},
    {"sample", RULE_SECTION, offsetof(struct conf_access_log, sample), 0, 0, NULL,
     read_alog_sample},
    {"syslog_socket", RULE_STR, offsetof(struct conf_access_log, syslog_socket), 0, 0, NULL, NULL},
    RULES_END,
};

static int read_access_log(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	struct conf_access_log *a = field;
	int err = rules_read_section(x, v, "access_log", r->sub, a);
	if (err)
		return err;
	if (!a->path || !*a->path)
		return rules_fail(x, v, "access_log: 'path' is required: a file, stderr or syslog");
	if (strcmp(a->path, "stderr") && strcmp(a->path, "syslog") && a->path[0] != '/')
		return rules_fail(x, rules_value_of(x, v, "path"),
				  "access_log: path '%s': expected an absolute file path, stderr "
				  "or syslog",
				  a->path);
	if (a->syslog_socket && strcmp(a->path, "syslog"))
		return rules_fail(x, rules_value_of(x, v, "syslog_socket"),
				  "access_log: syslog_socket is for path: syslog");
	if (a->syslog_socket && a->syslog_socket[0] != '/')
		return rules_fail(x, rules_value_of(x, v, "syslog_socket"),
				  "access_log: syslog_socket '%s': expected an absolute path (a "
				  "unix datagram socket)",
				  a->syslog_socket);
	return 0;
}

/* metrics: {max_tenants} */
static const struct rule metrics_rules[] = {
    {"max_tenants", RULE_UINT, offsetof(struct conf_metrics, max_tenants), 1, 10000, NULL, NULL},
    RULES_END,
};

/* include: merged by conf/source.c before the schema reads the document */
static int read_include(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	(void)x, (void)r, (void)v, (void)field;
	return 0;
}
/* probes: {min_up, listeners} */
static const struct rule probes_rules[] = {
    {"min_up", RULE_UINT, offsetof(struct conf_probes, min_up), 0, 256, NULL, NULL},
    {"listeners", RULE_BOOL, offsetof(struct conf_probes, listeners), 0, 0, NULL, NULL},
    RULES_END,
};

/* tune.io: auto | epoll | io_uring (core/loop.h's names, in enum loop_backend_choice's order) */
static int read_tune_io(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field)
{
	(void)r;
	const char *names[LOOP_BACKEND_CHOICES];
	for (int i = 0; i < LOOP_BACKEND_CHOICES; i++)
		names[i] = loop_backend_choice_name(i);
	return rules_read_choice(x, v, "tune: io", names, LOOP_BACKEND_CHOICES, field);
}

/* tune: {splice, io} */
static const struct rule tune_rules[] = {
    {"splice", RULE_BOOL, offsetof(struct conf_tune, splice), 0, 0, NULL, NULL},
    {"io", RULE_SECTION, offsetof(struct conf_tune, io), 0, 0, NULL, read_tune_io},
    RULES_END,
};

static const struct rule top_rules[] = {
    {"include", RULE_SECTION, 0, 0, 0, NULL, read_include},
    {"workers", RULE_UINT, offsetof(struct conf, workers), 1, 256, NULL, NULL},
    {"user", RULE_SECTION, offsetof(struct conf, user), 0, 0, NULL, read_user},
    {"group", RULE_SECTION, offsetof(struct conf, group), 0, 0, NULL, read_group},
    {"listen", RULE_SECTION, 0, 0, 0, listen_rules, read_listen},
    {"admin", RULE_SECTION, 0, 0, 0, admin_rules, read_admin},
    {"timeouts", RULE_SECTION, offsetof(struct conf, timeouts), 0, 0, timeout_rules, NULL},
    {"limits", RULE_SECTION, offsetof(struct conf, limits), 0, 0, limit_rules, NULL},
    {"tune", RULE_SECTION, offsetof(struct conf, tune), 0, 0, tune_rules, NULL},
    {"trusted_proxies", RULE_SECTION, 0, 0, 0, NULL, read_trusted_proxies},
    {"pools", RULE_SECTION, 0, 0, 0, pool_rules, read_pools},
    {"routes", RULE_SECTION, 0, 0, 0, route_rules, read_routes},
    {"access_log", RULE_SECTION, offsetof(struct conf, access_log), 0, 0, access_log_rules,
     read_access_log},
    {"metrics", RULE_SECTION, offsetof(struct conf, metrics), 0, 0, metrics_rules, NULL},
    {"probes", RULE_SECTION, offsetof(struct conf, probes), 0, 0, probes_rules, NULL},
    {"cache", RULE_SECTION, offsetof(struct conf, cache), 0, 0, schema_cache_rules,
     schema_read_cache},
    {"discovery", RULE_SECTION, 0, 0, 0, schema_discovery_rules, schema_read_discovery},
    {"cluster", RULE_SECTION, offsetof(struct conf, cluster), 0, 0, schema_cluster_rules,
     schema_read_cluster},
    {"prices", RULE_SECTION, 0, 0, 0, NULL, schema_read_prices},
    {"models", RULE_SECTION, 0, 0, 0, schema_tokmodel_rules, schema_read_tokmodels},
    RULES_END,
};

#define TOP_RULES (sizeof(top_rules) / sizeof(top_rules[0]))

/* The tables a load reads by: top_rules, with the pool's table grown by the balancers'. */
struct tables {
	struct rule top[TOP_RULES];
	struct pool_policy_tables pool;
};

static void tables_build(struct tables *t)
{
	memcpy(t->top, top_rules, sizeof(top_rules));
	pool_policy_build_rules(&t->pool, pool_rules);
	for (size_t i = 0; i < TOP_RULES; i++)
		if (t->top[i].fn == read_pools)
			t->top[i].sub = t->pool.pool;
}

void schema_set_defaults(struct conf *c)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	c->workers = cpus > 0 ? (unsigned)cpus : 1;
	c->access_log.sample = 1.0;
	c->metrics.max_tenants = 100;
	c->probes.min_up = 1;
	schema_discovery_defaults(c);
	schema_cluster_defaults(c);
	c->timeouts = (struct conf_timeouts){
	    .connect_ms = 2000,
	    .header_ms = 10000,
	    .idle_ms = 60000,
	    .first_byte_ms = 120000,
	    .between_bytes_ms = 30000,
	    .shutdown_ms = 10000,
	    .body_ms = 60000,
	    .send_ms = 15000,
	    .tunnel_idle_ms = 300000,
	    .tunnel_drain_ms = 30000,
	};
	c->limits = (struct conf_limits){
	    .max_connections = 100000,
	    .max_header_bytes = 32768,
	    .max_body_bytes = 104857600,
	    .body_buffer_bytes = 1048576,
	    .min_body_rate = 1024,
	    .max_uri_bytes = 8192,
	    .max_headers = CONF_MAX_HEADERS,
	    .max_buffer_memory = 512u << 20,
	    .max_tunnels = 10000,
	    .h2_max_streams = 100,
	    .h2_max_header_list = 32768,
	    .h2_stream_window = 65535,
	    .h2_conn_window = 16u << 20,
	    .h2_max_resets = 200,
	    .h2_max_control = 100,
	};
	c->tune.splice = 1;
	c->tune.io = LOOP_BACKEND_EPOLL; /* io_uring opt-in (core/loop.c says why) */
}

/* Index of the pool called <name>, or c->npools. */
static size_t pool_named(const struct conf *c, const char *name)
{
	size_t j = 0;
	while (j < c->npools && strcmp(c->pools[j].name, name) != 0)
		j++;
	return j;
}

/* Add <name> to the config's guarded fields unless there already; -1 when it is full. */
static int guard_field(struct conf *c, const char *name)
{
	size_t j = 0;
	while (name && j < c->nguarded_fields && strcasecmp(c->guarded_fields[j], name) != 0)
		j++;
	if (!name || j < c->nguarded_fields)
		return 0;
	if (c->nguarded_fields == CONF_GUARDED_FIELDS_MAX)
		return -1;
	c->guarded_fields[c->nguarded_fields++] = name;
	return 0;
}

/* The names of the fields only the proxy sets: the listeners' certificate fields and the
 * auth routes' identity fields. A backend behind several listeners and routes believes
 * X-Tenant or X-Cert-DN from any of them, so every request drops them all. -1: too many. */
static int guarded_fields(struct conf *c)
{
	for (size_t i = 0; i < c->nlistens; i++) {
		const struct conf_tls *t = c->listens[i].tls;
		if (t && (guard_field(c, t->client_subject_header) < 0 ||
			  guard_field(c, t->client_san_header) < 0))
			return -1;
	}
	for (size_t i = 0; i < c->nroutes; i++) {
		const struct conf_auth *a = c->routes[i].auth;
		if (a && guard_field(c, a->identity_header) < 0)
			return -1;
	}
	return 0;
}

/* Whole-config checks that no single key can make: required sections, pool references. */
static int check_whole(struct rules_ctx *x, yaml_node_t *root)
{
	struct load *l = load_of(x);
	struct conf *c = l->conf;
	if (!c->nlistens)
		return rules_fail(x, root,
				  "'listen' is required: where the gateway accepts clients");
	if (guarded_fields(c) < 0)
		return rules_fail(x, root,
				  "more than %d distinct client_subject_header, client_san_header "
				  "and identity_header names",
				  CONF_GUARDED_FIELDS_MAX);
	if (c->group && !c->user)
		return rules_fail(x, rules_value_of(x, root, "group"),
				  "group: give 'user' too (the account the gateway runs as)");
	if (!c->npools)
		return rules_fail(x, root, "'pools' is required: at least one pool of backends");
	for (size_t i = 0; i < c->npools; i++)
		if (schema_pd_check_pool(x, rules_node(x, l->pools->data.sequence.items.start[i]),
					 c, i) < 0 ||
		    schema_engine_check_pool(
			x, rules_node(x, l->pools->data.sequence.items.start[i]), c, i) < 0)
			return -1;
	if (schema_check_l4(x, root, c) < 0)
		return -1;
	for (size_t i = 0; i < c->nroutes; i++) {
		yaml_node_t *n = l->route_pool_nodes[i];
		const char *name = rules_scalar(n);
		size_t j = pool_named(c, name);
		if (j == c->npools)
			return rules_fail(x, n, "routes: no pool named '%s'", name);
		if (c->pools[j].l4)
			return rules_fail(x, n,
					  "routes: pool '%s' is a 'mode: tcp' listener's; a pool "
					  "serves either routes or tcp listeners",
					  name);
		c->routes[i].pool = j;
		if ((n = l->route_spill_nodes[i])) {
			name = rules_scalar(n);
			j = pool_named(c, name);
			if (j == c->npools)
				return rules_fail(x, n, "spillover: no pool named '%s'", name);
			if (j == c->routes[i].pool)
				return rules_fail(x, n, "spillover: '%s' is the route's own pool",
						  name);
			if (c->pools[j].l4)
				return rules_fail(
				    x, n, "spillover: pool '%s' is a 'mode: tcp' listener's", name);
			c->routes[i].spill_pool = j;
		}
		yaml_node_t *rs = rules_value_of(x, root, "routes");
		yaml_node_t *item = rs && rs->type == YAML_SEQUENCE_NODE
					? rules_node(x, rs->data.sequence.items.start[i])
					: root;
		const struct conf_route *r = &c->routes[i];
		if (schema_forward_check_route(x, item, r->fwd, &c->pools[r->pool]) < 0 ||
		    (r->has_spill &&
		     schema_forward_check_route(x, item, r->fwd, &c->pools[r->spill_pool]) < 0))
			return -1;
	}
	if (!c->nroutes) {
		/* no routes: everything goes to the first pool */
		c->routes = calloc(1, sizeof(*c->routes));
		if (!c->routes || !(c->routes[0].path_prefix = strdup("/")))
			return rules_fail(x, root, "out of memory");
		route_defaults(&c->routes[0]); /* access_log on, as for any route */
		c->nroutes = 1;
	}
	if (schema_cache_check(x, root, rules_value_of(x, root, "routes"), c) < 0 ||
	    schema_spend_check(x, root, rules_value_of(x, root, "routes"), c) < 0)
		return -1;
	return schema_model_list(x, rules_value_of(x, root, "routes"), c);
}

int schema_read(struct rules_ctx *x, yaml_node_t *root, struct conf *c)
{
	struct tables *t = malloc(sizeof(*t));
	struct load l = {.conf = c};
	int err;

	if (!t)
		return rules_fail(x, root, "out of memory");
	tables_build(t);
	l.pool = &t->pool;
	x->user = &l;
	err = rules_read_section(x, root, "config", t->top, c);
	if (!err)
		err = check_whole(x, root);
	x->user = NULL;
	free(l.route_pool_nodes);
	free(l.route_spill_nodes);
	free(t);
	return err;
}

void schema_print_keys(FILE *out)
{
	struct tables *t = malloc(sizeof(*t));
	if (!t)
		return;
	tables_build(t);
	rules_print(out, "", t->top);
	free(t);
}
