/*
 * conf.c - YAML to struct conf, with a position for every complaint.
 *
 * libyaml's document API gives a tree whose nodes remember their line and column; we walk
 * it with one table of key rules per section. A rule names a key, how to read its value
 * (a bounded integer, a size such as 256MiB, a string, an address, or a nested section) and
 * where to store it, so the table is the single list of the keys we accept: the
 * "expected one of" messages and `accelnet check --keys` are printed from it.
 * Keys of the config contract whose features are not built yet are refused by name, so
 * nobody believes that TLS or auth is on when it is not.
 */
#include "conf/conf.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

struct ctx {
	const char *file;
	yaml_document_t *doc;
	struct conf_error *err;
	struct conf *conf;
	/* route -> pool names, resolved once every pool is known */
	yaml_node_t **route_pool_nodes, **route_spill_nodes;
};

enum key_kind {
	K_UINT,	       /* unsigned, min..max */
	K_SIZE,	       /* uint64_t, digits with optional KiB/MiB/GiB (or K/M/G) suffix */
	K_STR,	       /* char *, any scalar */
	K_ADDR,	       /* struct conf_listen: address text and resolved address */
	K_BOOL,	       /* unsigned 0 or 1, from true or false */
	K_SECTION,     /* a nested mapping parsed by fn */
	K_UNSUPPORTED, /* in the contract, not built yet: refused by name */
};

struct key_rule {
	const char *name;
	enum key_kind kind;
	size_t off;
	uint64_t min, max;
	int (*fn)(struct ctx *x, yaml_node_t *val, void *obj);
};

#define RULES_END                                                                                  \
	{                                                                                          \
		NULL, 0, 0, 0, 0, NULL                                                             \
	}

