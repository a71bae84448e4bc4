/*
 * test_prompt.c - the prompt affinity key: the same prefix gives the same key, the key
 * ignores what follows the prefix, only the top-level field counts, and partial bodies ask
 * for more instead of guessing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "http/prompt.h"

static int key_of(const char *body, int complete, size_t prefix, uint64_t *key)
{
	return http_prompt_key(body, strlen(body), complete, prefix, key);
}

static void shared_prefix_same_key(void **state)
{
	(void)state;
	uint64_t a, b, c;
	assert_int_equal(key_of("{\"model\":\"m\",\"prompt\":\"You are a helpful assistant. "
				"Question one\"}",
				1, 24, &a),
			 1);
	assert_int_equal(key_of("{\"prompt\": \"You are a helpful assistant. Question two\", "
				"\"max_tokens\": 5}",
				1, 24, &b),
			 1);
	assert_true(a == b);
	assert_int_equal(key_of("{\"prompt\":\"Translate to French: cat\"}", 1, 24, &c), 1);
	assert_true(a != c);
}

static void messages_and_short_prompts(void **state)
{
	(void)state;
	uint64_t a, b, c;
	assert_int_equal(key_of("{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
				"{\"role\":\"user\",\"content\":\"hi\"}]}",
				1, 40, &a),
			 1);
	assert_int_equal(key_of("{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
				"{\"role\":\"user\",\"content\":\"bye\"}]}",
				1, 40, &b),
			 1);
	assert_true(a == b);
	/* shorter than the prefix: the whole value, so "hi" and "hi!" differ */
	assert_int_equal(key_of("{\"prompt\":\"hi\"}", 1, 256, &a), 1);
	assert_int_equal(key_of("{\"prompt\":\"hi!\"}", 1, 256, &b), 1);
	assert_true(a != b);
	/* a prompt given as a list of strings */
	assert_int_equal(key_of("{\"prompt\":[\"hi\"]}", 1, 256, &c), 1);
}

static void only_the_top_level_field(void **state)
{
	(void)state;
	uint64_t a, b;
	/* "prompt" inside another field's object or string is not the prompt */
	assert_int_equal(key_of("{\"meta\":{\"prompt\":\"x\"},\"note\":\"\\\"prompt\\\":\","
				"\"prompt\":\"real\"}",
				1, 64, &a),
			 1);
	assert_int_equal(key_of("{\"prompt\":\"real\"}", 1, 64, &b), 1);
	assert_true(a == b);
	assert_int_equal(key_of("{\"meta\":{\"prompt\":\"x\"}}", 1, 64, &a), -1);
	/* a prompt of the wrong type, no object, garbage */
	assert_int_equal(key_of("{\"prompt\":42}", 1, 64, &a), -1);
	assert_int_equal(key_of("[\"prompt\"]", 1, 64, &a), -1);
	assert_int_equal(key_of("prompt=hello", 1, 64, &a), -1);
	assert_int_equal(key_of("", 1, 64, &a), -1);
	assert_int_equal(key_of("{\"a\" 1}", 1, 64, &a), -1);
}

static void partial_bodies_ask_for_more(void **state)
{
	(void)state;
	uint64_t a, b;
	const char *full = "{\"model\":\"m\",\"prompt\":\"You are a helpful assistant.\"}";
	/* every cut short of the prefix needs more bytes */
	for (size_t cut = 0; cut < 30; cut++)
		assert_int_equal(http_prompt_key(full, cut, 0, 16, &a), 0);
	/* once the prefix is in, the rest does not matter */
	assert_int_equal(http_prompt_key(full, 40, 0, 16, &a), 1);
	assert_int_equal(http_prompt_key(full, strlen(full), 1, 16, &b), 1);
	assert_true(a == b);
	/* the body ended early: no prompt */
	assert_int_equal(http_prompt_key(full, 10, 1, 16, &a), -1);
}

static void stream_flag(void **state)
{
	(void)state;
	const char *yes =
	    "{\"model\":\"m\",\"meta\":{\"stream\":false},\"stream\": true,\"prompt\":\"hi\"}";
	assert_true(http_wants_stream(yes, strlen(yes)));
	assert_false(http_wants_stream(yes, 30)); /* not in yet: no */
	assert_false(http_wants_stream("{\"stream\":false}", 16));
	assert_false(http_wants_stream("{\"prompt\":\"stream: true\"}", 26));
	assert_false(http_wants_stream("not json", 8));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(shared_prefix_same_key),
	    cmocka_unit_test(messages_and_short_prompts),
	    cmocka_unit_test(only_the_top_level_field),
	    cmocka_unit_test(partial_bodies_ask_for_more),
	    cmocka_unit_test(stream_flag),
	};
	return cmocka_run_group_tests_name("prompt key", tests, NULL, NULL);
}
