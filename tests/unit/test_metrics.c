/*
 * test_metrics.c - the metrics registry: counters summed over shards (private, claimed,
 * shared, from many threads at once), series with a sub label, histograms, shards on their
 * own cache lines, tables that contradict themselves refused, the exact Prometheus and
 * /status text written from one table, and a space whose labels come at run time (a bounded
 * name table, obs/names.h) written only as far as it is in use.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "obs/json.h"
#include "obs/metrics.h"
#include "obs/names.h"
#include "obs/prom.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { M_NAME, M_UP, M_REQS, M_RESP, M_LEN, M_WAIT, M_POOL_REQS, M_COUNT };
enum { S_BE, S_POOL };

static const char *const classes[2] = {"2xx", "5xx"};
static const char *const be_labels[] = {"p", "a:1", "p", "b\"2", "q", "c:3"};
static const size_t be_pool[] = {0, 0, 1};
static const char *const pool_labels[] = {"p", "q"};
static const struct metric_space spaces[] = {
    [S_BE] = {.json = "backends",
	      .labels = {"pool", "backend"},
	      .nlabels = 2,
	      .n = 3,
	      .values = be_labels,
	      .parent = S_POOL,
	      .parent_of = be_pool},
    [S_POOL] = {.json = "pools",
		.labels = {"pool"},
		.nlabels = 1,
		.n = 2,
		.values = pool_labels,
		.parent = -1},
};

static double up[3] = {1, 0, 1};
static double qlen[2] = {4, 0};

static double read_up(const void *ctx, size_t i)
{
	(void)ctx;
	return up[i];
}

static double read_len(const void *ctx, size_t i)
{
	(void)ctx;
	return qlen[i];
}

static const char *read_name(const void *ctx, size_t i)
{
	(void)ctx;
	return be_labels[2 * i + 1];
}

static const struct metric_def defs[M_COUNT] = {
    [M_NAME] = {.space = S_BE,
		.type = METRIC_GAUGE,
		.json = "address",
		.json_as = MJ_STRING,
		.read_str = read_name},
    [M_UP] = {"t_up", METRIC_GAUGE, "1 if up", NULL, S_BE, .json = "up", .json_as = MJ_BOOL,
	      .read = read_up},
    [M_REQS] = {"t_requests_total", METRIC_COUNTER, "requests", NULL, S_BE, .json = "requests",
		.json_as = MJ_UINT},
    [M_RESP] = {"t_responses_total", METRIC_COUNTER, "responses", NULL, S_BE, .sub_label = "class",
		.sub_values = classes, .nsub = 2, .json = "responses", .json_as = MJ_UINT},
    [M_LEN] = {"t_queue_length", METRIC_GAUGE, "waiting", NULL, S_POOL, .json = "queue.length",
	       .json_as = MJ_UINT, .read = read_len},
    [M_WAIT] = {"t_queue_wait_seconds", METRIC_HISTOGRAM, "wait", "seconds", S_POOL,
		.json = "queue.wait_ms", .json_as = MJ_SUMMARY},
    [M_POOL_REQS] = {"t_pool_requests_total", METRIC_COUNTER, "pool requests", NULL, S_POOL},
};

static struct metrics *make(size_t nshards, size_t nspare)
{
	struct metrics_config cfg = {.defs = defs,
				     .ndefs = M_COUNT,
				     .spaces = spaces,
				     .nspaces = 2,
				     .nshards = nshards,
				     .nspare = nspare};
	struct metrics *m = NULL;
	assert_int_equal(metrics_create(&cfg, &m), 0);
	return m;
}

static void counters_sum_over_shards(void **state)
{
	(void)state;
	struct metrics *m = make(2, 1);
	metrics_add(metrics_shard(m, 0), M_REQS, 1, 3);
	metrics_add(metrics_shard(m, 1), M_REQS, 1, 4);
	metrics_add(metrics_shard_shared(m), M_REQS, 1, 5);
	metrics_add(metrics_shard_self(m), M_REQS, 1, 6);
	metrics_add(metrics_shard(m, 0), M_REQS, 2, 1);
	assert_null(metrics_shard(m, 2));
	assert_int_equal(metrics_count(m, M_REQS, 0), 0);
	assert_int_equal(metrics_count(m, M_REQS, 1), 18);
	assert_int_equal(metrics_count(m, M_REQS, 2), 1);
	assert_int_equal(metrics_value(m, M_UP, 1), 0);
	assert_int_equal(metrics_value(m, M_UP, 2), 1);
	metrics_destroy(m);
}

static void sub_labels_index_series(void **state)
{
	(void)state;
	struct metrics *m = make(1, 0);
	assert_int_equal(metrics_series(m, M_RESP), 6);
	assert_int_equal(metrics_series(m, M_REQS), 3);
	metrics_add(metrics_shard(m, 0), M_RESP, 2 * 2 + 1, 7); /* backend 2, 5xx */
	assert_int_equal(metrics_count(m, M_RESP, 5), 7);
	assert_int_equal(metrics_count(m, M_RESP, 4), 0);
	metrics_destroy(m);
}

