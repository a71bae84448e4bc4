/*
 * test_conf.c - configuration loading: defaults, every kind of value, and errors that name
 * the file, line and column a user must fix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "conf/conf.h"

static struct conf_error err;

static struct conf *load_ok(const char *yaml)
{
	struct conf *c = NULL;
	int rc = conf_load_string("t.yaml", yaml, strlen(yaml), &c, &err);
	if (rc)
		fail_msg("unexpected error: %s", err.msg);
	return c;
}

/* Load <yaml>, expect failure, and check the message starts with <where> and has <what>. */
static void load_bad(const char *yaml, const char *where, const char *what)
{
	struct conf *c = NULL;
	int rc = conf_load_string("t.yaml", yaml, strlen(yaml), &c, &err);
	if (rc == 0) {
		conf_free(c);
		fail_msg("accepted a bad config, expected %s %s", where, what);
	}
	if (strncmp(err.msg, where, strlen(where)) != 0 || !strstr(err.msg, what))
		fail_msg("got '%s', expected '%s ... %s'", err.msg, where, what);
}

static const char minimal[] = "listen:\n"
			      "  - address: 127.0.0.1:8080\n"
			      "pools:\n"
			      "  - name: web\n"
			      "    backends:\n"
			      "      - address: 127.0.0.1:9001\n";

static void defaults(void **state)
{
	(void)state;
	struct conf *c = load_ok(minimal);
	assert_true(c->workers >= 1);
	assert_int_equal(c->timeouts.connect_ms, 2000);
	assert_int_equal(c->timeouts.header_ms, 10000);
	assert_int_equal(c->timeouts.idle_ms, 60000);
	assert_int_equal(c->timeouts.first_byte_ms, 120000);
	assert_int_equal(c->timeouts.between_bytes_ms, 30000);
	assert_int_equal(c->limits.max_connections, 100000);
	assert_int_equal(c->limits.max_header_bytes, 32768);
	assert_int_equal(c->limits.max_body_bytes, 104857600);
	assert_int_equal(c->npools, 1);
	assert_ptr_equal(c->pools[0].balance, &lb_round_robin);
	assert_int_equal(c->pools[0].backends[0].weight, 1);
	assert_int_equal(c->pools[0].health.enabled, 0);
	/* no routes: everything goes to the first pool */
	assert_int_equal(c->nroutes, 1);
	assert_string_equal(c->routes[0].path_prefix, "/");
	assert_int_equal(c->routes[0].pool, 0);
	assert_false(c->has_admin);
	/* scheduling defaults */
	const struct conf_pool *p = &c->pools[0];
	assert_ptr_equal(p->queue_discipline, &qdisc_fair);
	assert_int_equal(p->ewma_decay_ms, 1000);
	assert_int_equal(p->lb.wait_for_faster, 0);
	assert_string_equal(p->load_header, "X-Queue-Depth");
	assert_int_equal(p->load_ttl_ms, 1000);
	assert_int_equal(p->hedge_after_ms, 0);
	assert_int_equal(p->slow_start_ms, 0);
	assert_int_equal(p->retry_budget_pct, 20);
	assert_int_equal(p->outlier.consecutive_5xx, 0);
	assert_int_equal(p->outlier.latency_factor, 0);
	assert_int_equal(p->outlier.ejection_ms, 30000);
	assert_int_equal(p->outlier.max_ejection_pct, 50);
	assert_int_equal(c->routes[0].priority, QD_NORMAL);
	assert_null(c->routes[0].priority_header);
	assert_null(c->routes[0].tenant_header);
	assert_false(c->routes[0].has_spill);
	conf_free(c);
}

static void prefix_affinity_defaults(void **state)
{
	(void)state;
	/* a cache miss costs a whole prefill: affinity holds up to 3x the mean load by default */
	struct conf *c = load_ok("listen: [127.0.0.1:8080]\npools:\n  - name: llm\n"
				 "    balance: prefix-affinity\n    backends: [127.0.0.1:9101]\n");
	assert_int_equal(c->pools[0].lb.load_factor_pct, 300);
	assert_int_equal(c->pools[0].hash.key, HASH_KEY_PROMPT);
	assert_int_equal(c->pools[0].hash.prefix_bytes, 256);
	conf_free(c);
}