static int fail_at(struct ctx *x, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(struct ctx *x, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;
	int len = snprintf(x->err->msg, sizeof(x->err->msg), "%s:%zu:%zu: ", x->file,
			   n ? n->start_mark.line + 1 : 1, n ? n->start_mark.column + 1 : 1);
	va_start(ap, fmt);
	vsnprintf(x->err->msg + len, sizeof(x->err->msg) - (size_t)len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static yaml_node_t *node_at(struct ctx *x, int id)
{
	return yaml_document_get_node(x->doc, id);
}

static const char *scalar(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static const char *kind_name(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE:
		return "a mapping";
	case YAML_SEQUENCE_NODE:
		return "a list";
	case YAML_SCALAR_NODE:
		return "a scalar";
	default:
		return "nothing";
	}
}

static int read_uint(struct ctx *x, yaml_node_t *n, uint64_t min, uint64_t max, int sizes,
		     uint64_t *out)
{
	const char *s = scalar(n);
	if (!s || !*s)
		return fail_at(x, n, "expected a number, found %s", kind_name(n));
	uint64_t v = 0;
	const char *p = s;
	while (*p >= '0' && *p <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return fail_at(x, n, "'%s' is too large", s);
		v = v * 10 + (uint64_t)(*p++ - '0');
	}
	if (p == s)
		return fail_at(x, n, "expected a number, found '%s'", s);
	if (*p) {
		static const struct {
			const char *suffix;
			unsigned shift;
		} units[] = {{"K", 10},	  {"KiB", 10}, {"M", 20},
			     {"MiB", 20}, {"G", 30},   {"GiB", 30}};
		unsigned shift = 0;
		for (size_t i = 0; sizes && i < sizeof(units) / sizeof(units[0]); i++)
			if (strcmp(p, units[i].suffix) == 0)
				shift = units[i].shift;
		if (!shift)
			return fail_at(x, n, "expected a number%s, found '%s'",
				       sizes ? " with an optional KiB, MiB or GiB suffix" : "", s);
		if (v > (UINT64_MAX >> shift))
			return fail_at(x, n, "'%s' is too large", s);
		v <<= shift;
	}
	if (v < min || v > max)
		return fail_at(x, n, "%s is out of range: expected %llu to %llu", s,
			       (unsigned long long)min, (unsigned long long)max);
	*out = v;
	return 0;
}

static int read_string(struct ctx *x, yaml_node_t *n, char **out)
{
	const char *s = scalar(n);
	if (!s)
		return fail_at(x, n, "expected a string, found %s", kind_name(n));
	char *copy = strdup(s);
	if (!copy)
		return fail_at(x, n, "out of memory");
	free(*out);
	*out = copy;
	return 0;
}

static int read_addr(struct ctx *x, yaml_node_t *n, struct conf_listen *l)
{
	const char *why;
	int err = read_string(x, n, &l->address);
	if (err)
		return err;
	if (net_addr_parse(l->address, &l->addr, &why) < 0)
		return fail_at(x, n, "bad address '%s': %s", l->address, why);
	return 0;
}

static void print_keys(char *out, size_t len, const struct key_rule *rules)
{
	size_t used = 0;
	out[0] = '\0';
	for (const struct key_rule *r = rules; r->name && used < len; r++)
		used += (size_t)snprintf(out + used, len - used, "%s%s", r == rules ? "" : ", ",
					 r->name);
}

/* Check that <map> is a mapping of known, unique keys, and read each value by its rule. */
static int read_section(struct ctx *x, yaml_node_t *map, const char *section,
			const struct key_rule *rules, void *obj)
{
	if (map->type != YAML_MAPPING_NODE)
		return fail_at(x, map, "%s: expected a mapping of keys, found %s", section,
			       kind_name(map));
	for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
	     pair < map->data.mapping.pairs.top; pair++) {
		yaml_node_t *k = node_at(x, pair->key), *v = node_at(x, pair->value);
		const char *name = scalar(k);
		if (!name)
			return fail_at(x, k, "%s: keys must be plain strings", section);
		for (yaml_node_pair_t *prev = map->data.mapping.pairs.start; prev < pair; prev++) {
			const char *pname = scalar(node_at(x, prev->key));
			if (pname && strcmp(pname, name) == 0)
				return fail_at(x, k, "%s: key '%s' is given twice", section, name);
		}
		const struct key_rule *r = rules;
		while (r->name && strcmp(r->name, name) != 0)
			r++;
		if (!r->name) {
			char keys[512];
			print_keys(keys, sizeof(keys), rules);
			return fail_at(x, k, "%s: unknown key '%s'; expected one of: %s", section,
				       name, keys);
		}
		int err = 0;
		uint64_t u;
		char *field = (char *)obj + r->off;
		switch (r->kind) {
		case K_UINT:
			err = read_uint(x, v, r->min, r->max, 0, &u);
			if (!err)
				*(unsigned *)(void *)field = (unsigned)u;
			break;
		case K_SIZE:
			err = read_uint(x, v, r->min, r->max, 1, &u);
			if (!err)
				*(uint64_t *)(void *)field = u;
			break;
		case K_BOOL: {
			const char *b = scalar(v);
			if (b && (strcmp(b, "true") == 0 || strcmp(b, "false") == 0))
				*(unsigned *)(void *)field = b[0] == 't';
			else
				err = fail_at(x, v, "%s: expected true or false", name);
			break;
		}
		case K_STR:
			err = read_string(x, v, (char **)(void *)field);
			break;
		case K_ADDR:
			err = read_addr(x, v, (struct conf_listen *)(void *)field);
			break;
		case K_SECTION:
			err = r->fn(x, v, field);
			break;
		case K_UNSUPPORTED:
			err = fail_at(x, k,
				      "%s: '%s' is part of the config contract but not built yet; "
				      "remove it (see docs/config.md, \"Not yet built\")",
				      section, name);
			break;
		}
		if (err)
			return err;
	}
	return 0;
}

/* Call <fn> on each item of the list <seq>, growing *items (of <size> bytes) to fit. */
static int read_list(struct ctx *x, yaml_node_t *seq, const char *what, void **items, size_t *count,
		     size_t size,
		     int (*fn)(struct ctx *x, yaml_node_t *item, void *obj, size_t index))
{
	if (seq->type != YAML_SEQUENCE_NODE)
		return fail_at(x, seq, "%s: expected a list (items starting with '- '), found %s",
			       what, kind_name(seq));
	size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
	if (n == 0)
		return fail_at(x, seq, "%s: the list is empty", what);
	if (*items)
		return fail_at(x, seq, "%s: given twice", what);
	*items = calloc(n, size);
	if (!*items)
		return fail_at(x, seq, "out of memory");
	*count = n;
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *item = node_at(x, seq->data.sequence.items.start[i]);
		int err = fn(x, item, (char *)*items + i * size, i);
		if (err)
			return err;
	}
	return 0;
}

/* --- sections --- */

static int read_listen_item(struct ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	static const struct key_rule rules[] = {
	    {"address", K_ADDR, 0, 0, 0, NULL},
	    {"tls", K_UNSUPPORTED, 0, 0, 0, NULL},
	    RULES_END,
	};
	struct conf_listen *l = obj;
	(void)i;
	if (item->type == YAML_SCALAR_NODE)
		return read_addr(x, item, l);
	int err = read_section(x, item, "listen", rules, l);
	if (!err && !l->address)
		return fail_at(x, item, "listen: 'address' is required, e.g. 127.0.0.1:8080");
	return err;
}

static int read_listen(struct ctx *x, yaml_node_t *v, void *field)
{
	(void)field;
	return read_list(x, v, "listen", (void **)&x->conf->listens, &x->conf->nlistens,
			 sizeof(struct conf_listen), read_listen_item);
}

static const struct key_rule admin_rules[] = {
    {"address", K_ADDR, offsetof(struct conf, admin), 0, 0, NULL},
    {"token_file", K_STR, offsetof(struct conf, admin_token_file), 0, 0, NULL},
    RULES_END,
};

/* The value of <key> in the mapping <map> that read_section() accepted, or <map>. */
static yaml_node_t *value_of(struct ctx *x, yaml_node_t *map, const char *key)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++)
		if (strcmp(scalar(node_at(x, p->key)), key) == 0)
			return node_at(x, p->value);
	return map;
}