static void histograms_bucket_and_sum(void **state)
{
	(void)state;
	struct metrics *m = make(1, 0);
	struct hist_snap h;
	metrics_observe(metrics_shard(m, 0), M_WAIT, 0, 500);	   /* 0.5 ms: first bucket */
	metrics_observe(metrics_shard_shared(m), M_WAIT, 0, 7000); /* 7 ms: <= 10 ms */
	metrics_observe(metrics_shard(m, 0), M_WAIT, 0, 99000000); /* beyond 30 s */
	metrics_hist(m, M_WAIT, 0, &h);
	assert_int_equal(h.count[0], 1);
	assert_int_equal(h.count[2], 1);
	assert_int_equal(h.count[HIST_BUCKETS - 1], 1);
	assert_int_equal(h.sum_us, 99007500);
	assert_int_equal(hist_total(&h), 3);
	metrics_hist(m, M_WAIT, 1, &h);
	assert_int_equal(hist_total(&h), 0);
	metrics_destroy(m);
}

static void shards_own_their_cache_lines(void **state)
{
	(void)state;
	struct metrics *m = make(3, 0);
	for (size_t i = 0; i < 3; i++) {
		uintptr_t a = (uintptr_t)metrics_shard(m, i)->v;
		assert_int_equal(a % METRICS_SHARD_ALIGN, 0);
		assert_false(metrics_shard(m, i)->shared);
	}
	uintptr_t a = (uintptr_t)metrics_shard(m, 0)->v, b = (uintptr_t)metrics_shard(m, 1)->v;
	assert_true(b - a >= METRICS_SHARD_ALIGN);
	assert_true(metrics_shard_shared(m)->shared);
	metrics_destroy(m);
}

#define THREADS 4
#define ADDS 200000

static void *adder(void *arg)
{
	struct metrics *m = arg;
	for (int i = 0; i < ADDS; i++) {
		metrics_add(metrics_shard_self(m), M_POOL_REQS, 1, 1);
		metrics_observe(metrics_shard_self(m), M_WAIT, 1, 2000);
	}
	return NULL;
}

/* Threads that claim spares, then (spares used up) share the atomic shard: nothing lost. */
static void threads_lose_no_counts(void **state)
{
	(void)state;
	for (size_t spare = 0; spare <= THREADS; spare += THREADS / 2) {
		struct metrics *m = make(0, spare);
		pthread_t t[THREADS];
		for (int i = 0; i < THREADS; i++)
			assert_int_equal(pthread_create(&t[i], NULL, adder, m), 0);
		for (int i = 0; i < THREADS; i++)
			pthread_join(t[i], NULL);
		assert_int_equal(metrics_count(m, M_POOL_REQS, 1), (uint64_t)THREADS * ADDS);
		struct hist_snap h;
		metrics_hist(m, M_WAIT, 1, &h);
		assert_int_equal(h.count[1], (uint64_t)THREADS * ADDS);
		metrics_destroy(m);
	}
}