static void scheduling_keys(void **state)
{
	(void)state;
	struct conf *c =
	    load_ok("listen: [127.0.0.1:8080]\n"
		    "pools:\n"
		    "  - name: gpu\n"
		    "    balance: prefix-affinity\n"
		    "    backends: [127.0.0.1:9101, 127.0.0.1:9102]\n"
		    "    hash: {balance_factor: 150, prefix_bytes: 128, body_max_bytes: 4096}\n"
		    "    queue: {discipline: fifo, max: 10, timeout_ms: 100}\n"
		    "    ewma_decay_ms: 2000\n"
		    "    slow_start_ms: 5000\n"
		    "    retry_budget_pct: 10\n"
		    "    outlier: {consecutive_5xx: 3, latency_factor: 4, ejection_ms: 1000, "
		    "max_ejection_pct: 34}\n"
		    "  - name: spare\n"
		    "    balance: consistent-hash\n"
		    "    backends: [127.0.0.1:9103]\n"
		    "    hash: {key: \"header:X-Session\"}\n"
		    "routes:\n"
		    "  - pool: gpu\n"
		    "    priority: high\n"
		    "    priority_header: X-Priority\n"
		    "    tenant_header: X-Tenant\n"
		    "    spillover: {pool: spare, after_ms: 250}\n");
	const struct conf_pool *p = &c->pools[0];
	assert_ptr_equal(p->balance, &lb_prefix_affinity);
	assert_int_equal(p->hash.key, HASH_KEY_PROMPT);
	assert_int_equal(p->lb.load_factor_pct, 150);
	assert_int_equal(p->lb.nring, 2 * 64);
	assert_int_equal(p->hash.prefix_bytes, 128);
	assert_ptr_equal(p->queue_discipline, &qdisc_fifo);
	assert_int_equal(p->ewma_decay_ms, 2000);
	assert_int_equal(p->slow_start_ms, 5000);
	assert_int_equal(p->retry_budget_pct, 10);
	assert_int_equal(p->outlier.consecutive_5xx, 3);
	assert_int_equal(p->outlier.max_ejection_pct, 34);
	assert_int_equal(c->pools[1].hash.key, HASH_KEY_HEADER);
	assert_string_equal(c->pools[1].hash.header, "X-Session");
	assert_int_equal(c->pools[1].lb.load_factor_pct, 125);

	const struct conf_route *r = &c->routes[0];
	assert_int_equal(r->priority, QD_HIGH);
	assert_string_equal(r->priority_header, "X-Priority");
	assert_string_equal(r->tenant_header, "X-Tenant");
	assert_true(r->has_spill);
	assert_int_equal(r->spill_pool, 1);
	assert_int_equal(r->spill_after_ms, 250);
	conf_free(c);
}

