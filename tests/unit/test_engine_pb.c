/*
 * test_engine_pb.c - the protobuf wire format (http/protowire.h) and SGLang's Generate
 * messages (http/engine_pb.h): a request written as the engine's .proto lays it out, byte for
 * byte; responses read, their ids walked, packed or not; hostile bytes refused; and the HTTP
 * status an engine's grpc-status stands for.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "http/engine_pb.h"
#include "http/grpc.h"

static void test_varints(void **state)
{
	(void)state;
	uint8_t b[16];
	struct pw_out o = {b, 0, sizeof(b), 0};
	pw_put_varint(&o, 300);
	assert_int_equal(o.len, 2);
	assert_int_equal(b[0], 0xac);
	assert_int_equal(b[1], 0x02);
	size_t at = 0;
	uint64_t v;
	assert_int_equal(pw_get_varint(b, o.len, &at, &v), 0);
	assert_true(v == 300 && at == 2);
	at = 0;
	assert_int_equal(pw_get_varint(b, 1, &at, &v), -1); /* cut short */
	uint8_t eleven[11];
	memset(eleven, 0x80, sizeof(eleven));
	at = 0;
	assert_int_equal(pw_get_varint(eleven, sizeof(eleven), &at, &v), -1);
	struct pw_out small = {b, 0, 1, 0};
	pw_put_varint(&small, 300);
	assert_true(small.err);
}

static void test_request_bytes(void **state)
{
	(void)state;
	uint32_t ids[] = {1, 300};
	struct engine_req r = {
	    .rid = {"ab", 2}, .ids = ids, .nids = 2, .max_tokens = 5, .stream = 1, .nstop = 1};
	r.stop[0] = (struct engine_str){"x", 1};
	uint8_t out[128];
	long n = engine_pb_write(&r, out, sizeof(out));
	/* request_id 1 "ab"; tokenized 2 {input_ids 2 packed [1, 300]}; sampling_params 4
	 * {max_new_tokens 8: 5, skip_special_tokens 11: 1, stop 9: "x"}; stream 17: 1 */
	static const uint8_t want[] = {0x0a, 2,	   'a',	 'b',  0x12, 5,	   0x12, 3,
				       1,    0xac, 0x02, 0x22, 7,    0x40, 5,	 0x58,
				       1,    0x4a, 1,	 'x',  0x88, 0x01, 1};
	assert_int_equal(n, 5 + (long)sizeof(want));
	assert_int_equal(out[0], 0);
	assert_int_equal(out[4], sizeof(want));
	assert_memory_equal(out + 5, want, sizeof(want));
	assert_int_equal(engine_pb_write(&r, out, 10), -ENOSPC);
	/* vLLM's: skip_special_tokens 12, stop 10, stream 5; the rest alike */
	r.dialect = ENGINE_VLLM;
	static const uint8_t vllm[] = {0x0a, 2, 'a',  'b', 0x12, 5, 0x12, 3, 1,	  0xac, 0x02,
				       0x22, 7, 0x40, 5,   0x60, 1, 0x52, 1, 'x', 0x28, 1};
	n = engine_pb_write(&r, out, sizeof(out));
	assert_int_equal(n, 5 + (long)sizeof(vllm));
	assert_memory_equal(out + 5, vllm, sizeof(vllm));
	assert_string_equal(engine_pb_path(ENGINE_VLLM), "/vllm.grpc.engine.VllmEngine/Generate");
}

static void test_chunk_and_ids(void **state)
{
	(void)state;
	/* GenerateResponse{request_id "r", chunk {token_ids [7, 200] packed, then 9 unpacked,
	 * prompt 2: 4, completion 3: 3, cached 4: 1}} */
	static const uint8_t m[] = {0x0a, 1, 'r', 0x12, 13, 0x0a, 3, 7,	   0xc8,
				    0x01, 8, 9,	  0x10, 4,  0x18, 3, 0x20, 1};
	struct engine_resp r;
	assert_int_equal(engine_pb_read(m, sizeof(m), &r), 0);
	assert_int_equal(r.kind, ENGINE_CHUNK);
	assert_true(r.nids == 3 && r.has_prompt && r.prompt_tokens == 4);
	assert_true(r.has_completion && r.completion_tokens == 3 && r.cached_tokens == 1);
	struct engine_idpos pos = {0};
	uint32_t id, got[4];
	size_t k = 0;
	while (engine_pb_next_id(&r, &pos, &id) && k < 4)
		got[k++] = id;
	assert_int_equal(k, 3);
	assert_true(got[0] == 7 && got[1] == 200 && got[2] == 9);
}

