/*
 * test_promtext.c - reading engine gauges from Prometheus text: vLLM, SGLang and TGI pages
 * summed over label sets, labels with quoted braces and escapes skipped, every value form,
 * timestamps and exemplars, and garbage refused whole; vLLM's info gauge read by the labels of
 * its latest sample, strictly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "obs/promtext.h"

#include <errno.h>

static int read_text(const char *t, struct promtext_want *w, size_t n)
{
	return promtext_read(t, strlen(t), w, n);
}

static void vllm_two_models_summed(void **state)
{
	(void)state;
	struct promtext_want w[] = {{.name = "vllm:num_requests_waiting"},
				    {.name = "vllm:num_requests_running"},
				    {.name = "vllm:kv_cache_usage_perc"}};
	const char *t = "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
			"# TYPE vllm:num_requests_waiting gauge\n"
			"vllm:num_requests_waiting{engine=\"0\",model_name=\"a\"} 3.0\n"
			"vllm:num_requests_waiting{engine=\"0\",model_name=\"b\"} 4.0\n"
			"vllm:num_requests_waiting_total 100\n"
			"vllm:num_requests_running{model_name=\"a\"} 2\r\n"
			"\n"
			"vllm:kv_cache_usage_perc{model_name=\"a\"} 2.5e-1\n";
	assert_int_equal(read_text(t, w, 3), 5);
	assert_true(w[0].sum == 7 && w[0].samples == 2);
	assert_true(w[1].sum == 2 && w[1].samples == 1);
	assert_true(w[2].sum == 0.25);
}

static void labels_skipped_exactly(void **state)
{
	(void)state;
	struct promtext_want w[] = {{.name = "sglang:num_queue_reqs"}};
	const char *t = "sglang:num_queue_reqs{model_name=\"x} 9\",path=\"a\\\"}\\\\\"} 5\n"
			"sglang:num_queue_reqs{} 1 1700000000000\n"
			"sglang:num_queue_reqs 2 # {trace_id=\"x\"} 1.0\n"
			"  sglang:num_queue_reqs\t3\n";
	assert_int_equal(read_text(t, w, 1), 4);
	assert_true(w[0].sum == 11);
	assert_int_equal(w[0].samples, 4);
}

static void every_value_form(void **state)
{
	(void)state;
	struct promtext_want w[] = {{.name = "tgi_queue_size"}, {.name = "tgi_batch_current_size"}};
	const char *t = "tgi_queue_size NaN\n"
			"tgi_queue_size +Inf\n"
			"tgi_queue_size -Inf\n"
			"tgi_queue_size 1e3\n"
			"tgi_queue_size -0.5E+1\n"
			"tgi_batch_current_size 7\n";
	assert_int_equal(read_text(t, w, 2), 6);
	assert_true(w[0].sum == 995); /* NaN and the infinities left out */
	assert_int_equal(w[0].samples, 2);
	assert_true(w[1].sum == 7);
}

