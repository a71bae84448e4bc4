/*
 * test_conf_source.c - what a config is read from: ${VAR} expansion (conf/source.c), include
 * files merged with their own positions, and durations and sizes on time and size keys
 * (conf/rules.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "conf/conf.h"
#include "conf/source.h"

static struct conf_error err;

/* Expand <in>: the return code, and the text (or <in> when unchanged) in out[]. */
static int expand(const char *in, char *out, size_t len, size_t *at, char *var)
{
	char *s = NULL;
	int rc = conf_source_expand(in, &s, at, var, 130);
	snprintf(out, len, "%s", rc ? "" : s ? s : in);
	free(s);
	return rc;
}

static void env_expansion(void **state)
{
	(void)state;
	static const struct {
		const char *in, *out;
	} ok[] = {
	    {"plain", "plain"},
	    {"${T_A}", "alpha"},
	    {"x${T_A}y${T_A}", "xalphayalpha"},
	    {"${T_UNSET:-fallback}", "fallback"},
	    {"${T_EMPTY:-fallback}", "fallback"},
	    {"${T_EMPTY}", ""},
	    {"${T_A:-fallback}", "alpha"},
	    {"${T_UNSET:-}", ""},
	    {"${T_UNSET:-a:b/c}", "a:b/c"},
	    {"$$", "$$"}, /* only "$${" is an escape: a regex's "$$" passes as written */
	    {"$${T_A}", "${T_A}"},
	    {"a$$b$$$${T_A}", "a$$b$$${T_A}"},
	    {"cost $5 and $x", "cost $5 and $x"},
	    {"${T_DOLLAR}", "${T_A}"}, /* a value is taken as it is, never expanded again */
	    {"$", "$"},
	};
	char out[256], var[130];
	size_t at;
	setenv("T_A", "alpha", 1);
	setenv("T_EMPTY", "", 1);
	setenv("T_DOLLAR", "${T_A}", 1);
	unsetenv("T_UNSET");
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(expand(ok[i].in, out, sizeof(out), &at, var), 0);
		assert_string_equal(out, ok[i].out);
	}
	assert_int_equal(expand("ab${T_UNSET}", out, sizeof(out), &at, var), -ENOENT);
	assert_int_equal(at, 2);
	assert_string_equal(var, "T_UNSET");
	static const struct {
		const char *in;
		size_t at;
	} bad[] = {{"${", 0},	     {"x${T_A", 1}, {"${}", 0},	   {"${1X}", 0},
		   {"a${T_A:-x", 1}, {"${T-A}", 0}, {"${ T_A}", 0}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(expand(bad[i].in, out, sizeof(out), &at, var), -EINVAL);
		assert_int_equal(at, bad[i].at);
	}
}

static struct conf *load_ok(const char *yaml)
{
	struct conf *c = NULL;
	if (conf_load_string("t.yaml", yaml, strlen(yaml), &c, &err))
		fail_msg("unexpected error: %s", err.msg);
	return c;
}

static void load_bad(const char *yaml, const char *where, const char *what)
{
	struct conf *c = NULL;
	if (conf_load_string("t.yaml", yaml, strlen(yaml), &c, &err) == 0) {
		conf_free(c);
		fail_msg("accepted a bad config, expected %s %s", where, what);
	}
	if (strncmp(err.msg, where, strlen(where)) != 0 || !strstr(err.msg, what))
		fail_msg("got '%s', expected '%s ... %s'", err.msg, where, what);
}

#define BASE "listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: [127.0.0.1:9001]\n"

