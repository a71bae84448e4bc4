/*
 * test_tok.c - the tokenizer (src/tok/) on small tokenizer.json files built here: the byte
 * alphabet both ways, BPE's merge order (lowest rank first, leftmost of equals, a long run),
 * ignore_merges, added tokens (leftmost then longest, raw and normalized ones, cut short),
 * NFC, Split steps, the template's ids around the text, the pre-token cache giving the same
 * ids on a second encode, the segment cache (a conversation grown a message at a time gives
 * the ids an encode without it gives, its keys made to collide too, Metaspace's first segment
 * told apart), text that is not UTF-8 refused, and files refused by field; the
 * SentencePiece-style file (normalizers, byte fallback, the unknown token, its decoding); the
 * Llama 3 chat format (the two trims, the BOS once, the generation prompt) and Qwen 3's
 * (reasoning kept after the last query only, tool results grouped, the strips refused where
 * the engines' Jinja and the reference's part); DeepSeek V3's tool calls (the template's one
 * first-call flag for the whole conversation), Mistral Nemo's (the system message folded into
 * the last user turn, tools before it, tool ids of 9 characters) and Gemma 3's (the system
 * message opening the first turn, the roles' order refused with the template's message).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "tok/bytelevel.h"
#include "tok/chat.h"
#include "tok/detok.h"
#include "tok/tokjson.h"

/* A byte-level tokenizer.json: the 256 bytes, <extra_vocab> (e.g. "\"ab\": 256"), <merges>
 * (e.g. "\"a b\""), and the other parts as JSON text. */
static char *tiny(const char *extra_vocab, const char *merges, const char *added,
		  const char *normalizer, const char *pre, const char *post, const char *model_opts)
{
	size_t cap = 1 << 16, n = 0;
	char *s = malloc(cap);
	n += (size_t)snprintf(s + n, cap - n,
			      "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":%s,"
			      "\"pre_tokenizer\":%s,\"post_processor\":%s,\"model\":{\"type\":"
			      "\"BPE\"%s,\"vocab\":{",
			      added, normalizer, pre, post, model_opts);
	for (int b = 0; b < 256; b++) {
		char ch[2];
		size_t k = bytelevel_encode_byte((uint8_t)b, ch);
		if (ch[0] == '"' || ch[0] == '\\')
			n += (size_t)snprintf(s + n, cap - n, "%s\"\\%c\":%d", b ? "," : "", ch[0],
					      b);
		else
			n += (size_t)snprintf(s + n, cap - n, "%s\"%.*s\":%d", b ? "," : "", (int)k,
					      ch, b);
	}
	n += (size_t)snprintf(s + n, cap - n, "%s%s}, \"merges\":[%s]}}", *extra_vocab ? "," : "",
			      extra_vocab, merges);
	assert_true(n < cap);
	return s;
}

#define BYTELEVEL "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"

static void load(struct tok *t, const char *json)
{
	char err[512];
	int r = tokjson_load_buffer(json, strlen(json), "tiny", t, err, sizeof(err));
	if (r)
		fail_msg("refused: %s", err);
}

static void expect(struct tok_scratch *s, const char *text, const char *want)
{
	const uint32_t *ids;
	size_t n;
	char got[1024] = "";
	assert_int_equal(tok_encode(s, text, strlen(text), 1, &ids, &n), 0);
	for (size_t i = 0; i < n; i++)
		snprintf(got + strlen(got), sizeof(got) - strlen(got), i ? " %u" : "%u", ids[i]);
	if (strcmp(got, want))
		fail_msg("\"%s\": got %s, want %s", text, got, want);
}

static void test_bytelevel_both_ways(void **state)
{
	(void)state;
	for (int b = 0; b < 256; b++) {
		char ch[2];
		uint8_t back[2];
		size_t k = bytelevel_encode_byte((uint8_t)b, ch);
		assert_int_equal(bytelevel_decode(ch, k, back), 1);
		assert_int_equal(back[0], b);
	}
	uint8_t out[8];
	assert_int_equal(bytelevel_decode("\xc4\xa0", 2, out), 1); /* U+0120 is the space */
	assert_int_equal(out[0], ' ');
	assert_int_equal(bytelevel_decode(" ", 1, out), -1); /* a raw space is not in it */
	assert_int_equal(bytelevel_decode("\xe4\xbd\xa0", 3, out), -1); /* nor is CJK */
}

