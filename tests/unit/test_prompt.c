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

static long blocks_of(const char *body, size_t block, uint64_t *h, size_t max)
{
	size_t text = 0;
	return http_prompt_blocks(body, strlen(body), block, h, max, &text);
}

/* A system prompt of 100 bytes: "SYS...". */
#define SYS "You are a careful assistant; answer in short sentences and cite sources. ok?"

static void blocks_shared_system_prompt_any_field_order(void **state)
{
	(void)state;
	uint64_t a[16], b[16], c[16];
	long na =
	    blocks_of("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"" SYS
		      "\"},{\"role\":\"user\",\"content\":\"what is a cat? tell me now please\"}]}",
		      16, a, 16);
	long nb = blocks_of("{\"stream\":true, \"messages\": [ {\"content\": \"" SYS
			    "\", \"role\": \"system\"} , {\"content\":\"why\",\"role\":\"user\"}],"
			    "\"model\":\"m\"}",
			    16, b, 16);
	assert_true(na > 5 && nb >= 5);
	/* "system" 0x1e, then the 76-byte prompt: the first four blocks are the same */
	for (int i = 0; i < 4; i++)
		assert_true(a[i] == b[i]);
	assert_true(a[5] != b[5]);
	/* another system prompt: nothing shared from the first block that differs */
	long nc = blocks_of("{\"messages\":[{\"role\":\"system\",\"content\":\"You are a careless "
			    "assistant; answer in long sentences and cite nothing at all.\"}]}",
			    16, c, 16);
	assert_true(nc >= 4);
	assert_true(c[0] == a[0]); /* "system\x1eYou are a c" */
	assert_true(c[1] != a[1]);
	assert_true(c[3] != a[3]); /* chained: once apart, apart for good */
}

static void blocks_parts_escapes_and_limits(void **state)
{
	(void)state;
	uint64_t a[64], b[64];
	/* content parts read as their text; an escaped quote is inside the string */
	long na = blocks_of("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
			    "\"text\":\"0123456789abcdef\\\"0123456789abcdef\"}]}]}",
			    16, a, 64);
	long nb = blocks_of("{\"messages\":[{\"content\":[{\"text\":\"0123456789abcdef\\\""
			    "0123456789abcdef\",\"type\":\"text\"}],\"role\":\"user\"}]}",
			    16, b, 64);
	assert_int_equal(na, nb);
	assert_true(na == 2); /* user 0x1e + 34 bytes + 0x1f + 0x1d = 42 bytes */
	assert_true(a[0] == b[0] && a[1] == b[1]);
	/* the cap stops the scan */
	assert_int_equal(blocks_of("{\"prompt\":\"" SYS SYS "\"}", 16, a, 3), 3);
	/* a prompt string, a list of strings, token ids */
	assert_int_equal(blocks_of("{\"prompt\":\"" SYS "\"}", 16, a, 64), 4);
	assert_int_equal(blocks_of("{\"prompt\":[1,2,3,4,5,6,7,8,9,10,11,12]}", 16, a, 64), 1);
	assert_int_equal(blocks_of("{\"prompt\":\"short\"}", 16, a, 64), 0);
	/* no prompt, bad block sizes */
	assert_int_equal(blocks_of("{\"model\":\"m\"}", 16, a, 64), -1);
	assert_int_equal(blocks_of("[1,2]", 16, a, 64), -1);
	assert_int_equal(blocks_of("{\"prompt\":\"" SYS "\"}", 8, a, 64), -1);
	assert_int_equal(blocks_of("{\"prompt\":\"" SYS "\"}", 8192, a, 64), -1);
	/* cut short: read as far as it goes, never past */
	const char *cut = "{\"prompt\":\"" SYS;
	assert_int_equal(http_prompt_blocks(cut, strlen(cut), 16, a, 64, NULL), 4);
}

static void scope_by_model_and_salt(void **state)
{
	(void)state;
	uint64_t none = http_prompt_scope(NULL, 0, NULL, 0);
	uint64_t a = http_prompt_scope("\"a\"", 3, NULL, 0),
		 b = http_prompt_scope("\"b\"", 3, NULL, 0);
	uint64_t as = http_prompt_scope("\"a\"", 3, "\"s\"", 3);
	uint64_t salt_a = http_prompt_scope(NULL, 0, "\"a\"", 3); /* a salt is not a model */
	assert_true(none == 0 && a && b && as && salt_a);
	assert_true(a != b && a != as && as != salt_a && a != salt_a);
	assert_true(a == http_prompt_scope("\"a\"", 3, NULL, 0));
	const char *body = "{\"prompt\":\"0123456789abcdef0123456789abcdef0123456789\"}";
	uint64_t h[4], k[4];
	long n = http_prompt_blocks(body, strlen(body), 16, h, 4, NULL);
	assert_int_equal(n, 2);
	memcpy(k, h, sizeof(h));
	http_prompt_scope_blocks(k, 2, none); /* no scope: the hashes as they were */
	assert_memory_equal(h, k, 2 * sizeof(*h));
	http_prompt_scope_blocks(k, 2, a);
	assert_true(k[0] != h[0] && k[1] != h[1] && k[0] != h[1] && k[1] != h[0]);
	uint64_t j[4];
	memcpy(j, h, sizeof(h));
	http_prompt_scope_blocks(j, 2, b);
	assert_true(j[0] != k[0] && j[1] != k[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(shared_prefix_same_key),
	    cmocka_unit_test(messages_and_short_prompts),
	    cmocka_unit_test(only_the_top_level_field),
	    cmocka_unit_test(partial_bodies_ask_for_more),
	    cmocka_unit_test(blocks_shared_system_prompt_any_field_order),
	    cmocka_unit_test(blocks_parts_escapes_and_limits),
	    cmocka_unit_test(scope_by_model_and_salt),
	};
	return cmocka_run_group_tests_name("prompt key", tests, NULL, NULL);
}