static void durations_and_sizes(void **state)
{
	(void)state;
	struct conf *c = load_ok(BASE "timeouts: {connect_ms: 2s, header_ms: 250ms, idle_ms: 5m,"
				      " first_byte_ms: 1h, body_ms: 0, send_ms: 1500}\n"
				      "limits: {max_body_bytes: 16m, max_header_bytes: 64k,"
				      " body_buffer_bytes: 2MiB, max_buffer_memory: 1g}\n"
				      "cache: {memory: 16m, max_object: 1K}\n");
	assert_int_equal(c->timeouts.connect_ms, 2000);
	assert_int_equal(c->timeouts.header_ms, 250);
	assert_int_equal(c->timeouts.idle_ms, 300000);
	assert_int_equal(c->timeouts.first_byte_ms, 3600000);
	assert_int_equal(c->timeouts.body_ms, 0);
	assert_int_equal(c->timeouts.send_ms, 1500);
	assert_int_equal(c->limits.max_body_bytes, 16u << 20);
	assert_int_equal(c->limits.max_header_bytes, 64u << 10);
	assert_int_equal(c->limits.body_buffer_bytes, 2u << 20);
	assert_int_equal(c->limits.max_buffer_memory, 1u << 30);
	assert_int_equal(c->cache.memory, 16u << 20);
	assert_int_equal(c->cache.max_object, 1024);
	conf_free(c);
	/* _s keys: a bare number is seconds; a duration must be whole seconds */
	c = load_ok(BASE "cache: {memory: 1m}\nroutes:\n  - pool: a\n"
			 "    cache: {pass_s: 2m, stale_if_error_s: 3000ms, heuristic_max_s: 7}\n");
	assert_int_equal(c->routes[0].cache.pass_s, 120);
	assert_int_equal(c->routes[0].cache.stale_if_error_s, 3);
	assert_int_equal(c->routes[0].cache.heuristic_max_s, 7);
	conf_free(c);
	load_bad(BASE "timeouts: {idle_ms: 10x}\n", "t.yaml:5:21:", "optional unit: ms, s, m or h");
	load_bad(BASE "timeouts: {idle_ms: s}\n", "t.yaml:5:21:", "expected a number");
	load_bad(BASE "timeouts: {idle_ms: 2d}\n", "t.yaml:5:21:", "found '2d'");
	load_bad(BASE "timeouts: {connect_ms: 25h}\n",
		 "t.yaml:5:24:", "25h (90000000 ms) is out of range: expected 1 to 86400000 ms");
	load_bad(BASE "timeouts: {connect_ms: 0s}\n", "t.yaml:5:24:", "out of range");
	load_bad(BASE "timeouts: {connect_ms: 99999999999999999999h}\n",
		 "t.yaml:5:24:", "too large");
	load_bad(BASE "timeouts: {connect_ms: 9999999999999999h}\n", "t.yaml:5:24:", "too large");
	load_bad(BASE "limits: {max_body_bytes: 16MB}\n", "t.yaml:5:26:", "optional size unit");
	load_bad(BASE "limits: {max_body_bytes: 1ms}\n", "t.yaml:5:26:", "found '1ms'");
	load_bad(BASE "limits: {max_header_bytes: 2m}\n", "t.yaml:5:28:", "out of range");
	load_bad(BASE "limits: {max_connections: 1k}\n", "t.yaml:5:27:", "expected a number");
	load_bad(BASE "cache: {memory: 1m}\nroutes:\n  - pool: a\n    cache: {pass_s: 1500ms}\n",
		 "t.yaml:8:21:", "not a whole number of seconds");
}

static void env_in_values(void **state)
{
	(void)state;
	setenv("T_PORT", "8081", 1);
	setenv("T_SECRET", "hunter2", 1);
	unsetenv("T_UNSET");
	struct conf *c = load_ok("listen: ['${T_HOST:-127.0.0.1}:${T_PORT}']\n"
				 "pools:\n  - name: ${T_POOL:-a}\n"
				 "    backends: [127.0.0.1:9001]\n"
				 "timeouts: {idle_ms: '${T_IDLE:-2s}'}\n");
	assert_string_equal(c->listens[0].address, "127.0.0.1:8081");
	assert_string_equal(c->pools[0].name, "a");
	assert_int_equal(c->timeouts.idle_ms, 2000);
	conf_free(c);
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends:\n"
		 "      - 127.0.0.1:${T_UNSET}\n",
		 "t.yaml:5:19:", "${T_UNSET} is not set");
	load_bad("listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends: ['x${T_UNSET}']\n",
		 "t.yaml:4:18:", "${T_UNSET} is not set");
	/* a value of the wrong type is shown as written, never as it became */
	load_bad(BASE "workers: ${T_SECRET}\n", "t.yaml:5:10:", "'${T_SECRET}'");
	assert_null(strstr(err.msg, "hunter2"));
	/* keys are never expanded */
	load_bad(BASE "${T_PORT}: 1\n", "t.yaml:5:1:", "unknown key '${T_PORT}'");
	/* includes come only from files */
	load_bad(BASE "include: x.yaml\n", "t.yaml:5:10:", "only a config read from a file");
}