static int addr_is_loopback(const struct net_addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ntohl(((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr) >> 24 == 127;
	const struct in6_addr *in6 = &((const struct sockaddr_in6 *)&a->ss)->sin6_addr;
	return IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
}

/* admin: its rules are offsets into struct conf, which <field> is. */
static int read_admin(struct ctx *x, yaml_node_t *v, void *field)
{
	struct conf *c = field;
	c->has_admin = 1;
	int err = read_section(x, v, "admin", admin_rules, c);
	if (err)
		return err;
	if (!c->admin.address)
		return fail_at(x, v, "admin: 'address' is required, e.g. 127.0.0.1:9090");
	if (c->admin_token_file && access(c->admin_token_file, R_OK) < 0)
		return fail_at(x, value_of(x, v, "token_file"), "admin: token_file '%s': %s",
			       c->admin_token_file, strerror(errno));
	if (!c->admin_token_file && !addr_is_loopback(&c->admin.addr))
		return fail_at(x, value_of(x, v, "address"),
			       "admin: %s can be reached from other hosts: set 'token_file' (a file "
			       "holding the token every admin request must then carry), or use a "
			       "loopback address such as 127.0.0.1",
			       c->admin.address);
	return 0;
}

#define MS_MAX 86400000u

static const struct key_rule timeout_rules[] = {
    {"connect_ms", K_UINT, offsetof(struct conf_timeouts, connect_ms), 1, MS_MAX, NULL},
    {"header_ms", K_UINT, offsetof(struct conf_timeouts, header_ms), 1, MS_MAX, NULL},
    {"idle_ms", K_UINT, offsetof(struct conf_timeouts, idle_ms), 1, MS_MAX, NULL},
    {"first_byte_ms", K_UINT, offsetof(struct conf_timeouts, first_byte_ms), 1, MS_MAX, NULL},
    {"between_bytes_ms", K_UINT, offsetof(struct conf_timeouts, between_bytes_ms), 1, MS_MAX, NULL},
    {"shutdown_ms", K_UINT, offsetof(struct conf_timeouts, shutdown_ms), 0, MS_MAX, NULL},
    {"body_ms", K_UINT, offsetof(struct conf_timeouts, body_ms), 0, MS_MAX, NULL},
    RULES_END,
};

static int read_timeouts(struct ctx *x, yaml_node_t *v, void *field)
{
	return read_section(x, v, "timeouts", timeout_rules, field);
}

static const struct key_rule limit_rules[] = {
    {"max_connections", K_UINT, offsetof(struct conf_limits, max_connections), 1, 10000000, NULL},
    {"max_header_bytes", K_UINT, offsetof(struct conf_limits, max_header_bytes), 1024, 1048576,
     NULL},
    {"max_body_bytes", K_SIZE, offsetof(struct conf_limits, max_body_bytes), 0, UINT64_MAX, NULL},
    {"body_buffer_bytes", K_SIZE, offsetof(struct conf_limits, body_buffer_bytes), 0,
     CONF_BODY_BUFFER_MAX, NULL},
    {"min_body_rate", K_UINT, offsetof(struct conf_limits, min_body_rate), 0, 1u << 30, NULL},
    RULES_END,
};

static int read_limits(struct ctx *x, yaml_node_t *v, void *field)
{
	return read_section(x, v, "limits", limit_rules, field);
}

static const struct key_rule backend_rules[] = {
    {"address", K_ADDR, offsetof(struct conf_backend, ep), 0, 0, NULL},
    {"weight", K_UINT, offsetof(struct conf_backend, weight), 1, 1000, NULL},
    {"max_concurrency", K_UINT, offsetof(struct conf_backend, max_concurrency), 0, 1000000, NULL},
    RULES_END,
};

static int read_backend_item(struct ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_backend *b = obj;
	(void)i;
	b->weight = 1;
	if (item->type == YAML_SCALAR_NODE)
		return read_addr(x, item, &b->ep);
	int err = read_section(x, item, "backends", backend_rules, b);
	if (!err && !b->ep.address)
		return fail_at(x, item, "backends: 'address' is required, e.g. 127.0.0.1:9101");
	return err;
}

static int read_backends(struct ctx *x, yaml_node_t *v, void *obj)
{
	struct conf_pool *p = obj;
	if (v->type == YAML_SEQUENCE_NODE &&
	    v->data.sequence.items.top - v->data.sequence.items.start > LB_MAX_BACKENDS)
		return fail_at(x, v, "backends: at most %d per pool", LB_MAX_BACKENDS);
	return read_list(x, v, "backends", (void **)&p->backends, &p->nbackends,
			 sizeof(struct conf_backend), read_backend_item);
}

static const struct key_rule health_rules[] = {
    {"path", K_STR, offsetof(struct conf_health, path), 0, 0, NULL},
    {"interval_ms", K_UINT, offsetof(struct conf_health, interval_ms), 10, MS_MAX, NULL},
    {"timeout_ms", K_UINT, offsetof(struct conf_health, timeout_ms), 1, MS_MAX, NULL},
    {"fall", K_UINT, offsetof(struct conf_health, fall), 1, 1000, NULL},
    {"rise", K_UINT, offsetof(struct conf_health, rise), 1, 1000, NULL},
    RULES_END,
};

static int read_health(struct ctx *x, yaml_node_t *v, void *field)
{
	struct conf_health *h = field;
	h->enabled = 1;
	int err = read_section(x, v, "health", health_rules, h);
	if (err)
		return err;
	if (h->path[0] != '/')
		return fail_at(x, v, "health: 'path' must start with '/'");
	if (strlen(h->path) > CONF_HEALTH_PATH_MAX)
		return fail_at(x, v, "health: 'path' is longer than %d characters",
			       CONF_HEALTH_PATH_MAX);
	for (const char *c = h->path; *c; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			return fail_at(x, v,
				       "health: 'path' may hold only visible ASCII characters "
				       "(no spaces or line breaks: percent-encode them)");
	return 0;
}

static int read_balance(struct ctx *x, yaml_node_t *v, void *field)
{
	const struct lb_ops **ops = field;
	const char *name = scalar(v);
	if (!name)
		return fail_at(x, v, "balance: expected a name, found %s", kind_name(v));
	*ops = lb_find(name);
	if (!*ops)
		return fail_at(x, v, "balance: unknown policy '%s'; expected one of: %s", name,
			       lb_names());
	return 0;
}

static int read_discipline(struct ctx *x, yaml_node_t *v, void *field)
{
	const struct qdisc_ops **ops = field;
	const char *name = scalar(v);
	if (!name)
		return fail_at(x, v, "queue.discipline: expected a name, found %s", kind_name(v));
	if (!(*ops = qdisc_find(name)))
		return fail_at(x, v,
			       "queue.discipline: unknown discipline '%s'; expected one of: %s",
			       name, qdisc_names());
	return 0;
}

static const struct key_rule queue_rules[] = {
    {"discipline", K_SECTION, offsetof(struct conf_pool, queue_discipline), 0, 0, read_discipline},
    {"max", K_UINT, offsetof(struct conf_pool, queue_max), 0, 10000000, NULL},
    {"timeout_ms", K_UINT, offsetof(struct conf_pool, queue_timeout_ms), 1, MS_MAX, NULL},
    RULES_END,
};

static int read_queue(struct ctx *x, yaml_node_t *v, void *obj)
{
	return read_section(x, v, "queue", queue_rules, obj);
}

static const struct key_rule outlier_rules[] = {
    {"consecutive_5xx", K_UINT, offsetof(struct conf_outlier, consecutive_5xx), 0, 1000, NULL},
    {"latency_factor", K_UINT, offsetof(struct conf_outlier, latency_factor), 0, 1000, NULL},
    {"ejection_ms", K_UINT, offsetof(struct conf_outlier, ejection_ms), 1, MS_MAX, NULL},
    {"max_ejection_pct", K_UINT, offsetof(struct conf_outlier, max_ejection_pct), 0, 100, NULL},
    RULES_END,
};

static int read_outlier(struct ctx *x, yaml_node_t *v, void *field)
{
	return read_section(x, v, "outlier", outlier_rules, field);
}

static int read_hash_key(struct ctx *x, yaml_node_t *v, void *field)
{
	struct conf_hash *h = field;
	const char *k = scalar(v);
	if (k && strcmp(k, "client_ip") == 0)
		h->key = HASH_KEY_CLIENT_IP;
	else if (k && strcmp(k, "path") == 0)
		h->key = HASH_KEY_PATH;
	else if (k && strncmp(k, "header:", 7) == 0 && k[7]) {
		h->key = HASH_KEY_HEADER;
		if (!(h->header = strdup(k + 7)))
			return fail_at(x, v, "out of memory");
	} else
		return fail_at(x, v,
			       "hash.key: expected client_ip, path or header:NAME (e.g. "
			       "header:X-Session-Id)");
	return 0;
}

static const struct key_rule hash_rules[] = {
    {"key", K_SECTION, offsetof(struct conf_pool, hash), 0, 0, read_hash_key},
    {"balance_factor", K_UINT, offsetof(struct conf_pool, lb.load_factor_pct), 100, 1000, NULL},
    {"prefix_bytes", K_UINT, offsetof(struct conf_pool, hash.prefix_bytes), 1, 65536, NULL},
    {"body_max_bytes", K_UINT, offsetof(struct conf_pool, hash.body_max_bytes), 64, 1048576, NULL},
    RULES_END,
};

/* hash: reads into the pool itself (the balance factor lives in its lb state). */
static int read_hash(struct ctx *x, yaml_node_t *v, void *obj)
{
	struct conf_pool *p = obj;
	int err = read_section(x, v, "hash", hash_rules, p);
	if (!err)
		p->hash_given = v;
	return err;
}

static const struct key_rule pool_rules[] = {
    {"name", K_STR, offsetof(struct conf_pool, name), 0, 0, NULL},
    {"balance", K_SECTION, offsetof(struct conf_pool, balance), 0, 0, read_balance},
    {"backends", K_SECTION, 0, 0, 0, read_backends},
    {"health", K_SECTION, offsetof(struct conf_pool, health), 0, 0, read_health},
    {"fail_timeout_ms", K_UINT, offsetof(struct conf_pool, fail_timeout_ms), 1, MS_MAX, NULL},
    {"queue", K_SECTION, 0, 0, 0, read_queue},
    {"ewma_decay_ms", K_UINT, offsetof(struct conf_pool, ewma_decay_ms), 1, MS_MAX, NULL},
    {"hedge_after_ms", K_UINT, offsetof(struct conf_pool, hedge_after_ms), 0, MS_MAX, NULL},
    {"load_header", K_STR, offsetof(struct conf_pool, load_header), 0, 0, NULL},
    {"load_ttl_ms", K_UINT, offsetof(struct conf_pool, load_ttl_ms), 1, MS_MAX, NULL},
    {"wait_for_faster", K_BOOL, offsetof(struct conf_pool, lb.wait_for_faster), 0, 1, NULL},
    {"slow_start_ms", K_UINT, offsetof(struct conf_pool, slow_start_ms), 0, MS_MAX, NULL},
    {"retry_budget_pct", K_UINT, offsetof(struct conf_pool, retry_budget_pct), 0, 100, NULL},
    {"outlier", K_SECTION, offsetof(struct conf_pool, outlier), 0, 0, read_outlier},
    {"hash", K_SECTION, 0, 0, 0, read_hash},
    RULES_END,
};

static int read_pool_item(struct ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_pool *p = obj;
	p->balance = &lb_round_robin;
	p->health.path = strdup("/health");
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
	p->outlier = (struct conf_outlier){.ejection_ms = 30000, .max_ejection_pct = 50};
	p->hash = (struct conf_hash){
	    .key = HASH_KEY_CLIENT_IP, .prefix_bytes = 256, .body_max_bytes = 16384};
	if (!p->health.path)
		return fail_at(x, item, "out of memory");
	int err = read_section(x, item, "pools", pool_rules, p);
	if (!err && !p->load_header && !(p->load_header = strdup("X-Queue-Depth")))
		return fail_at(x, item, "out of memory");
	if (err)
		return err;
	if (!p->name)
		return fail_at(x, item, "pools: 'name' is required");
	if (!p->backends)
		return fail_at(x, item, "pool '%s': 'backends' is required", p->name);
	for (size_t j = 0; j < i; j++)
		if (strcmp(x->conf->pools[j].name, p->name) == 0)
			return fail_at(x, item, "pool '%s' is defined twice", p->name);
	for (size_t j = 0; j < p->nbackends; j++)
		p->can_queue |= p->backends[j].max_concurrency > 0;
	if (!p->health.timeout_ms)
		p->health.timeout_ms = p->health.interval_ms < 2000 ? p->health.interval_ms : 2000;
	if (p->hash_given && !p->balance->keyed)
		return fail_at(x, (const yaml_node_t *)p->hash_given,
			       "pool '%s': 'hash' is for consistent-hash and prefix-affinity "
			       "balancing, not %s",
			       p->name, p->balance->name);
	if (p->lb.wait_for_faster && p->balance != &lb_peak_ewma)
		return fail_at(x, item, "pool '%s': wait_for_faster is for peak-ewma balancing",
			       p->name);
	if (p->balance == &lb_prefix_affinity) {
		if (p->hash.key != HASH_KEY_CLIENT_IP || p->hash.header)
			return fail_at(x, (const yaml_node_t *)p->hash_given,
				       "pool '%s': prefix-affinity hashes the prompt; hash.key is "
				       "for consistent-hash",
				       p->name);
		p->hash.key = HASH_KEY_PROMPT;
		/* a miss costs a whole prefill, and max_concurrency already bounds a backend */
		if (!p->lb.load_factor_pct)
			p->lb.load_factor_pct = 300;
	}
	if (p->hash.prefix_bytes > p->hash.body_max_bytes)
		return fail_at(x, (const yaml_node_t *)p->hash_given,
			       "pool '%s': hash.prefix_bytes (%u) exceeds hash.body_max_bytes (%u)",
			       p->name, p->hash.prefix_bytes, p->hash.body_max_bytes);
	if (p->balance->prepare) {
		unsigned *weights = calloc(p->nbackends, sizeof(*weights));
		const char **names = calloc(p->nbackends, sizeof(*names));
		if (!weights || !names) {
			free(weights);
			free(names);
			return fail_at(x, item, "out of memory");
		}
		for (size_t j = 0; j < p->nbackends; j++) {
			weights[j] = p->backends[j].weight;
			names[j] = p->backends[j].ep.address;
		}
		err = p->balance->prepare(&p->lb, weights, names, p->nbackends);
		free(weights);
		free(names);
		if (err)
			return fail_at(x, item, "pool '%s': cannot prepare '%s' balancing (%s)",
				       p->name, p->balance->name, strerror(-err));
	}
	return 0;
}

static int read_pools(struct ctx *x, yaml_node_t *v, void *field)
{
	(void)field;
	return read_list(x, v, "pools", (void **)&x->conf->pools, &x->conf->npools,
			 sizeof(struct conf_pool), read_pool_item);
}

static const struct key_rule header_match_rules[] = {
    {"name", K_STR, offsetof(struct conf_route, header_name), 0, 0, NULL},
    {"value", K_STR, offsetof(struct conf_route, header_value), 0, 0, NULL},
    RULES_END,
};

static int read_header_match(struct ctx *x, yaml_node_t *v, void *obj)
{
	struct conf_route *r = obj;
	int err = read_section(x, v, "match.header", header_match_rules, r);
	if (!err && !r->header_name)
		return fail_at(x, v, "match.header: 'name' is required");
	return err;
}

static const struct key_rule match_rules[] = {
    {"path_prefix", K_STR, offsetof(struct conf_route, path_prefix), 0, 0, NULL},
    {"host", K_STR, offsetof(struct conf_route, host), 0, 0, NULL},
    {"method", K_STR, offsetof(struct conf_route, method), 0, 0, NULL},
    {"header", K_SECTION, 0, 0, 0, read_header_match},
    RULES_END,
};

static int read_match(struct ctx *x, yaml_node_t *v, void *obj)
{
	struct conf_route *r = obj;
	int err = read_section(x, v, "match", match_rules, r);
	if (!err && r->path_prefix && r->path_prefix[0] != '/')
		return fail_at(x, v, "match: 'path_prefix' must start with '/'");
	return err;
}

static int read_route_pool(struct ctx *x, yaml_node_t *v, void *obj)
{
	struct conf_route *r = obj;
	if (!scalar(v))
		return fail_at(x, v, "pool: expected a pool name, found %s", kind_name(v));
	x->route_pool_nodes[r - x->conf->routes] = v;
	return 0;
}

static int read_priority(struct ctx *x, yaml_node_t *v, void *obj)
{
	struct conf_route *r = obj;
	const char *name = scalar(v);
	int c = name ? qdisc_priority(name, strlen(name)) : -1;
	if (c < 0)
		return fail_at(x, v, "priority: expected low, normal or high");
	r->priority = (unsigned)c;
	return 0;
}

static int read_spill_pool(struct ctx *x, yaml_node_t *v, void *obj)
{
	struct conf_route *r = obj;
	if (!scalar(v))
		return fail_at(x, v, "spillover.pool: expected a pool name, found %s",
			       kind_name(v));
	x->route_spill_nodes[r - x->conf->routes] = v;
	r->has_spill = 1;
	return 0;
}

static const struct key_rule spill_rules[] = {
    {"pool", K_SECTION, 0, 0, 0, read_spill_pool},
    {"after_ms", K_UINT, offsetof(struct conf_route, spill_after_ms), 0, MS_MAX, NULL},
    RULES_END,
};

static int read_spillover(struct ctx *x, yaml_node_t *v, void *obj)
{
	struct conf_route *r = obj;
	int err = read_section(x, v, "spillover", spill_rules, r);
	if (!err && !r->has_spill)
		return fail_at(x, v, "spillover: 'pool' is required");
	return err;
}

static const struct key_rule route_rules[] = {
    {"match", K_SECTION, 0, 0, 0, read_match},
    {"pool", K_SECTION, 0, 0, 0, read_route_pool},
    {"priority", K_SECTION, 0, 0, 0, read_priority},
    {"priority_header", K_STR, offsetof(struct conf_route, priority_header), 0, 0, NULL},
    {"tenant_header", K_STR, offsetof(struct conf_route, tenant_header), 0, 0, NULL},
    {"sse_heartbeat_ms", K_UINT, offsetof(struct conf_route, sse_heartbeat_ms), 0, MS_MAX, NULL},
    {"spillover", K_SECTION, 0, 0, 0, read_spillover},
    {"auth", K_UNSUPPORTED, 0, 0, 0, NULL},
    {"rate_limit", K_UNSUPPORTED, 0, 0, 0, NULL},
    {"cache", K_UNSUPPORTED, 0, 0, 0, NULL},
    RULES_END,
};

static int read_route_item(struct ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	struct conf_route *r = obj;
	r->priority = QD_NORMAL;
	r->spill_after_ms = 1000;
	int err = read_section(x, item, "routes", route_rules, r);
	if (err)
		return err;
	if (!x->route_pool_nodes[i])
		return fail_at(x, item, "routes: 'pool' is required");
	if (!r->path_prefix && !(r->path_prefix = strdup("/")))
		return fail_at(x, item, "out of memory");
	return 0;
}

static int read_routes(struct ctx *x, yaml_node_t *v, void *field)
{
	(void)field;
	if (v->type == YAML_SEQUENCE_NODE) {
		size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
		x->route_pool_nodes = calloc(n ? n : 1, sizeof(*x->route_pool_nodes));
		x->route_spill_nodes = calloc(n ? n : 1, sizeof(*x->route_spill_nodes));
		if (!x->route_pool_nodes || !x->route_spill_nodes)
			return fail_at(x, v, "out of memory");
	}
	return read_list(x, v, "routes", (void **)&x->conf->routes, &x->conf->nroutes,
			 sizeof(struct conf_route), read_route_item);
}

static int read_trusted_item(struct ctx *x, yaml_node_t *item, void *obj, size_t i)
{
	const char *text = scalar(item), *why = NULL;
	(void)i;
	if (!text)
		return fail_at(x, item, "trusted_proxies: expected an address block such as "
					"10.0.0.0/8, found %s",
			       kind_name(item));
	if (net_cidr_parse(text, obj, &why) < 0)
		return fail_at(x, item, "trusted_proxies: '%s': %s", text, why);
	return 0;
}

static int read_trusted_proxies(struct ctx *x, yaml_node_t *v, void *field)
{
	(void)field;
	return read_list(x, v, "trusted_proxies", (void **)&x->conf->trusted_proxies,
			 &x->conf->ntrusted_proxies, sizeof(struct net_cidr), read_trusted_item);
}

static const struct key_rule top_rules[] = {
    {"workers", K_UINT, offsetof(struct conf, workers), 1, 256, NULL},
    {"listen", K_SECTION, 0, 0, 0, read_listen},
    {"admin", K_SECTION, 0, 0, 0, read_admin},
    {"timeouts", K_SECTION, offsetof(struct conf, timeouts), 0, 0, read_timeouts},
    {"limits", K_SECTION, offsetof(struct conf, limits), 0, 0, read_limits},
    {"trusted_proxies", K_SECTION, 0, 0, 0, read_trusted_proxies},
    {"pools", K_SECTION, 0, 0, 0, read_pools},
    {"routes", K_SECTION, 0, 0, 0, read_routes},
    {"cache", K_UNSUPPORTED, 0, 0, 0, NULL},
    RULES_END,
};

static void conf_set_defaults(struct conf *c)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	c->workers = cpus > 0 ? (unsigned)cpus : 1;
	c->timeouts = (struct conf_timeouts){
	    .connect_ms = 2000,
	    .header_ms = 10000,
	    .idle_ms = 60000,
	    .first_byte_ms = 120000,
	    .between_bytes_ms = 30000,
	    .shutdown_ms = 10000,
	    .body_ms = 60000,
	};
	c->limits = (struct conf_limits){
	    .max_connections = 100000,
	    .max_header_bytes = 32768,
	    .max_body_bytes = 104857600,
	    .body_buffer_bytes = 1048576,
	    .min_body_rate = 1024,
	};
}

/* Index of the pool called <name>, or c->npools. */
static size_t pool_named(const struct conf *c, const char *name)
{
	size_t j = 0;
	while (j < c->npools && strcmp(c->pools[j].name, name) != 0)
		j++;
	return j;
}

/* Whole-config checks that no single key can make: required sections, pool references. */
static int conf_check(struct ctx *x, yaml_node_t *root)
{
	struct conf *c = x->conf;
	if (!c->nlistens)
		return fail_at(x, root, "'listen' is required: where the gateway accepts clients");
	if (!c->npools)
		return fail_at(x, root, "'pools' is required: at least one pool of backends");
	for (size_t i = 0; i < c->nroutes; i++) {
		yaml_node_t *n = x->route_pool_nodes[i];
		const char *name = scalar(n);
		size_t j = pool_named(c, name);
		if (j == c->npools)
			return fail_at(x, n, "routes: no pool named '%s'", name);
		c->routes[i].pool = j;
		if ((n = x->route_spill_nodes[i])) {
			name = scalar(n);
			j = pool_named(c, name);
			if (j == c->npools)
				return fail_at(x, n, "spillover: no pool named '%s'", name);
			if (j == c->routes[i].pool)
				return fail_at(x, n, "spillover: '%s' is the route's own pool",
					       name);
			c->routes[i].spill_pool = j;
		}
	}
	if (!c->nroutes) {
		/* no routes: everything goes to the first pool */
		c->routes = calloc(1, sizeof(*c->routes));
		if (!c->routes || !(c->routes[0].path_prefix = strdup("/")))
			return fail_at(x, root, "out of memory");
		c->routes[0].priority = QD_NORMAL;
		c->nroutes = 1;
	}
	return 0;
}

static int conf_load(const char *name, yaml_parser_t *parser, struct conf **out,
		     struct conf_error *err)
{
	yaml_document_t doc;
	struct conf *c = calloc(1, sizeof(*c));
	struct ctx x = {.file = name, .doc = &doc, .err = err, .conf = c};
	int rc = -EINVAL;

	if (!c) {
		snprintf(err->msg, sizeof(err->msg), "%s: out of memory", name);
		return -ENOMEM;
	}
	conf_set_defaults(c);
	c->file = strdup(name);
	if (!yaml_parser_load(parser, &doc)) {
		snprintf(err->msg, sizeof(err->msg), "%s:%zu:%zu: YAML syntax: %s%s%s", name,
			 parser->problem_mark.line + 1, parser->problem_mark.column + 1,
			 parser->problem ? parser->problem : "malformed document",
			 parser->context ? " " : "", parser->context ? parser->context : "");
		conf_free(c);
		return -EINVAL;
	}
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	if (!root) {
		snprintf(err->msg, sizeof(err->msg), "%s:1:1: the file is empty", name);
		goto out;
	}
	rc = read_section(&x, root, "config", top_rules, c);
	if (!rc)
		rc = conf_check(&x, root);
out:
	free(x.route_pool_nodes);
	free(x.route_spill_nodes);
	yaml_document_delete(&doc);
	if (rc) {
		conf_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int conf_load_string(const char *name, const char *text, size_t len, struct conf **out,
		     struct conf_error *err)
{
	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser)) {
		snprintf(err->msg, sizeof(err->msg), "%s: out of memory", name);
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	int rc = conf_load(name, &parser, out, err);
	yaml_parser_delete(&parser);
	return rc;
}

int conf_load_file(const char *path, struct conf **out, struct conf_error *err)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		int e = errno;
		snprintf(err->msg, sizeof(err->msg), "%s: cannot open: %s", path, strerror(e));
		return -e;
	}
	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser)) {
		fclose(f);
		snprintf(err->msg, sizeof(err->msg), "%s: out of memory", path);
		return -ENOMEM;
	}
	yaml_parser_set_input_file(&parser, f);
	int rc = conf_load(path, &parser, out, err);
	yaml_parser_delete(&parser);
	fclose(f);
	return rc;
}