static void a_bound_shard_is_the_threads_own(void **state)
{
	(void)state;
	struct metrics *m = make(2, 2), *other = make(1, 1);
	metrics_thread_bind(m, metrics_shard(m, 1));
	assert_ptr_equal(metrics_shard_self(m), metrics_shard(m, 1));
	struct metrics_shard *o = metrics_shard_self(other);
	assert_ptr_equal(metrics_shard_self(other), o);
	assert_ptr_equal(metrics_shard_self(m), metrics_shard(m, 1));
	metrics_destroy(other);
	metrics_destroy(m);
}

static char *write_to_string(void (*fn)(FILE *, const struct metrics *), struct metrics *m)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	fn(f, m);
	fclose(f);
	return text;
}

static void contradicting_tables_are_refused(void **state)
{
	(void)state;
	struct metric_def bad[3] = {defs[M_REQS]};
	struct metrics_config cfg = {.defs = bad, .ndefs = 1, .spaces = spaces, .nspaces = 2};
	struct metrics *m = NULL;
	bad[0].name = "t_requests"; /* a counter not ending in _total */
	assert_int_equal(metrics_create(&cfg, &m), -EINVAL);
	bad[0] = defs[M_UP];
	bad[0].read = NULL; /* a gauge with nothing to read */
	assert_int_equal(metrics_create(&cfg, &m), -EINVAL);
	bad[0] = defs[M_WAIT];
	bad[0].name = "t_queue_wait"; /* its unit not in its name */
	assert_int_equal(metrics_create(&cfg, &m), -EINVAL);
	bad[0] = defs[M_REQS];
	bad[0].space = 2;
	assert_int_equal(metrics_create(&cfg, &m), -EINVAL);
	bad[0] = defs[M_REQS];
	bad[0].real = 1; /* a real-valued counter with nothing to read */
	assert_int_equal(metrics_create(&cfg, &m), -EINVAL);
	bad[0] = defs[M_UP];
	bad[0].real = 1; /* only counters are real-valued */
	assert_int_equal(metrics_create(&cfg, &m), -EINVAL);
	assert_null(m);
}

static double read_cpu(const void *ctx, size_t i)
{
	(void)ctx, (void)i;
	return 1.25;
}

static void real_counters_keep_their_fraction(void **state)
{
	(void)state;
	const struct metric_space one = {.json = "process", .n = 1, .parent = -1};
	const struct metric_def cpu = {"t_cpu_seconds_total", METRIC_COUNTER, "cpu", "seconds",
				       .read = read_cpu,      .real = 1};
	struct metrics_config cfg = {.defs = &cpu, .ndefs = 1, .spaces = &one, .nspaces = 1};
	struct metrics *m = NULL;
	assert_int_equal(metrics_create(&cfg, &m), 0);
	assert_true(metrics_value(m, 0, 0) == 1.25);
	char *text = write_to_string(prom_write, m);
	assert_non_null(
	    strstr(text, "# TYPE t_cpu_seconds_total counter\nt_cpu_seconds_total 1.25\n"));
	free(text);
	metrics_destroy(m);
}

static void prometheus_text(void **state)
{
	(void)state;
	struct metrics *m = make(1, 0);
	metrics_add(metrics_shard(m, 0), M_REQS, 0, 12);
	metrics_add(metrics_shard(m, 0), M_RESP, 1, 2);
	metrics_observe(metrics_shard(m, 0), M_WAIT, 1, 20000);
	char *text = write_to_string(prom_write, m);
	const char *want[] = {
	    "# HELP t_up 1 if up\n# TYPE t_up gauge\n"
	    "t_up{pool=\"p\",backend=\"a:1\"} 1\n",
	    "t_up{pool=\"p\",backend=\"b\\\"2\"} 0\n",
	    "# TYPE t_requests_total counter\nt_requests_total{pool=\"p\",backend=\"a:1\"} 12\n",
	    "t_responses_total{pool=\"p\",backend=\"a:1\",class=\"2xx\"} 0\n"
	    "t_responses_total{pool=\"p\",backend=\"a:1\",class=\"5xx\"} 2\n",
	    "t_queue_length{pool=\"p\"} 4\n",
	    "# TYPE t_queue_wait_seconds histogram\n",
	    "t_queue_wait_seconds_bucket{pool=\"q\",le=\"0.01\"} 0\n"
	    "t_queue_wait_seconds_bucket{pool=\"q\",le=\"0.025\"} 1\n",
	    "t_queue_wait_seconds_bucket{pool=\"q\",le=\"+Inf\"} 1\n"
	    "t_queue_wait_seconds_sum{pool=\"q\"} 0.020000\n"
	    "t_queue_wait_seconds_count{pool=\"q\"} 1\n",
	    "# TYPE t_pool_requests_total counter\nt_pool_requests_total{pool=\"p\"} 0\n",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!strstr(text, want[i]))
			fail_msg("missing:\n%s\nin:\n%s", want[i], text);
	assert_null(strstr(text, "address")); /* /status only */
	free(text);
	metrics_destroy(m);
}