static void test_merge_order(void **state)
{
	(void)state;
	struct tok t;
	struct tok_scratch s;
	/* b c merges before a b: "abc" is a + bc, not ab + c; "aaaa" pairs from the left */
	char *j = tiny("\"ab\":256,\"bc\":257,\"aa\":258,\"aaaa\":259",
		       "\"b c\",\"a b\",\"a a\","
		       "\"aa aa\"",
		       "", "null", BYTELEVEL, "null", "");
	load(&t, j);
	assert_int_equal(tok_scratch_init(&s, &t), 0);
	expect(&s, "abc", "97 257");
	expect(&s, "ab", "256");
	expect(&s, "aaa", "258 97");
	expect(&s, "aaaaa", "259 97");
	expect(&s, "abc", "97 257"); /* from the cache */
	char run[5001];
	memset(run, 'a', 5000);
	run[5000] = 0;
	const uint32_t *ids;
	size_t n;
	assert_int_equal(tok_encode(&s, run, 5000, 1, &ids, &n), 0);
	assert_int_equal(n, 1250);
	assert_int_equal(ids[0], 259);
	assert_int_equal(ids[1249], 259);
	tok_scratch_free(&s);
	tok_free(&t);
	free(j);
}

static void test_ignore_merges(void **state)
{
	(void)state;
	struct tok t;
	struct tok_scratch s;
	/* "abc" is in the vocabulary but no merge makes it: only ignore_merges takes it whole */
	char *j = tiny("\"ab\":256,\"abc\":257", "\"a b\"", "", "null", BYTELEVEL, "null",
		       ",\"ignore_merges\":true");
	load(&t, j);
	assert_int_equal(tok_scratch_init(&s, &t), 0);
	expect(&s, "abc abcd", "257 32 256 99 100");
	tok_scratch_free(&s);
	tok_free(&t);
	free(j);
}

static void test_added_tokens(void **state)
{
	(void)state;
	struct tok t;
	struct tok_scratch s;
	char *j = tiny("", "",
		       "{\"id\":300,\"content\":\"<s>\",\"special\":true},"
		       "{\"id\":301,\"content\":\"<s>x\",\"special\":true},"
		       "{\"id\":302,\"content\":\"\xc3\xa9!\",\"normalized\":true},"
		       "{\"id\":303,\"content\":\"o\xcc\x88\",\"normalized\":true}",
		       "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}", BYTELEVEL,
		       "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":"
		       "\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
		       "\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[300],"
		       "\"tokens\":[\"<s>\"]}}}",
		       "");
	load(&t, j);
	assert_int_equal(tok_scratch_init(&s, &t), 0);
	expect(&s, "a<s>b<s>xy<s", "300 97 300 98 301 121 60 115");
	/* e + combining acute is NFC e-acute, then the normalized added token */
	expect(&s, "e\xcc\x81!", "300 302");
	expect(&s, "\xc3\xa9!", "300 302");
	/* a normalized token's own text is normalized too: o + diaeresis is o-umlaut */
	expect(&s, "\xc3\xb6", "300 303");
	expect(&s, "o\xcc\x88", "300 303");
	const uint32_t *ids;
	size_t n;
	assert_int_equal(tok_encode(&s, "a\xff", 2, 1, &ids, &n), -EILSEQ);
	assert_int_equal(tok_encode(&s, "\xed\xa0\x80", 3, 1, &ids, &n), -EILSEQ); /* surrogate */
	assert_int_equal(tok_encode(&s, "\xc0\xaf", 2, 1, &ids, &n), -EILSEQ);	   /* overlong */
	tok_scratch_free(&s);
	tok_free(&t);
	free(j);
}

static void test_split_steps(void **state)
{
	(void)state;
	struct tok t;
	struct tok_scratch s;
	/* digits one by one, then commas dropped; ByteLevel without its regex */
	char *j = tiny("\"12\":256", "\"1 2\"", "", "null",
		       "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
		       "{\"Regex\":\"\\\\p{N}\"},\"behavior\":\"Isolated\",\"invert\":false},{"
		       "\"type\":\"Split\",\"pattern\":{\"String\":\",\"},\"behavior\":"
		       "\"Removed\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":"
		       "false,\"use_regex\":false}]}",
		       "null", "");
	load(&t, j);
	assert_int_equal(tok_scratch_init(&s, &t), 0);
	expect(&s, "12,a,,b", "49 50 97 98");
	tok_scratch_free(&s);
	tok_free(&t);
	free(j);
}