static char dir[64];

static const char *put(const char *name, const char *text)
{
	static char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static void includes(void **state)
{
	(void)state;
	char main_path[128], sub[128];
	struct conf *c = NULL;
	snprintf(dir, sizeof(dir), "/tmp/accelnet-unit-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/teams", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	put("teams/a.yaml", "pools:\n  - name: pa\n    backends: [127.0.0.1:9002]\n"
			    "routes:\n  - {pool: pa, match: {path_prefix: /a}}\n");
	put("teams/b.yaml", "pools:\n  - name: pb\n    backends: [127.0.0.1:9003]\n"
			    "include: ../more.yaml\n");
	put("more.yaml", "routes:\n  - {pool: pb, match: {path_prefix: /b}}\n"
			 "workers: 3\n");
	snprintf(main_path, sizeof(main_path), "%s",
		 put("main.yaml", BASE "include: teams/*.yaml\n"));
	assert_int_equal(conf_load_file(main_path, &c, &err), 0);
	assert_int_equal(c->npools, 3);
	assert_string_equal(c->pools[0].name, "a");
	assert_string_equal(c->pools[1].name, "pa");
	assert_string_equal(c->pools[2].name, "pb");
	assert_int_equal(c->nroutes, 2);
	assert_string_equal(c->routes[0].path_prefix, "/a");
	assert_int_equal(c->routes[1].pool, 2);
	assert_int_equal(c->workers, 3);
	conf_free(c);
	/* an error inside an included file names that file */
	put("more.yaml", "routes:\n  - {pool: pb, match: {path_prefx: /b}}\n");
	assert_int_not_equal(conf_load_file(main_path, &c, &err), 0);
	if (!strstr(err.msg, "/teams/../more.yaml:2:24: match: unknown key 'path_prefx'"))
		fail_msg("got '%s'", err.msg);
	/* a key given in two files, unless both are lists */
	put("more.yaml", "workers: 3\n");
	put("main.yaml", BASE "workers: 2\ninclude: [more.yaml]\n");
	assert_int_not_equal(conf_load_file(main_path, &c, &err), 0);
	assert_non_null(strstr(err.msg, "more.yaml:1:1: 'workers' is given here and at "));
	assert_non_null(strstr(err.msg, "main.yaml:5:10"));
	/* a cycle, and a chain too deep */
	put("more.yaml", "include: main.yaml\n");
	assert_int_not_equal(conf_load_file(main_path, &c, &err), 0);
	assert_non_null(strstr(err.msg, "more.yaml:1:10: include: "));
	assert_non_null(strstr(err.msg, "includes itself"));
	put("more.yaml", "include: more2.yaml\n");
	put("more2.yaml", "include: [more3.yaml]\n");
	put("more3.yaml", "include: more4.yaml\n");
	put("more4.yaml", "include: more5.yaml\n");
	put("more5.yaml", "include: more6.yaml\n");
	put("more6.yaml", "include: more7.yaml\n");
	put("more7.yaml", "include: more8.yaml\n");
	put("more8.yaml", "workers: 1\n");
	assert_int_not_equal(conf_load_file(main_path, &c, &err), 0);
	assert_non_null(strstr(err.msg, "more7.yaml:1:10: include: "));
	assert_non_null(strstr(err.msg, "more than 8 files deep"));
	/* an included file that is no mapping; an include that is no name */
	put("more.yaml", "- a\n");
	assert_int_not_equal(conf_load_file(main_path, &c, &err), 0);
	assert_non_null(strstr(err.msg, "more.yaml:1:1: an included file holds top-level keys"));
	put("main.yaml", BASE "include: {a: b}\n");
	assert_int_not_equal(conf_load_file(main_path, &c, &err), 0);
	assert_non_null(strstr(err.msg, "main.yaml:5:10: include: expected a file name"));
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(env_expansion),
	    cmocka_unit_test(durations_and_sizes),
	    cmocka_unit_test(env_in_values),
	    cmocka_unit_test(includes),
	};
	return cmocka_run_group_tests_name("config source", tests, NULL, NULL);
}