static void full_contract(void **state)
{
	(void)state;
	struct conf *c =
	    load_ok("workers: 3\n"
		    "listen:\n"
		    "  - address: 127.0.0.1:8080\n"
		    "  - \"[::1]:8081\"\n"
		    "admin:\n"
		    "  address: 127.0.0.1:9090\n"
		    "timeouts: {connect_ms: 100, header_ms: 200, idle_ms: 300, first_byte_ms: 400, "
		    "between_bytes_ms: 500, shutdown_ms: 0}\n"
		    "limits: {max_connections: 10, max_header_bytes: 4096, max_body_bytes: 1MiB}\n"
		    "pools:\n"
		    "  - name: gpu\n"
		    "    balance: weighted-round-robin\n"
		    "    backends:\n"
		    "      - {address: 127.0.0.1:9101, weight: 3, max_concurrency: 4}\n"
		    "      - 127.0.0.1:9102\n"
		    "    health: {path: /healthz, interval_ms: 500, fall: 2, rise: 1}\n"
		    "  - name: web\n"
		    "    balance: least-connections\n"
		    "    backends: [{address: localhost:9201}]\n"
		    "routes:\n"
		    "  - match: {path_prefix: /v1/, method: POST}\n"
		    "    pool: gpu\n"
		    "  - match: {host: static.example.com, header: {name: X-Tier, value: gold}}\n"
		    "    pool: web\n");
	assert_int_equal(c->workers, 3);
	assert_int_equal(c->nlistens, 2);
	assert_int_equal(c->listens[1].addr.ss.ss_family, 10 /* AF_INET6 */);
	assert_true(c->has_admin);
	assert_int_equal(c->timeouts.between_bytes_ms, 500);
	assert_int_equal(c->timeouts.shutdown_ms, 0);
	assert_int_equal(c->limits.max_body_bytes, 1048576);
	assert_int_equal(c->npools, 2);
	assert_ptr_equal(c->pools[0].balance, &lb_weighted_round_robin);
	assert_int_equal(c->pools[0].lb.nschedule, 4);
	assert_int_equal(c->pools[0].backends[0].weight, 3);
	assert_int_equal(c->pools[0].backends[0].max_concurrency, 4);
	assert_string_equal(c->pools[0].backends[1].ep.address, "127.0.0.1:9102");
	assert_true(c->pools[0].health.enabled);
	assert_string_equal(c->pools[0].health.path, "/healthz");
	assert_int_equal(c->pools[0].health.timeout_ms, 500);
	assert_int_equal(c->nroutes, 2);
	assert_string_equal(c->routes[0].method, "POST");
	assert_int_equal(c->routes[1].pool, 1);
	assert_string_equal(c->routes[1].path_prefix, "/");
	assert_string_equal(c->routes[1].header_name, "X-Tier");
	assert_string_equal(c->routes[1].header_value, "gold");
	conf_free(c);
}

static void errors_point_at_the_problem(void **state)
{
	(void)state;
	load_bad("listen:\n  - address: 127.0.0.1:8080\nwokers: 2\n",
		 "t.yaml:3:1:", "unknown key 'wokers'");
	load_bad("workers: two\n", "t.yaml:1:10:", "expected a number");
	load_bad("workers: 0\n", "t.yaml:1:10:", "out of range");
	load_bad("listen:\n  - address: 127.0.0.1:99999\n", "t.yaml:2:14:", "port");
	load_bad("listen:\n  - address: nocolon\n", "t.yaml:2:14:", "HOST:PORT");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    balance: fastest\n"
		 "    backends: [127.0.0.1:1]\n",
		 "t.yaml:4:14:", "unknown policy 'fastest'");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    balance: p2c\n"
		 "    backends: [127.0.0.1:1]\n    hash: {key: path}\n",
		 "t.yaml:6:11:", "'hash' is for consistent-hash, prefix-affinity and llm");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    balance: prefix-affinity\n"
		 "    backends: [127.0.0.1:1]\n    hash: {key: path}\n",
		 "t.yaml:6:11:", "prefix-affinity hashes the prompt");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    balance: consistent-hash\n"
		 "    backends: [127.0.0.1:1]\n    hash: {key: cookie}\n",
		 "t.yaml:6:17:", "expected client_ip, path or header:NAME");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    balance: consistent-hash\n"
		 "    backends: [127.0.0.1:1]\n    hash: {balance_factor: 90}\n",
		 "t.yaml:6:28:", "out of range");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    balance: peak-ewma\n"
		 "    backends: [127.0.0.1:1]\n    wait_for_faster: yes\n",
		 "t.yaml:6:22:", "wait_for_faster: expected true or false");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
		 "    backends: [127.0.0.1:1]\n    wait_for_faster: true\n",
		 "t.yaml:3:5:", "wait_for_faster is for peak-ewma");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "    queue: {discipline: lifo}\n",
		 "t.yaml:5:25:", "unknown discipline 'lifo'; expected one of: fair, fifo");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "routes:\n  - pool: a\n    priority: urgent\n",
		 "t.yaml:7:15:", "expected low, normal or high");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "routes:\n  - pool: a\n    spillover: {pool: a}\n",
		 "t.yaml:7:23:", "the route's own pool");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "routes:\n  - pool: a\n    spillover: {pool: z}\n",
		 "t.yaml:7:23:", "no pool named 'z'");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "routes:\n  - pool: a\n    spillover: {after_ms: 5}\n",
		 "t.yaml:7:16:", "'pool' is required");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "    outlier: {max_ejection_pct: 101}\n",
		 "t.yaml:5:33:", "out of range");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "routes:\n  - pool: b\n",
		 "t.yaml:6:11:", "no pool named 'b'");
	load_bad("listen: [127.0.0.1:8080]\n", "t.yaml:1:1:", "'pools' is required");
	load_bad("pools:\n  - name: a\n    backends: [127.0.0.1:1]\n",
		 "t.yaml:1:1:", "'listen' is required");
	load_bad("listen: [127.0.0.1:8080]\nlisten: [127.0.0.1:8081]\n",
		 "t.yaml:2:1:", "given twice");
	load_bad("listen: [127.0.0.1:8080\n", "t.yaml:", "YAML syntax");
	load_bad("listen:\n  - address: 127.0.0.1:8080\n    tls: {cert: a.pem}\n",
		 "t.yaml:3:10:", "'cert' and 'key' go together");
	load_bad("listen:\n  - address: 127.0.0.1:8080\n    tls: {cert: a.pem, key: a.key, "
		 "client_auth: optional}\n",
		 "t.yaml:3:49:", "need client_ca");
	load_bad("listen:\n  - address: 127.0.0.1:8080\n    tls: {cert: a.pem, key: a.key, "
		 "client_ca: c.pem, client_auth: maybe}\n",
		 "t.yaml:3:67:", "\"required\" or \"optional\"");
	load_bad("listen:\n  - address: 127.0.0.1:8080\n    tls: {cert: /nonexistent.pem, "
		 "key: a.key}\n",
		 "t.yaml:3:10:", "cannot read the TLS certificate /nonexistent.pem");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "  - name: a\n    backends: [127.0.0.1:2]\n",
		 "t.yaml:5:5:", "defined twice");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: []\n",
		 "t.yaml:4:15:", "empty");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends:\n"
		 "      - {address: 127.0.0.1:1, weight: 0}\n",
		 "t.yaml:5:40:", "out of range");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "    health: {path: health}\n",
		 "t.yaml:5:13:", "must start with '/'");
	load_bad("listen: [127.0.0.1:8080]\nlimits: {max_body_bytes: 10XB}\n",
		 "t.yaml:2:26:", "KiB");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "routes:\n  - match: {path_prefix: /v1/}\n",
		 "t.yaml:6:5:", "'pool' is required");
	load_bad("", "t.yaml:1:1:", "empty");
	load_bad("- a\n- b\n", "t.yaml:1:1:", "expected a mapping");
}