static void refused(const char *json, const char *want)
{
	struct tok t;
	char err[512] = "";
	int r = tokjson_load_buffer(json, strlen(json), "f.json", &t, err, sizeof(err));
	if (r != -EINVAL || strncmp(err, "f.json:", 7) || !strstr(err, want))
		fail_msg("%d \"%s\", want \"%s\"", r, err, want);
}

static void test_refusals(void **state)
{
	(void)state;
	char *j = tiny("", "", "", "{\"type\":\"Lowercase\"}", BYTELEVEL, "null", "");
	refused(j, "normalizer.type: \"Lowercase\" is not supported");
	free(j);
	j = tiny("", "", "{\"id\":300,\"content\":\"<s>\",\"rstrip\":true}", "null", BYTELEVEL,
		 "null", "");
	refused(j, "added_tokens[0].rstrip: true is not supported");
	free(j);
	j = tiny("", "\"a b\"", "", "null", BYTELEVEL, "null", "");
	refused(j, "model.merges[0]: \"a b\" names a token not in model.vocab (the merged one)");
	free(j);
	j = tiny("", "", "", "null", "null", "null", "");
	/* no ByteLevel: SentencePiece-style, whose decoder detok must follow */
	refused(j, "decoder.type: missing is not supported");
	free(j);
	j = tiny("", "", "", "null", BYTELEVEL, "null", ",\"continuing_subword_prefix\":\"##\"");
	refused(j, "model.continuing_subword_prefix: \"##\" is not supported");
	free(j);
	refused("{\"model\":{\"type\":\"WordPiece\"},\"pre_tokenizer\":" BYTELEVEL "}",
		"model.type: \"WordPiece\" is not supported (only BPE)");
	refused("[1,2", "f.json:1:4:");
	refused("{\"model\":1,\"model\":2}", "f.json:1:");
}

static void test_chat_llama3(void **state)
{
	(void)state;
	struct chat c = {CHAT_LLAMA3, "<B>", ""};
	struct chat_text out = {0};
	char err[256];
	json_t *m = json_loads("[{\"role\":\"system\",\"content\":\"\\u00a0 hi\\u3000\\n\"},"
			       "{\"role\":\"user\",\"content\":\"\\u2028x\\u200b\\u2029\"}]",
			       0, NULL);
	assert_non_null(m);
	assert_int_equal(chat_render(&c, m, NULL, &out, err, sizeof(err)), 0);
	const char *want = "<B><|start_header_id|>system<|end_header_id|>\n\nhi<|eot_id|>"
			   "<|start_header_id|>user<|end_header_id|>\n\nx\xe2\x80\x8b<|eot_id|>"
			   "<|start_header_id|>assistant<|end_header_id|>\n\n";
	assert_int_equal(out.len, strlen(want));
	assert_memory_equal(out.p, want, out.len);
	json_decref(m);
	/* white space the two trims disagree on: refused, whichever end */
	const char *disputed[] = {"\\u0085x", "x\\u001f", "\\ufeffx", "x \\ufeff"};
	for (size_t i = 0; i < sizeof(disputed) / sizeof(disputed[0]); i++) {
		char j[128];
		snprintf(j, sizeof(j), "[{\"role\":\"user\",\"content\":\"%s\"}]", disputed[i]);
		m = json_loads(j, 0, NULL);
		assert_non_null(m);
		assert_int_equal(chat_render(&c, m, NULL, &out, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "messages[0]: content starts or ends with"));
		json_decref(m);
	}
	m = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", 0, NULL);
	assert_int_equal(chat_render(&c, m, NULL, &out, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "messages[0]: content is not a string"));
	json_decref(m);
	chat_text_free(&out);
}