void conf_free(struct conf *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nlistens; i++)
		free(c->listens[i].address);
	free(c->listens);
	free(c->admin.address);
	free(c->admin_token_file);
	free(c->trusted_proxies);
	for (size_t i = 0; i < c->npools; i++) {
		struct conf_pool *p = &c->pools[i];
		for (size_t j = 0; j < p->nbackends; j++)
			free(p->backends[j].ep.address);
		free(p->backends);
		free(p->name);
		free(p->health.path);
		free(p->hash.header);
		free(p->load_header);
		lb_state_free(&p->lb);
	}
	free(c->pools);
	for (size_t i = 0; i < c->nroutes; i++) {
		struct conf_route *r = &c->routes[i];
		free(r->path_prefix);
		free(r->host);
		free(r->method);
		free(r->header_name);
		free(r->header_value);
		free(r->priority_header);
		free(r->tenant_header);
	}
	free(c->routes);
	free(c->file);
	free(c);
}

/* Every key path this build accepts, one per line (for docs checks). */
static void dump_rules(FILE *out, const char *prefix, const struct key_rule *rules)
{
	for (const struct key_rule *r = rules; r->name; r++) {
		if (r->kind == K_UNSUPPORTED)
			continue;
		fprintf(out, "%s%s\n", prefix, r->name);
		char sub[128];
		snprintf(sub, sizeof(sub), "%s%s.", prefix, r->name);
		if (r->fn == read_timeouts)
			dump_rules(out, sub, timeout_rules);
		else if (r->fn == read_limits)
			dump_rules(out, sub, limit_rules);
		else if (r->fn == read_pools)
			dump_rules(out, sub, pool_rules);
		else if (r->fn == read_backends)
			dump_rules(out, sub, backend_rules);
		else if (r->fn == read_health)
			dump_rules(out, sub, health_rules);
		else if (r->fn == read_queue)
			dump_rules(out, sub, queue_rules);
		else if (r->fn == read_outlier)
			dump_rules(out, sub, outlier_rules);
		else if (r->fn == read_hash)
			dump_rules(out, sub, hash_rules);
		else if (r->fn == read_spillover)
			dump_rules(out, sub, spill_rules);
		else if (r->fn == read_routes)
			dump_rules(out, sub, route_rules);
		else if (r->fn == read_match)
			dump_rules(out, sub, match_rules);
		else if (r->fn == read_header_match)
			dump_rules(out, sub, header_match_rules);
		else if (r->fn == read_admin)
			dump_rules(out, sub, admin_rules);
		else if (r->fn == read_listen)
			fprintf(out, "%saddress\n", sub);
	}
}

void conf_print_keys(FILE *out)
{
	dump_rules(out, "", top_rules);
}