/* A key a balancer declares is read, checked and dumped from that declaration alone. */
static void balancer_keys_come_from_their_declarations(void **state)
{
	(void)state;
	char *dump = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&dump, &len);
	assert_non_null(f);
	conf_print_keys(f);
	fclose(f);
	const struct lb_ops *ops;
	for (size_t i = 0; (ops = lb_at(i)); i++)
		for (const struct policy_opt *o = ops->opts; o && o->name; o++) {
			char line[128];
			snprintf(line, sizeof(line), "\npools.%s%s%s\n",
				 o->section ? o->section : "", o->section ? "." : "", o->name);
			if (!strstr(dump, line))
				fail_msg("%s declares %s, --keys lacks it", ops->name, line + 1);
		}
	free(dump);
	/* each balancer's own default, and another balancer's key left at its "off" value */
	struct conf *c = load_ok("listen: [127.0.0.1:8080]\npools:\n"
				 "  - name: a\n    balance: consistent-hash\n"
				 "    backends: [127.0.0.1:1]\n"
				 "  - name: b\n    balance: peak-ewma\n    wait_for_faster: true\n"
				 "    backends: [127.0.0.1:2]\n"
				 "  - name: c\n    wait_for_faster: false\n"
				 "    backends: [127.0.0.1:3]\n");
	assert_int_equal(c->pools[0].lb.load_factor_pct, 125);
	assert_int_equal(c->pools[1].lb.wait_for_faster, 1);
	assert_int_equal(c->pools[2].lb.wait_for_faster, 0);
	conf_free(c);
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
		 "    hash: {balance_factor: 150}\n",
		 "t.yaml:5:11:",
		 "'hash' is for consistent-hash, prefix-affinity and llm balancing, not "
		 "round-robin");
	load_bad(
	    "listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:1]\n"
	    "    balance: consistent-hash\n    hash: {factor: 150}\n",
	    "t.yaml:6:12:", "expected one of: key, prefix_bytes, body_max_bytes, balance_factor");
}