static void test_chat_qwen3(void **state)
{
	(void)state;
	struct chat c = {CHAT_QWEN3, "", ""};
	struct chat_text out = {0};
	char err[256];
	/* the reasoning of the turn after the last query is kept, an earlier one's dropped;
	 * two tool results share one user turn */
	json_t *m = json_loads(
	    "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q1\"},"
	    "{\"role\":\"assistant\",\"content\":\"<think>\\nr1\\n</think>\\n\\na1\"},"
	    "{\"role\":\"user\",\"content\":\"q2\"},{\"role\":\"tool\",\"content\":\"t1\"},"
	    "{\"role\":\"tool\",\"content\":\"t2\"},"
	    "{\"role\":\"assistant\",\"content\":\"<think>r2</think>a2\"}]",
	    0, NULL);
	assert_non_null(m);
	assert_int_equal(chat_render(&c, m, NULL, &out, err, sizeof(err)), 0);
	const char *want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n"
			   "<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
			   "<|im_start|>user\n<tool_response>\nt1\n</tool_response>\n"
			   "<tool_response>\nt2\n</tool_response><|im_end|>\n"
			   "<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n"
			   "<|im_start|>assistant\n";
	if (out.len != strlen(want) || memcmp(out.p, want, out.len))
		fail_msg("got %.*s", (int)out.len, out.p);
	json_decref(m);
	m = json_loads("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
		       "\"content\":\"<think>x</think>\\n  y\"}]",
		       0, NULL);
	assert_int_equal(chat_render(&c, m, NULL, &out, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "messages[1]: content around <think>"));
	json_decref(m);
	chat_text_free(&out);
}

/* <json> rendered by format <f> is <want>, or (want NULL) refused with <why> in the message. */
static void rendered(enum chat_format f, const char *json, const char *want, const char *why)
{
	struct chat c = {f, "<B>", "<E>"};
	struct chat_text out = {0};
	char err[256] = "";
	json_t *m = json_loads(json, 0, NULL);
	assert_non_null(m);
	json_t *msgs = json_is_object(m) ? json_object_get(m, "messages") : m;
	int r = chat_render(&c, msgs, json_object_get(m, "tools"), &out, err, sizeof(err));
	if (want && (r || out.len != strlen(want) || memcmp(out.p, want, out.len)))
		fail_msg("%d %s: got %.*s", r, err, (int)out.len, out.p);
	if (!want && (r != -EINVAL || !strstr(err, why)))
		fail_msg("%d: %s, want %s", r, err, why);
	json_decref(m);
	chat_text_free(&out);
}

static void test_chat_deepseek3(void **state)
{
	(void)state;
	/* systems gathered before all; the first call of the conversation opens the calls block,
	 * every later one is closed by the end of the calls block; outputs, then the answer */
	rendered(
	    CHAT_DEEPSEEK3,
	    "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"system\",\"content\":\"S\"},"
	    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
	    "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},{\"type\":\"function\","
	    "\"function\":{\"name\":\"g\",\"arguments\":\"1\"}}]},"
	    "{\"role\":\"tool\",\"content\":\"r1\"},{\"role\":\"tool\",\"content\":\"r2\"},"
	    "{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"T\"}]",
	    "<B>S\n\nT<｜User｜>q<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
	    "<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
	    "<｜tool▁sep｜>g\n```json\n1\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
	    "<｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>r1"
	    "<｜tool▁output▁end｜>\n<｜tool▁output▁begin｜>r2<｜tool▁output▁end｜>"
	    "<｜tool▁outputs▁end｜>a<｜end▁of▁sentence｜><｜Assistant｜>",
	    NULL);
	/* ending on a tool output: the outputs closed, no generation prompt */
	rendered(
	    CHAT_DEEPSEEK3,
	    "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"tool\",\"content\":\"r\"}]",
	    "<B><｜User｜>q<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>r<｜tool▁output▁end｜>"
	    "<｜tool▁outputs▁end｜>",
	    NULL);
	rendered(CHAT_DEEPSEEK3,
		 "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
		 "\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]",
		 NULL, "messages[0].tool_calls[0]: function.arguments: not a string");
}

