/*
 * test_reqbody.c - what the proxy knows of a request body: the strict view read once (a second
 * read keeps the first answer), a body the view refuses says why, and the "model" it names noted
 * with its hash for the pool's queue -- or none, or refused when the proxy cannot hold it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "policy/models.h"
#include "proxy/reqbody.h"

#include <errno.h>

static void test_view_is_read_once(void **state)
{
	(void)state;
	struct reqbody rb;
	memset(&rb, 0, sizeof(rb));
	const char *good = "{\"model\":\"m1\",\"max_tokens\":7}";
	assert_int_equal(reqbody_read_view(&rb, good, strlen(good)), 0);
	assert_true(rb.view_read && rb.view_ok);
	assert_int_equal(rb.view.max_tokens, 7);
	/* read once: another body later changes nothing */
	const char *bad = "{\"model\":";
	assert_int_equal(reqbody_read_view(&rb, bad, strlen(bad)), 0);
	assert_int_equal(rb.view.max_tokens, 7);
}

static void test_refused_body_says_why(void **state)
{
	(void)state;
	struct reqbody rb;
	memset(&rb, 0, sizeof(rb));
	const char *dup = "{\"model\":\"a\",\"model\":\"b\"}";
	assert_int_equal(reqbody_read_view(&rb, dup, strlen(dup)), -EINVAL);
	assert_true(rb.view_read);
	assert_false(rb.view_ok);
	assert_non_null(rb.view_why);
	assert_int_equal(reqbody_read_view(&rb, "{}", 2), -EINVAL); /* still the first answer */
}

static void test_model_is_noted_with_its_hash(void **state)
{
	(void)state;
	struct reqbody rb;
	struct waiter wt;
	memset(&rb, 0, sizeof(rb));
	memset(&wt, 0, sizeof(wt));
	const char *body = "{\"model\":\"llama-\\u0033\"}";
	assert_int_equal(reqbody_read_view(&rb, body, strlen(body)), 0);
	assert_int_equal(reqbody_note_model(&rb, body, &wt), 0);
	assert_true(rb.model_read);
	assert_string_equal(rb.model, "llama-3");
	assert_int_equal(rb.model_len, 7);
	assert_true(wt.has_model);
	assert_true(wt.model == models_hash("llama-3", 7));
}

static void test_no_model_without_a_view(void **state)
{
	(void)state;
	struct reqbody rb;
	struct waiter wt;
	memset(&rb, 0, sizeof(rb));
	memset(&wt, 0, sizeof(wt));
	wt.has_model = 1;
	assert_int_equal(reqbody_note_model(&rb, NULL, &wt), 0); /* not read (too long, chunked) */
	assert_true(rb.model_read);
	assert_false(wt.has_model);
	assert_int_equal(rb.model_len, 0);
	assert_string_equal(rb.model, "");
}

static void test_unholdable_model_is_refused(void **state)
{
	(void)state;
	struct reqbody rb;
	struct waiter wt;
	memset(&rb, 0, sizeof(rb));
	memset(&wt, 0, sizeof(wt));
	const char *body = "{\"model\":\"a\\u0000b\"}"; /* the backend reads a name: not none */
	assert_int_equal(reqbody_read_view(&rb, body, strlen(body)), 0);
	assert_int_equal(reqbody_note_model(&rb, body, &wt), -EINVAL);
	assert_false(wt.has_model);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_view_is_read_once),
	    cmocka_unit_test(test_refused_body_says_why),
	    cmocka_unit_test(test_model_is_noted_with_its_hash),
	    cmocka_unit_test(test_no_model_without_a_view),
	    cmocka_unit_test(test_unholdable_model_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
