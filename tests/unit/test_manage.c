/*
 * test_manage.c - the runtime admin API's pure parts and its changes to a runtime built from
 * a config: which call a method and path name (control/apipath.h: every call, 404, 405 with
 * Allow, percent-decoding and what it refuses); numeric backend addresses
 * (manage_parse_address); manage.h's changes on a real runtime (an added backend in a spare
 * slot, found by text or address, taken out and its slot free only once nothing is in
 * flight, a removed config backend back, weights and caps in range, DNS and fixed-schedule
 * pools refused); and the state file written and applied again on a fresh runtime.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <cmocka.h>

#include "conf/conf.h"
#include "core/log.h"
#include "control/apipath.h"
#include "control/manage.h"
#include "runtime/pool.h"
#include "runtime/runtime.h"
#include "control/statefile.h"

static struct apipath T;

static int parse(enum http_method m, const char *path)
{
	const char *why = NULL;
	int rc = apipath_parse(m, path, strlen(path), &T, &why);
	assert_non_null(why);
	return rc;
}

static void test_apipath_calls(void **state)
{
	(void)state;
	assert_int_equal(parse(HTTP_GET, "/api/backends"), 0);
	assert_int_equal(T.call, APIPATH_BACKENDS);
	assert_int_equal(parse(HTTP_GET, "/api/backends?pool=x"), 0);
	assert_int_equal(parse(HTTP_POST, "/api/pools/gpu/backends"), 0);
	assert_int_equal(T.call, APIPATH_ADD);
	assert_string_equal(T.pool, "gpu");
	assert_string_equal(T.backend, "");
	assert_int_equal(parse(HTTP_PATCH, "/api/pools/gpu/backends/10.0.0.1:80"), 0);
	assert_int_equal(T.call, APIPATH_CHANGE);
	assert_string_equal(T.backend, "10.0.0.1:80");
	assert_int_equal(parse(HTTP_DELETE, "/api/pools/gpu/backends/%5B%3A%3A1%5D%3A80"), 0);
	assert_int_equal(T.call, APIPATH_REMOVE);
	assert_string_equal(T.backend, "[::1]:80");
	static const struct {
		const char *action;
		enum apipath_call call;
	} actions[] = {{"drain", APIPATH_DRAIN},
		       {"enable", APIPATH_ENABLE},
		       {"disable", APIPATH_DISABLE},
		       {"remove", APIPATH_REMOVE}};
	for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++) {
		char path[128];
		snprintf(path, sizeof(path), "/api/pools/p/backends/a:1/%s", actions[i].action);
		assert_int_equal(parse(HTTP_POST, path), 0);
		assert_int_equal(T.call, actions[i].call);
	}
	assert_int_equal(parse(HTTP_GET, "/api/maintenance"), 0);
	assert_int_equal(T.call, APIPATH_MAINTENANCE_GET);
	assert_int_equal(parse(HTTP_PUT, "/api/maintenance"), 0);
	assert_int_equal(T.call, APIPATH_MAINTENANCE_SET);
	assert_int_equal(parse(HTTP_POST, "/api/cache/purge"), 0);
	assert_int_equal(T.call, APIPATH_PURGE);
	assert_int_equal(parse(HTTP_POST, "/api/reload"), 0);
	assert_int_equal(T.call, APIPATH_RELOAD);
}

static void test_apipath_refusals(void **state)
{
	(void)state;
	static const char *const missing[] = {
	    "/api",
	    "/api/",
	    "/api/backend",
	    "/api/backends/",
	    "/api/pools",
	    "/api/pools/gpu",
	    "/api/pools/gpu/servers",
	    "/api/pools/gpu/backends/a:1/explode",
	    "/api/pools/gpu/backends/a:1/drain/more",
	    "/api/a/b/c/d/e/f/g/h/i/j",
	    "/status",
	};
	for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++)
		if (parse(HTTP_POST, missing[i]) != 404)
			fail_msg("not 404: %s", missing[i]);
	assert_int_equal(parse(HTTP_POST, "/api/backends"), 405);
	assert_string_equal(T.allow, "GET");
	assert_int_equal(parse(HTTP_GET, "/api/pools/p/backends"), 405);
	assert_int_equal(parse(HTTP_GET, "/api/pools/p/backends/a:1/drain"), 405);
	assert_int_equal(parse(HTTP_POST, "/api/pools/p/backends/a:1"), 405);
	assert_string_equal(T.allow, "PATCH, PUT, DELETE");
	assert_int_equal(parse(HTTP_GET, "/api/reload"), 405);
	assert_int_equal(parse(HTTP_DELETE, "/api/maintenance"), 405);
	static const char *const bad[] = {
	    "/api/pools/%zz/backends", "/api/pools/%4/backends",       "/api/pools/%/backends",
	    "/api/pools/%00/backends", "/api/pools/%0a/backends",      "/api/pools/a%2fb/backends",
	    "/api/pools//backends",    "/api/pools/p/backends//drain",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse(HTTP_POST, bad[i]) != 400)
			fail_msg("not 400: %s", bad[i]);
	char longp[400] = "/api/pools/";
	memset(longp + strlen(longp), 'p', APIPATH_SEGMENT_MAX);
	strcat(longp, "/backends");
	assert_int_equal(parse(HTTP_POST, longp), 400);
	/* nothing is read past the length given */
	const char *why;
	assert_int_equal(apipath_parse(HTTP_GET, "/api/backendsXYZ", 13, &T, &why), 0);
	assert_int_equal(apipath_parse(HTTP_POST, "/api/pools/p/backends/%4", 24, &T, &why), 400);
}