/* pools.tls: what each backend sends as SNI and checks its certificate against. */
static void upstream_tls_names(void **state)
{
	(void)state;
	struct conf *c = load_ok("listen: [127.0.0.1:8080]\npools:\n"
				 "  - name: byname\n    backends: [localhost:443, 127.0.0.1:443]\n"
				 "    tls: {}\n"
				 "  - name: named\n    backends: ['[::1]:443']\n"
				 "    tls: {sni: api.test}\n"
				 "  - name: pinned\n    backends: [127.0.0.1:443]\n"
				 "    tls: {sni: api.test, verify_name: other.test}\n"
				 "  - name: open\n    backends: [localhost:443]\n"
				 "    tls: {verify: false}\n"
				 "  - name: plain\n    backends: [localhost:80]\n"
				 "  - name: own\n    tls: {sni: pool.test}\n    backends:\n"
				 "      - {address: 127.0.0.1:443, tls: {sni: one.test}}\n"
				 "      - {address: 127.0.0.1:444, tls: {verify_name: 127.0.0.1}}\n"
				 "      - 127.0.0.1:445\n");
	const struct conf_pool *p = c->pools;
	assert_non_null(p[0].tls);
	assert_int_equal(p[0].tls->verify, 1);
	assert_string_equal(p[0].backends[0].tls_sni, "localhost"); /* a name: sent and checked */
	assert_string_equal(p[0].backends[0].tls_verify_name, "localhost");
	assert_null(p[0].backends[1].tls_sni); /* an address: no SNI, the address is checked */
	assert_string_equal(p[0].backends[1].tls_verify_name, "127.0.0.1");
	assert_string_equal(p[1].backends[0].tls_sni, "api.test");
	assert_string_equal(p[1].backends[0].tls_verify_name, "api.test");
	assert_string_equal(p[2].backends[0].tls_sni, "api.test");
	assert_string_equal(p[2].backends[0].tls_verify_name, "other.test");
	assert_int_equal(p[3].tls->verify, 0);
	assert_string_equal(p[3].backends[0].tls_sni, "localhost");
	assert_null(p[3].backends[0].tls_verify_name); /* nothing is checked */
	assert_null(p[4].tls);
	assert_null(p[4].backends[0].tls_sni);
	/* a backend's own names come first, then the pool's */
	assert_string_equal(p[5].backends[0].tls_sni, "one.test");
	assert_string_equal(p[5].backends[0].tls_verify_name, "one.test");
	assert_string_equal(p[5].backends[1].tls_sni, "pool.test");
	assert_string_equal(p[5].backends[1].tls_verify_name, "127.0.0.1");
	assert_string_equal(p[5].backends[2].tls_sni, "pool.test");
	assert_string_equal(p[5].backends[2].tls_verify_name, "pool.test");
	conf_free(c);
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends:\n"
		 "      - {address: localhost:1, tls: {sni: x.test}}\n",
		 "t.yaml:5:7:", "has 'tls' but the pool has none");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [localhost:1]\n"
		 "    tls: {sni: '::1'}\n",
		 "t.yaml:5:16:", "sni is a host name");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [localhost:1]\n"
		 "    tls: {cert: /nonexistent.pem, key: /nonexistent.key}\n",
		 "t.yaml:5:10:", "cannot load the TLS certificate");
}

static void missing_file(void **state)
{
	(void)state;
	struct conf *c;
	assert_int_not_equal(conf_load_file("/nonexistent/accelnet.yaml", &c, &err), 0);
	assert_non_null(strstr(err.msg, "/nonexistent/accelnet.yaml: cannot open"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(defaults),
	    cmocka_unit_test(full_contract),
	    cmocka_unit_test(scheduling_keys),
	    cmocka_unit_test(prefix_affinity_defaults),
	    cmocka_unit_test(errors_point_at_the_problem),
	    cmocka_unit_test(balancer_keys_come_from_their_declarations),
	    cmocka_unit_test(upstream_tls_names),
	    cmocka_unit_test(missing_file),
	};
	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