static void test_chat_mistral(void **state)
{
	(void)state;
	/* the system message folded into the last turn, the tools before it (a string value
	 * as it is, "return" left out), a tool call with its id, its result */
	rendered(CHAT_MISTRAL,
		 "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
		 "{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":null,"
		 "\"tool_calls\":[{\"id\":\"abcdefghi\",\"function\":{\"name\":\"f\","
		 "\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"abcdefghi\","
		 "\"content\":\"r\"},{\"role\":\"assistant\",\"content\":\"a\"},"
		 "{\"role\":\"user\",\"content\":\"u\"}],\"tools\":[{\"type\":\"function\","
		 "\"function\":{\"name\":\"f\",\"description\":\"say \\\"hi\\\"\",\"return\":1,"
		 "\"parameters\":{\"x\":[1,true]}}}]}",
		 "<B>[INST]q[/INST][TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"{}\", \"id\": "
		 "\"abcdefghi\"}]<E>[TOOL_RESULTS]{\"content\": r, \"call_id\": \"abcdefghi\"}"
		 "[/TOOL_RESULTS]a<E>[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": "
		 "{\"name\": \"f\", \"description\": \"say \"hi\"\", \"parameters\": {\"x\": [1, "
		 "true]}}}][/AVAILABLE_TOOLS][INST]S\n\nu[/INST]",
		 NULL);
	/* not ending on a user turn: the system message is written nowhere */
	rendered(CHAT_MISTRAL,
		 "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q\"},"
		 "{\"role\":\"assistant\",\"content\":\"a\"}]",
		 "<B>[INST]q[/INST]a<E>", NULL);
	rendered(CHAT_MISTRAL,
		 "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"user\",\"content\":\"r\"}]",
		 NULL,
		 "messages[1]: After the optional system message, conversation roles must "
		 "alternate");
	rendered(CHAT_MISTRAL,
		 "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"tool\",\"content\":\"r\","
		 "\"tool_call_id\":\"12345678\\u00e9\"}]",
		 "<B>[INST]q[/INST][TOOL_RESULTS]{\"content\": r, \"call_id\": "
		 "\"12345678\xc3\xa9\"}[/TOOL_RESULTS]",
		 NULL);
	rendered(CHAT_MISTRAL,
		 "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"tool\",\"content\":\"r\","
		 "\"tool_call_id\":\"1234567\\ud83d\\ude00\"}]",
		 NULL, "messages[1]: Tool call IDs should be alphanumeric strings with length 9!");
	rendered(CHAT_MISTRAL, "[]", NULL, "messages: empty");
}

static void test_chat_gemma3(void **state)
{
	(void)state;
	rendered(
	    CHAT_GEMMA3,
	    "[{\"role\":\"system\",\"content\":\" S \"},{\"role\":\"user\",\"content\":\" q\\n\"},"
	    "{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"u\"},"
	    "{\"role\":\"tool\",\"content\":\"t\"}]",
	    "<B><start_of_turn>user\n S \n\nq<end_of_turn>\n<start_of_turn>model\na<end_of_turn>\n"
	    "<start_of_turn>user\nu<end_of_turn>\n<start_of_turn>tool\nt<end_of_turn>\n"
	    "<start_of_turn>model\n",
	    NULL);
	rendered(
	    CHAT_GEMMA3,
	    "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"assistant\",\"content\":\"a\"}]",
	    NULL, "messages[1]: Conversation roles must alternate user/assistant/user/assistant");
	rendered(CHAT_GEMMA3, "[{\"role\":\"user\",\"content\":\"q\\ufeff\"}]", NULL,
		 "messages[0]: content starts or ends with");
}

/* The text of ids[0..n) as detok_piece() gives it, pieces joined by '|', then detok_end(). */
static void decoded(const struct tok *t, const uint32_t *ids, size_t n, const char *want)
{
	struct detok d = {0};
	char got[512] = "", piece[1024];
	for (size_t i = 0; i < n; i++) {
		long k = detok_piece(t, &d, ids[i], piece, sizeof(piece));
		assert_true(k >= 0);
		snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%.*s", i ? "|" : "",
			 (int)k, piece);
	}
	size_t k = detok_end(t, &d, piece, sizeof(piece));
	snprintf(got + strlen(got), sizeof(got) - strlen(got), "|%.*s", (int)k, piece);
	if (strcmp(got, want))
		fail_msg("got \"%s\", want \"%s\"", got, want);
}

static void test_detok(void **state)
{
	(void)state;
	struct tok t;
	char *j = tiny("\"ab\": 256", "\"a b\"",
		       "{\"id\":300,\"content\":\"<s>\",\"special\":true},"
		       "{\"id\":301,\"content\":\"<think>\",\"special\":false}",
		       "null", BYTELEVEL, "null", "");
	load(&t, j);
	/* a vocabulary token's bytes; the special token dropped, the other added one kept */
	decoded(&t, (uint32_t[]){300, 256, 301, 'c'}, 4, "|ab|<think>|c|");
	/* e-acute (c3 a9) split over two tokens: held back, then whole */
	decoded(&t, (uint32_t[]){0xc3, 0xa9, '!'}, 3, "|\xc3\xa9|!|");
	/* a 4-byte emoji over four tokens */
	decoded(&t, (uint32_t[]){0xf0, 0x9f, 0x9a, 0x86}, 4, "|||\xf0\x9f\x9a\x86|");
	/* bytes that cannot be UTF-8 become U+FFFD, as does a character cut at the end */
	decoded(&t, (uint32_t[]){0xff, 'a', 0xc3, 'b', 0xe6}, 5,
		"\xef\xbf\xbd|a||\xef\xbf\xbd"
		"b||\xef\xbf\xbd");
	/* an id the tokenizer does not name: nothing */
	decoded(&t, (uint32_t[]){99999, 'x'}, 2, "|x|");
	/* no room: nothing written, the state kept */
	struct detok d = {0};
	char out[4];
	assert_int_equal(detok_piece(&t, &d, 256, out, sizeof(out)), -ENOSPC);
	tok_free(&t);
	free(j);
}