static void status_json(void **state)
{
	(void)state;
	struct metrics *m = make(1, 0);
	metrics_add(metrics_shard(m, 0), M_REQS, 2, 5);
	metrics_add(metrics_shard(m, 0), M_RESP, 2 * 2, 5);
	metrics_observe(metrics_shard(m, 0), M_WAIT, 0, 3000);
	char *text = write_to_string(json_write_status, m);
	const char *want =
	    "{\"pools\":["
	    "{\"queue\":{\"length\":4,\"wait_ms\":{\"count\":1,\"p50\":5,\"p99\":5}},"
	    "\"backends\":["
	    "{\"address\":\"a:1\",\"up\":true,\"requests\":0,\"responses\":{\"2xx\":0,\"5xx\":0}},"
	    "{\"address\":\"b\\\"2\",\"up\":false,\"requests\":0,\"responses\":{\"2xx\":0,\"5xx\":"
	    "0}}"
	    "]},"
	    "{\"queue\":{\"length\":0,\"wait_ms\":{\"count\":0,\"p50\":0,\"p99\":0}},"
	    "\"backends\":["
	    "{\"address\":\"c:3\",\"up\":true,\"requests\":5,\"responses\":{\"2xx\":5,\"5xx\":0}}"
	    "]}]}\n";
	assert_string_equal(text, want);
	free(text);
	metrics_destroy(m);
}

/* The feed is /status with the bucket bounds first and buckets and sum in each histogram. */
static void feed_json(void **state)
{
	(void)state;
	struct metrics *m = make(1, 0);
	metrics_observe(metrics_shard(m, 0), M_WAIT, 0, 3000);
	metrics_observe(metrics_shard(m, 0), M_WAIT, 0, 40000000); /* past the last bound */
	char *text = write_to_string(json_write_feed, m);
	const char *want_head =
	    "{\"bounds_ms\":[1,5,10,25,50,100,250,500,1000,2500,5000,10000,"
	    "30000],\"pools\":[{\"queue\":{\"length\":4,\"wait_ms\":{\"count\":2,"
	    "\"p50\":5,\"p99\":-1,\"sum_ms\":40003.000,"
	    "\"buckets\":[0,1,0,0,0,0,0,0,0,0,0,0,0,1]}},";
	if (strncmp(text, want_head, strlen(want_head)) != 0)
		fail_msg("want:\n%s\ngot:\n%s", want_head, text);
	assert_non_null(strstr(text, "\"wait_ms\":{\"count\":0,\"p50\":0,\"p99\":0,\"sum_ms\":0."
				     "000,\"buckets\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"));
	free(text);
	text = write_to_string(json_write_status, m);
	assert_null(strstr(text, "buckets"));
	free(text);
	metrics_destroy(m);
}

static const char *tenant_label(const void *ctx, size_t i, size_t k)
{
	(void)k;
	return names_at(ctx, i);
}

static const char *tenant_name(const void *ctx, size_t i)
{
	return names_at(ctx, i);
}

/* Tenants met at run time, two of them with series of their own, the rest in "other": only
 * the series in use are written, in both writers, and a label callback is refused where it
 * cannot work. */