static void garbage_refused_whole(void **state)
{
	(void)state;
	struct promtext_want w[] = {{.name = "x"}};
	static const char *const bad[] = {
	    "<html>oops</html>\n",
	    "x 1\nx{a=\"b\" 2\n", /* labels never close */
	    "x{a=\"}\"} \n",	  /* no value */
	    "x 0x10\n",		  /* a hexadecimal float */
	    "x nan(1)\n",	  /* not a Prometheus value */
	    "x 1 2 3\n",	  /* more than a timestamp */
	    "x1\n",		  /* no space before the value */
	    "x{a=\"\\\"} 1\n",	  /* the escape ate the closing quote */
	    "9x 1\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(read_text(bad[i], w, 1), -EBADMSG);
	assert_int_equal(read_text("", w, 1), 0);
	assert_int_equal(read_text("# only comments\n", w, 1), 0);
	/* a line without its end, and a quoted name (never matched) */
	assert_int_equal(read_text("x 4", w, 1), 1);
	assert_true(w[0].sum == 4);
	assert_int_equal(read_text("{\"x\"} 4\n", w, 1), 1);
	assert_int_equal(w[0].samples, 0);
}

static const char *const lora_labels[] = {"running_lora_adapters", "waiting_lora_adapters",
					  "max_lora"};

static int span_is(const struct promtext_span *v, const char *want)
{
	char out[64];
	return v->p && promtext_unescape(v, out, sizeof(out)) == strlen(want) && !strcmp(out, want);
}

static void latest_label_set_read(void **state)
{
	(void)state;
	/* one sample per label set ever set, its value the time: the largest is the current */
	struct promtext_want w[] = {
	    {.name = "vllm:lora_requests_info", .labels = lora_labels, .nlabels = 3},
	    {.name = "vllm:num_requests_running"}};
	const char *t =
	    "# TYPE vllm:lora_requests_info gauge\n"
	    "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"a,b\","
	    "waiting_lora_adapters=\"\"} 1.7e9\n"
	    "vllm:lora_requests_info{waiting_lora_adapters=\"c\", running_lora_adapters = "
	    "\"x\\\"y,z\\\\w\",max_lora=\"2\",} 1.7000001e9\n"
	    "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"old\","
	    "waiting_lora_adapters=\"\"} 1.6e9\n"
	    "vllm:num_requests_running{model_name=\"m\"} 3\n";
	assert_int_equal(read_text(t, w, 2), 4);
	assert_int_equal(w[0].samples, 3);
	assert_true(w[0].top == 1.7000001e9);
	assert_true(span_is(&w[0].label[0], "x\"y,z\\w"));
	assert_true(span_is(&w[0].label[1], "c"));
	assert_true(span_is(&w[0].label[2], "2"));
	assert_true(w[1].sum == 3 && !w[1].label[0].p); /* labels not asked for: not read */
	/* a label the latest sample lacks is absent, not the earlier sample's */
	t = "i{a=\"1\",running_lora_adapters=\"p\"} 1\ni{max_lora=\"4\"} 2\n";
	w[0].name = "i";
	assert_int_equal(read_text(t, w, 1), 2);
	assert_null(w[0].label[0].p);
	assert_true(span_is(&w[0].label[2], "4"));
	/* equal values: the later one; NaN never the latest */
	t = "i{max_lora=\"1\"} 5\ni{max_lora=\"2\"} 5\ni{max_lora=\"3\"} NaN\n";
	assert_int_equal(read_text(t, w, 1), 3);
	assert_true(span_is(&w[0].label[2], "2"));
	assert_int_equal(w[0].samples, 2);
}

static void labels_of_a_read_family_strict(void **state)
{
	(void)state;
	struct promtext_want w[] = {{.name = "i", .labels = lora_labels, .nlabels = 3}};
	static const char *const bad[] = {
	    "i{max_lora} 1\n",		     /* no value */
	    "i{max_lora=2} 1\n",	     /* not quoted */
	    "i{max_lora=\"2\" x=\"1\"} 1\n", /* no comma */
	    "i{=\"2\"} 1\n",		     /* no name */
	    "i{1a=\"2\"} 1\n",		     /* not a label name */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(read_text(bad[i], w, 1), -EBADMSG);
		w[0].name = "other"; /* another family's labels are only skipped */
		assert_int_equal(read_text(bad[i], w, 1), 1);
		w[0].name = "i";
	}
	assert_int_equal(read_text("i{} 1\ni 2\n", w, 1), 2);
	assert_true(w[0].top == 2 && !w[0].label[2].p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(vllm_two_models_summed),
	    cmocka_unit_test(labels_skipped_exactly),
	    cmocka_unit_test(every_value_form),
	    cmocka_unit_test(garbage_refused_whole),
	    cmocka_unit_test(latest_label_set_read),
	    cmocka_unit_test(labels_of_a_read_family_strict),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