/* SentencePiece-style (no ByteLevel step): "▁" put before the text and for its spaces, BPE
 * from characters, byte fallback where each byte has a token (é), else the unknown token, a
 * run of them one (fuse_unk); decoding: "▁" a space, the first one cut, the bytes of a run
 * held until it ends. The ids and texts are Hugging Face tokenizers' for this file. */
static void test_sentencepiece_style(void **state)
{
	(void)state;
	static const char j[] =
	    "{\"added_tokens\": [], \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": "
	    "[{\"type\": \"Prepend\", \"prepend\": \"▁\"}, {\"type\": \"Replace\", \"pattern\": "
	    "{\"String\": \" \"}, \"content\": \"▁\"}]}, \"pre_tokenizer\": null, "
	    "\"post_processor\": null, \"decoder\": {\"type\": \"Sequence\", \"decoders\": "
	    "[{\"type\": \"Replace\", \"pattern\": {\"String\": \"▁\"}, \"content\": \" \"}, "
	    "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", "
	    "\"content\": \" \", \"start\": 1, \"stop\": 0}]}, \"model\": {\"type\": \"BPE\", "
	    "\"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true, \"vocab\": "
	    "{\"<unk>\": 0, \"▁\": 1, \"a\": 2, \"b\": 3, \"▁a\": 4, \"ab\": 5, \"▁ab\": 6, "
	    "\"<0xC3>\": 7, \"<0xA9>\": 8}, \"merges\": [\"▁ a\", \"a b\", \"▁a b\"]}}";
	struct tok t;
	struct tok_scratch s;
	load(&t, j);
	assert_int_equal(tok_scratch_init(&s, &t), 0);
	expect(&s, "ab ab", "6 6");
	expect(&s, "zzb \xc3\xa9", "1 0 3 1 7 8");
	expect(&s, "a  b", "4 1 1 3");
	expect(&s, "\xc3\xa9zz", "1 7 8 0");
	decoded(&t, (uint32_t[]){6, 6}, 2, "ab| ab|");
	decoded(&t, (uint32_t[]){1, 7, 8, 0}, 4, "|||\xc3\xa9<unk>|");
	decoded(&t, (uint32_t[]){7, 3}, 2,
		"|\xef\xbf\xbd"
		"b|"); /* a run cut short */
	tok_scratch_free(&s);
	tok_free(&t);
}

/* The ids of text[0..n) as a string of decimals. */
static void ids_of(struct tok_scratch *s, const char *text, size_t n, int special, char *out,
		   size_t cap)
{
	const uint32_t *ids;
	size_t k;
	assert_int_equal(tok_encode(s, text, n, special, &ids, &k), 0);
	out[0] = '\0';
	for (size_t i = 0; i < k; i++)
		snprintf(out + strlen(out), cap - strlen(out), i ? " %u" : "%u", ids[i]);
}

/* A conversation grown a message at a time, each turn encoded by <on> (the segment cache on;
 * its keys all made one when <collide>) and by a scratch with it off: the same ids, and the
 * cache hit from the second turn on. */