static void run_time_labels_show_once_in_use(void **state)
{
	(void)state;
	struct name_table *t = NULL;
	assert_int_equal(names_create(2, 16, "other", &t), 0);
	const struct metric_space sp = {.json = "tenants",
					.labels = {"tenant"},
					.nlabels = 1,
					.n = names_max(t) + 1,
					.label = tenant_label,
					.parent = -1};
	const struct metric_def d[2] = {{.space = 0,
					 .type = METRIC_GAUGE,
					 .json = "name",
					 .json_as = MJ_STRING,
					 .read_str = tenant_name},
					{"t_tenant_requests_total", METRIC_COUNTER, "requests",
					 NULL, 0, .json = "requests", .json_as = MJ_UINT}};
	struct metrics_config cfg = {
	    .defs = d, .ndefs = 2, .spaces = &sp, .nspaces = 1, .nshards = 1, .ctx = t};
	struct metrics *m = NULL;
	assert_int_equal(metrics_create(&cfg, &m), 0);
	char *text = write_to_string(prom_write, m);
	assert_string_equal(text, "# HELP t_tenant_requests_total requests\n"
				  "# TYPE t_tenant_requests_total counter\n");
	free(text);
	text = write_to_string(json_write_status, m);
	assert_string_equal(text, "{\"tenants\":[]}\n");
	free(text);
	assert_false(metrics_series_live(m, 0, 0));
	metrics_add(metrics_shard(m, 0), 1, names_intern(t, "acme", 4), 3);
	text = write_to_string(prom_write, m);
	assert_non_null(strstr(text, "\nt_tenant_requests_total{tenant=\"acme\"} 3\n"));
	assert_null(strstr(text, "other"));
	free(text);
	for (const char *const *n = (const char *const[]){"beta", "gamma", "delta", NULL}; *n; n++)
		metrics_add(metrics_shard(m, 0), 1, names_intern(t, *n, strlen(*n)), 1);
	text = write_to_string(json_write_status, m);
	assert_string_equal(text, "{\"tenants\":[{\"name\":\"acme\",\"requests\":3},"
				  "{\"name\":\"beta\",\"requests\":1},"
				  "{\"name\":\"other\",\"requests\":2}]}\n");
	free(text);
	assert_string_equal(metrics_label(m, 0, 2, 0), "other");
	metrics_destroy(m);
	/* a name met at run time is escaped as any label value: quote, line break, backslash
	 * (a client certificate's CN may hold a quote) */
	struct name_table *odd = NULL;
	assert_int_equal(names_create(1, 16, "other", &odd), 0);
	cfg.ctx = odd;
	assert_int_equal(metrics_create(&cfg, &m), 0);
	metrics_add(metrics_shard(m, 0), 1, names_intern(odd, "a\"b\nc\\", 6), 1);
	text = write_to_string(prom_write, m);
	assert_non_null(strstr(text, "\nt_tenant_requests_total{tenant=\"a\\\"b\\nc\\\\\"} 1\n"));
	free(text);
	text = write_to_string(json_write_status, m);
	assert_string_equal(text,
			    "{\"tenants\":[{\"name\":\"a\\\"b\\u000ac\\\\\",\"requests\":1}]}\n");
	free(text);
	metrics_destroy(m);
	names_destroy(odd);
	cfg.ctx = t;
	/* a run-time space must be a root with labels */
	struct metric_space bad = sp;
	bad.parent = 0;
	cfg.spaces = &bad;
	assert_int_equal(metrics_create(&cfg, &m), -EINVAL);
	bad = sp;
	bad.nlabels = 0;
	assert_int_equal(metrics_create(&cfg, &m), -EINVAL);
	names_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(counters_sum_over_shards),
	    cmocka_unit_test(sub_labels_index_series),
	    cmocka_unit_test(histograms_bucket_and_sum),
	    cmocka_unit_test(shards_own_their_cache_lines),
	    cmocka_unit_test(threads_lose_no_counts),
	    cmocka_unit_test(a_bound_shard_is_the_threads_own),
	    cmocka_unit_test(contradicting_tables_are_refused),
	    cmocka_unit_test(real_counters_keep_their_fraction),
	    cmocka_unit_test(prometheus_text),
	    cmocka_unit_test(status_json),
	    cmocka_unit_test(feed_json),
	    cmocka_unit_test(run_time_labels_show_once_in_use),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