static void test_parse_address(void **state)
{
	(void)state;
	struct net_addr a;
	char canon[64];
	const char *why;
	assert_int_equal(manage_parse_address("10.0.0.7:8000", &a, canon, sizeof(canon), &why), 0);
	assert_string_equal(canon, "10.0.0.7:8000");
	assert_int_equal(manage_parse_address("[::1]:80", &a, canon, sizeof(canon), &why), 0);
	assert_string_equal(canon, "[::1]:80");
	assert_int_equal(manage_parse_address("[0:0::1]:080", &a, canon, sizeof(canon), &why), 0);
	assert_string_equal(canon, "[::1]:80");
	static const char *const bad[] = {
	    "",
	    "10.0.0.7",
	    "10.0.0.7:",
	    "10.0.0.7:0",
	    "10.0.0.7:65536",
	    "10.0.0.7:8x",
	    ":80",
	    "host:80",
	    "[::1:80",
	    "[::1]80",
	    "[zz]:80",
	    "10.0.0.7:-1",
	    "1.2.3.4.5:1",
	    "10.0.0.7:1234567",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (manage_parse_address(bad[i], &a, canon, sizeof(canon), &why) != -EINVAL)
			fail_msg("taken: '%s'", bad[i]);
}

/* --- changes on a runtime --- */

static const char yaml[] = "workers: 1\n"
			   "listen: [{address: 127.0.0.1:1}]\n"
			   "pools:\n"
			   "  - name: gpu\n"
			   "    spare_backends: 2\n"
			   "    backends:\n"
			   "      - {address: 127.0.0.1:9101, weight: 2, max_concurrency: 4}\n"
			   "      - 127.0.0.1:9102\n"
			   "  - name: wrr\n"
			   "    balance: weighted-round-robin\n"
			   "    backends: [127.0.0.1:9201]\n";

static void make(struct conf **c, struct runtime **rt)
{
	struct conf_error e;
	if (conf_load_string("t.yaml", yaml, strlen(yaml), c, &e) != 0)
		fail_msg("config refused: %s", e.msg);
	assert_int_equal(runtime_create(*c, rt), 0);
}

static void test_add_remove_change(void **state)
{
	(void)state;
	struct conf *c;
	struct runtime *rt;
	struct backend *b, *again;
	char err[300];
	make(&c, &rt);
	struct pool_rt *p = manage_pool(rt, "gpu"), *w = manage_pool(rt, "wrr");
	assert_non_null(p);
	assert_null(manage_pool(rt, "nope"));
	assert_int_equal(p->nbackends, 4);
	assert_int_equal(w->nbackends, 1); /* a fixed schedule: no spare slots */
	assert_non_null(manage_find(p, "127.0.0.1:9101"));
	assert_null(manage_find(p, "127.0.0.1:9103"));

	assert_int_equal(
	    manage_add(p, "127.0.0.1:9103", 0, MANAGE_CAP_DEFAULT, "t", &b, err, sizeof(err)), 0);
	assert_int_equal(b->source, BACKEND_FROM_API);
	assert_string_equal(b->name, "127.0.0.1:9103");
	assert_int_equal(atomic_load(&b->weight), 1);
	assert_int_equal(backend_cap(b), 0);
	assert_ptr_equal(manage_find(p, "127.0.0.1:9103"), b);
	assert_int_equal(manage_add(p, "127.0.0.1:9103", 1, 0, "t", &again, err, sizeof(err)),
			 -EEXIST);
	assert_int_equal(manage_add(p, "127.0.0.1:9104", 3, 7, "t", &again, err, sizeof(err)), 0);
	assert_int_equal(manage_add(p, "127.0.0.1:9105", 1, 0, "t", &again, err, sizeof(err)),
			 -ENOSPC);
	assert_non_null(strstr(err, "spare_backends"));
	assert_int_equal(manage_add(p, "localhost:1", 1, 0, "t", &again, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(manage_add(w, "127.0.0.1:9202", 1, 0, "t", &again, err, sizeof(err)),
			 -ENOSPC);

	/* removed with a request in flight: not free until it ends */
	atomic_fetch_add(&b->share->inflight, 1);
	assert_int_equal(manage_remove(p, b, "t", err, sizeof(err)), 0);
	assert_string_equal(backend_state_name(b), "removing");
	assert_int_equal(manage_remove(p, b, "t", err, sizeof(err)), -EALREADY);
	assert_int_equal(manage_add(p, "127.0.0.1:9105", 1, 0, "t", &again, err, sizeof(err)),
			 -ENOSPC);
	atomic_fetch_sub(&b->share->inflight, 1);
	assert_true(backend_slot_free(b));
	assert_null(manage_find(p, "127.0.0.1:9103"));
	assert_int_equal(manage_add(p, "127.0.0.1:9105", 1, 0, "t", &again, err, sizeof(err)), 0);
	assert_ptr_equal(again, b);
	assert_string_equal(b->name, "127.0.0.1:9105");

	/* a config backend: removed, back with its config's weight and cap */
	struct backend *cb = manage_find(p, "127.0.0.1:9101");
	assert_int_equal(manage_remove(p, cb, "t", err, sizeof(err)), 0);
	assert_string_equal(backend_state_name(cb), "removed");
	assert_int_equal(manage_set_state(p, cb, BACKEND_ENABLED, "t", err, sizeof(err)),
			 -EALREADY);
	assert_int_equal(
	    manage_add(p, "127.0.0.1:9101", 0, MANAGE_CAP_DEFAULT, "t", &again, err, sizeof(err)),
	    0);
	assert_ptr_equal(again, cb);
	assert_int_equal(atomic_load(&cb->weight), 2);
	assert_int_equal(backend_cap(cb), 4);

	/* weights, caps, states */
	assert_int_equal(manage_set_weight(p, cb, 0, "t", err, sizeof(err)), -EINVAL);
	assert_int_equal(manage_set_weight(p, cb, 1001, "t", err, sizeof(err)), -EINVAL);
	assert_int_equal(manage_set_weight(p, cb, 9, "t", err, sizeof(err)), 0);
	assert_int_equal(atomic_load(&cb->weight), 9);
	assert_int_equal(manage_set_weight(w, &w->backends[0], 2, "t", err, sizeof(err)),
			 -EOPNOTSUPP);
	assert_int_equal(manage_set_cap(p, cb, MANAGE_CAP_MAX + 1, "t", err, sizeof(err)), -EINVAL);
	assert_int_equal(manage_set_cap(p, cb, 1, "t", err, sizeof(err)), 0);
	assert_int_equal(backend_cap(cb), 1);
	assert_int_equal(manage_set_state(p, cb, BACKEND_DRAINING, "t", err, sizeof(err)), 0);
	assert_false(backend_usable(cb, 0));
	assert_string_equal(backend_state_name(cb), "draining");
	assert_int_equal(manage_set_state(p, cb, 7, "t", err, sizeof(err)), -EINVAL);
	assert_int_equal(manage_set_state(p, cb, BACKEND_ENABLED, "t", err, sizeof(err)), 0);
	assert_true(backend_usable(cb, 0));
	assert_int_equal(manage_state_of("disabled"), BACKEND_DISABLED);
	assert_int_equal(manage_state_of("off"), -1);
	assert_int_equal(manage_set_maintenance(rt, MANAGE_RETRY_MAX + 1, "t", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(manage_set_maintenance(rt, 5, "t", err, sizeof(err)), 0);
	assert_int_equal(atomic_load(&rt->maintenance), 5);
	runtime_destroy(rt);
	conf_free(c);
}

static void test_state_file_round_trip(void **state)
{
	(void)state;
	struct conf *c;
	struct runtime *rt;
	struct backend *b;
	char err[300], path[] = "/tmp/accelnet-test-state-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	make(&c, &rt);
	struct pool_rt *p = manage_pool(rt, "gpu");
	assert_int_equal(manage_add(p, "127.0.0.1:9103", 5, 6, "t", &b, err, sizeof(err)), 0);
	assert_int_equal(
	    manage_set_weight(p, manage_find(p, "127.0.0.1:9101"), 7, "t", err, sizeof(err)), 0);
	assert_int_equal(manage_remove(p, manage_find(p, "127.0.0.1:9102"), "t", err, sizeof(err)),
			 0);
	assert_int_equal(manage_set_maintenance(rt, 12, "t", err, sizeof(err)), 0);
	assert_int_equal(statefile_save(rt, path, err, sizeof(err)), 0);
	runtime_destroy(rt);

	assert_int_equal(runtime_create(c, &rt), 0);
	assert_int_equal(statefile_apply(rt, path, err, sizeof(err)), 0);
	p = manage_pool(rt, "gpu");
	b = manage_find(p, "127.0.0.1:9103");
	assert_non_null(b);
	assert_int_equal(atomic_load(&b->weight), 5);
	assert_int_equal(backend_cap(b), 6);
	assert_int_equal(atomic_load(&manage_find(p, "127.0.0.1:9101")->weight), 7);
	assert_int_equal(backend_cap(manage_find(p, "127.0.0.1:9101")), 4); /* the config's */
	assert_false(backend_present(manage_find(p, "127.0.0.1:9102")));
	assert_int_equal(atomic_load(&rt->maintenance), 12);
	runtime_destroy(rt);

	/* not a state file: nothing applied */
	static const char *const junk[] = {"",
					   "{",
					   "[]",
					   "{\"version\": 2}",
					   "{\"version\": 1, \"pools\": {\"gpu\": [{}]}}",
					   "{\"version\": 1, \"pools\": {\"gpu\": [{\"address\": "
					   "\"127.0.0.1:9109\", \"source\": \"api\", \"weight\": "
					   "0}]}}"};
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		FILE *f = fopen(path, "w");
		fputs(junk[i], f);
		fclose(f);
		assert_int_equal(runtime_create(c, &rt), 0);
		if (statefile_apply(rt, path, err, sizeof(err)) != -EINVAL)
			fail_msg("applied: %s", junk[i]);
		assert_null(manage_find(manage_pool(rt, "gpu"), "127.0.0.1:9109"));
		runtime_destroy(rt);
	}
	unlink(path);
	assert_int_equal(runtime_create(c, &rt), 0);
	assert_int_equal(statefile_apply(rt, path, err, sizeof(err)), 0); /* no file yet */
	runtime_destroy(rt);
	conf_free(c);
}

int main(void)
{
	log_threshold = LOG_ERROR;
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_apipath_calls),	  cmocka_unit_test(test_apipath_refusals),
	    cmocka_unit_test(test_parse_address),	  cmocka_unit_test(test_add_remove_change),
	    cmocka_unit_test(test_state_file_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