static void grown_agrees(const struct tok *t, const char *const *msgs, size_t nmsgs,
			 const char *sep, int collide)
{
	struct tok_scratch on, off;
	assert_int_equal(tok_scratch_init(&on, t), 0);
	assert_int_equal(tok_scratch_init(&off, t), 0);
	tok_scratch_segment_budget(&off, 0);
	if (collide)
		on.seg.key_mask = 0;
	char text[4096] = "", want[4096], got[4096];
	size_t ends[16];
	assert_true(nmsgs <= 16);
	for (size_t i = 0; i < nmsgs; i++) {
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s%s", i ? sep : "",
			 msgs[i]);
		ends[i] = strlen(text);
	}
	for (int pass = 0; pass < 2; pass++) /* the second: every turn seen before */
		for (size_t i = 0; i < nmsgs; i++) {
			ids_of(&off, text, ends[i], 0, want, sizeof(want));
			ids_of(&on, text, ends[i], 0, got, sizeof(got));
			if (strcmp(want, got))
				fail_msg("turn %zu%s: got %s, want %s", i,
					 collide ? " (collide)" : "", got, want);
		}
	assert_true(on.seg.hits >= nmsgs - 1);
	assert_int_equal(off.seg.hits, 0);
	tok_scratch_free(&on);
	tok_scratch_free(&off);
}

static void test_segment_cache(void **state)
{
	(void)state;
	struct tok t;
	/* byte-level, with added tokens between the messages */
	char *j = tiny("\"ab\":256,\"\\u0120\\u0120\":257", "\"a b\",\"\\u0120 \\u0120\"",
		       "{\"id\":300,\"content\":\"<s>\",\"special\":true},"
		       "{\"id\":301,\"content\":\"<|x|>\",\"special\":true}",
		       "null", BYTELEVEL, "null", "");
	load(&t, j);
	static const char *const msgs[] = {
	    "ab ab abab cab ab, said the first",
	    "user\n\nab  ab   ab ab: a second message",
	    "short",
	    "<s>another ab ab with an added token inside<s>",
	    "ab ab abab cab ab, said the first", /* the first's bytes, elsewhere */
	    "ab ab abab cab ab, said the fifth", /* its length, other bytes */
	    "\xc3\xa9t\xc3\xa9 ab ab ab ab ab ab ab ab"};
	grown_agrees(&t, msgs, 7, "<|x|>", 0);
	grown_agrees(&t, msgs, 7, "<|x|>", 1);
	tok_free(&t);
	free(j);
	/* SentencePiece-style with Metaspace's prepend "first": the segment the text starts
	 * with differs from the same bytes after an added token */
	static const char m[] =
	    "{\"added_tokens\": [{\"id\": 9, \"content\": \"<x>\", \"special\": true}], "
	    "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": "
	    "\"▁\", \"prepend_scheme\": \"first\", \"split\": false}, \"post_processor\": null, "
	    "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", "
	    "\"pattern\": {\"String\": \"▁\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, "
	    "{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, "
	    "\"stop\": 0}]}, \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", "
	    "\"fuse_unk\": true, \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"▁\": 1, "
	    "\"a\": 2, \"b\": 3, \"▁a\": 4, \"ab\": 5, \"▁ab\": 6, \"<0xC3>\": 7, \"<0xA9>\": 8, "
	    "\"<x>\": 9}, \"merges\": [\"▁ a\", \"a b\", \"▁a b\"]}}";
	load(&t, m);
	static const char *const sp[] = {"abab ab ab ab ab ab", "abab ab ab ab ab ab",
					 "ab \xc3\xa9 ab ab ab ab ab ab", "abab ab ab ab ab ab"};
	grown_agrees(&t, sp, 4, "<x>", 0);
	grown_agrees(&t, sp, 4, "<x>", 1);
	struct tok_scratch s;
	assert_int_equal(tok_scratch_init(&s, &t), 0);
	s.seg.key_mask = 0; /* the same key, the same bytes: only the place tells them apart */
	expect(&s, "abab ab ab ab ab ab", "6 5 6 6 6 6 6");
	expect(&s, "<x>abab ab ab ab ab ab", "9 5 5 6 6 6 6 6");
	expect(&s, "abab ab ab ab ab ab", "6 5 6 6 6 6 6");
	assert_int_equal(s.seg.hits, 1);
	tok_scratch_free(&s);
	tok_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bytelevel_both_ways),
	    cmocka_unit_test(test_merge_order),
	    cmocka_unit_test(test_detok),
	    cmocka_unit_test(test_sentencepiece_style),
	    cmocka_unit_test(test_ignore_merges),
	    cmocka_unit_test(test_added_tokens),
	    cmocka_unit_test(test_split_steps),
	    cmocka_unit_test(test_segment_cache),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_chat_llama3),
	    cmocka_unit_test(test_chat_qwen3),
	    cmocka_unit_test(test_chat_deepseek3),
	    cmocka_unit_test(test_chat_mistral),
	    cmocka_unit_test(test_chat_gemma3),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