static void test_complete_and_error(void **state)
{
	(void)state;
	/* complete 3 {output_ids 1 [5], finish_reason 2 "length", prompt 3: 2} */
	static const uint8_t c[] = {0x1a, 13,  0x0a, 1,	  5,   0x12, 6, 'l',
				    'e',  'n', 'g',  't', 'h', 0x18, 2};
	struct engine_resp r;
	assert_int_equal(engine_pb_read(c, sizeof(c), &r), 0);
	assert_int_equal(r.kind, ENGINE_COMPLETE);
	assert_true(r.nids == 1 && r.finish.n == 6 && !memcmp(r.finish.p, "length", 6));
	assert_true(r.has_prompt && r.prompt_tokens == 2);
	/* error 4 {message 1 "no", http_status_code 2 "429"} */
	static const uint8_t e[] = {0x22, 9, 0x0a, 2, 'n', 'o', 0x12, 3, '4', '2', '9'};
	assert_int_equal(engine_pb_read(e, sizeof(e), &r), 0);
	assert_int_equal(r.kind, ENGINE_ERROR);
	assert_true(r.message.n == 2 && r.http_status.n == 3);
	struct engine_idpos pos = {0};
	uint32_t id;
	assert_int_equal(engine_pb_next_id(&r, &pos, &id), 0);
}

static void test_hostile_bytes(void **state)
{
	(void)state;
	struct engine_resp r;
	/* a length past the end */
	static const uint8_t a[] = {0x12, 50, 0x0a};
	assert_int_equal(engine_pb_read(a, sizeof(a), &r), -EBADMSG);
	/* a token id past 32 bits */
	static const uint8_t b[] = {0x12, 7, 0x0a, 5, 0x80, 0x80, 0x80, 0x80, 0x10};
	assert_int_equal(engine_pb_read(b, sizeof(b), &r), -EBADMSG);
	/* a group (wire type 3) */
	static const uint8_t c[] = {0x0b};
	assert_int_equal(engine_pb_read(c, sizeof(c), &r), -EBADMSG);
	/* field number 0 */
	static const uint8_t d[] = {0x00, 1};
	assert_int_equal(engine_pb_read(d, sizeof(d), &r), -EBADMSG);
	/* chunk as a varint, not a message */
	static const uint8_t f[] = {0x10, 1};
	assert_int_equal(engine_pb_read(f, sizeof(f), &r), -EBADMSG);
	/* a count of the wrong type */
	static const uint8_t g[] = {0x12, 3, 0x12, 1, 'x'};
	assert_int_equal(engine_pb_read(g, sizeof(g), &r), -EBADMSG);
	/* unknown fields of every type are skipped */
	static const uint8_t h[] = {0x78, 1, 0x7d, 1, 2, 3, 4, 0x79, 1,
				    2,	  3, 4,	   5, 6, 7, 8, 0x12, 0};
	assert_int_equal(engine_pb_read(h, sizeof(h), &r), 0);
	assert_int_equal(r.kind, ENGINE_CHUNK);
	assert_int_equal(engine_pb_read(NULL, 0, &r), 0);
	assert_int_equal(r.kind, ENGINE_NONE);
}

static void test_grpc_to_http(void **state)
{
	(void)state;
	static const int map[][2] = {{3, 400},	{9, 400}, {11, 400}, {16, 401}, {7, 403},
				     {5, 404},	{8, 429}, {12, 501}, {14, 503}, {4, 504},
				     {13, 500}, {2, 500}, {1, 500},  {99, 500}};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		assert_int_equal(http_grpc_to_http(map[i][0]), map[i][1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_varints),	  cmocka_unit_test(test_request_bytes),
	    cmocka_unit_test(test_chunk_and_ids), cmocka_unit_test(test_complete_and_error),
	    cmocka_unit_test(test_hostile_bytes), cmocka_unit_test(test_grpc_to_http),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
