/*
 * fuzz_tok.c - libFuzzer target: the tokenizer.json loader and the encoder. The first byte
 * picks one. 0: the rest is a tokenizer.json: it loads (0) or is refused (-EINVAL with a
 * message naming the input, -ENOMEM), and a loaded one encodes a few texts and the input,
 * and decodes the input's ids one by one (detok.h) into whole UTF-8 (the seed
 * corpus/tok/spm-* is a SentencePiece-style file: normalizers, byte fallback, unk, decoder).
 * Else: the rest is text for a small byte-level tokenizer built once (merges, ignore_merges,
 * added tokens, Split steps, the GPT-2 pattern): valid UTF-8 encodes, and the ids' bytes put
 * back together are the text (byte-level BPE loses nothing); the same text encoded again,
 * through the pre-token and segment caches, gives the same ids, and so does a scratch without
 * the segment cache (the first encode may have hit earlier inputs' segments; a 64 KiB budget,
 * so that the ring wraps); anything else is refused with -EILSEQ.
 * 2: the rest is a format's letter ('q' Qwen 3, 'd' DeepSeek V3, 'm' Mistral Nemo, 'g' Gemma 3,
 * else Llama 3) and JSON: a messages array of strings (or an object of messages and tools)
 * renders to text that starts with the BOS (but for Qwen 3) and ends with the generation
 * prompt (Mistral's template writes none) or is refused with -EINVAL and a message; anything
 * else is refused.
 * 3: the rest is a tokenizer file of either kind, loaded by content (tokspm.h: a
 * SentencePiece model through libsentencepiece when it does not start with '{'): it loads
 * and encodes and decodes a text, or is refused with a message naming the file.
 */
#include "tok/bytelevel.h"
#include "tok/chat.h"
#include "tok/detok.h"
#include "tok/tokjson.h"
#include "tok/tokspm.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tok tiny;
static struct tok_scratch tiny_s;   /* a small segment cache, so that it wraps */
static struct tok_scratch tiny_off; /* the segment cache off */
static const char *added[] = {"<s>", "<|im_start|>", "<|im_end|>"};

static void tiny_build(void)
{
	size_t cap = 1 << 16, n = 0;
	char *s = malloc(cap);
	n += (size_t)snprintf(
	    s + n, cap - n,
	    "{\"added_tokens\":[{\"id\":400,\"content\":\"<s>\"},{\"id\":401,\"content\":"
	    "\"<|im_start|>\"},{\"id\":402,\"content\":\"<|im_end|>\"}],\"pre_tokenizer\":{"
	    "\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
	    "\"\\\\p{N}{1,3}\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\","
	    "\"add_prefix_space\":false,\"use_regex\":true}]},\"model\":{\"type\":\"BPE\","
	    "\"ignore_merges\":true,\"vocab\":{");
	for (int b = 0; b < 256; b++) {
		char ch[2];
		size_t k = bytelevel_encode_byte((uint8_t)b, ch);
		n += (size_t)snprintf(s + n, cap - n, "%s\"%s%.*s\":%d", b ? "," : "",
				      ch[0] == '"' || ch[0] == '\\' ? "\\" : "", (int)k, ch, b);
	}
	n += (size_t)snprintf(
	    s + n, cap - n,
	    ",\"aa\":256,\"aaa\":257,\"\xc4\xa0"
	    "a\":258,\"th\":259,\"the\":260,"
	    "\"\xc4\xa0the\":261,\"12\":262,\"zz\":263},\"merges\":[\"a a\",\"aa a\","
	    "\"\xc4\xa0 a\",\"t h\",\"th e\",\"\xc4\xa0 the\",\"1 2\"]}}");
	char err[512];
	if (tokjson_load_buffer(s, n, "tiny", &tiny, err, sizeof(err)) ||
	    tok_scratch_init(&tiny_s, &tiny) || tok_scratch_init(&tiny_off, &tiny)) {
		fprintf(stderr, "fuzz_tok: %s\n", err);
		abort();
	}
	tok_scratch_segment_budget(&tiny_s, 1 << 16);
	tok_scratch_segment_budget(&tiny_off, 0);
	free(s);
}

static void roundtrip(const uint8_t *text, size_t n)
{
	const uint32_t *ids;
	size_t nids;
	int r = tok_encode(&tiny_s, (const char *)text, n, 1, &ids, &nids);
	if (r == -EILSEQ)
		return;
	if (r)
		abort();
	uint8_t *back = malloc(n + 1);
	uint32_t *first = malloc((nids + 1) * sizeof(*first));
	size_t k = 0;
	for (size_t i = 0; i < nids; i++) {
		const uint8_t *p;
		size_t len;
		if (ids[i] >= 400) {
			p = (const uint8_t *)added[ids[i] - 400];
			len = strlen(added[ids[i] - 400]);
		} else {
			if (ids[i] >= tiny.vocab.nids || tiny.vocab.len[ids[i]] == UINT32_MAX)
				abort();
			p = (const uint8_t *)tiny.vocab.arena + tiny.vocab.off[ids[i]];
			len = tiny.vocab.len[ids[i]];
		}
		if (k + len > n || memcmp(text + k, p, len))
			abort(); /* the ids do not spell the text */
		memcpy(back + k, p, len);
		k += len;
	}
	if (k != n)
		abort();
	memcpy(first, ids, nids * sizeof(*first));
	size_t nfirst = nids;
	if (tok_encode(&tiny_s, (const char *)text, n, 1, &ids, &nids) || nids != nfirst ||
	    memcmp(ids, first, nids * sizeof(*ids)))
		abort(); /* the cache changed the answer */
	if (tok_encode(&tiny_off, (const char *)text, n, 1, &ids, &nids) || nids != nfirst ||
	    memcmp(ids, first, nids * sizeof(*ids)))
		abort(); /* the segment cache (earlier inputs' segments) changed the answer */
	free(back);
	free(first);
}

/* Whether s[0..n) ends with one of <ends> (up to 2, NULL after the last); true for none. */
static int ends_with(const char *s, size_t n, const char *const *ends)
{
	for (size_t i = 0; i < 2 && ends[i]; i++)
		if (n >= strlen(ends[i]) &&
		    !memcmp(s + n - strlen(ends[i]), ends[i], strlen(ends[i])))
			return 1;
	return !ends[0];
}

static void chat_fuzz(const uint8_t *data, size_t size)
{
	static const struct {
		char letter;
		enum chat_format format;
		const char *ends[2]; /* the generation prompts; none for Mistral */
	} formats[] = {
	    {'q', CHAT_QWEN3, {"<|im_start|>assistant\n"}},
	    {'d', CHAT_DEEPSEEK3, {"<｜Assistant｜>", "<｜tool▁outputs▁end｜>"}},
	    {'m', CHAT_MISTRAL, {NULL}},
	    {'g', CHAT_GEMMA3, {"<start_of_turn>model\n"}},
	    {0, CHAT_LLAMA3, {"<|start_header_id|>assistant<|end_header_id|>\n\n"}},
	};
	size_t f = 0;
	while (formats[f].letter && !(size && data[0] == (uint8_t)formats[f].letter))
		f++;
	struct chat c = {formats[f].format, "<B>", "<E>"};
	struct chat_text out = {0};
	char err[256] = "";
	json_t *m =
	    size ? json_loadb((const char *)data + 1, size - 1, JSON_ALLOW_NUL, NULL) : NULL;
	if (!m)
		return;
	/* a messages array, or {"messages": [...], "tools": [...]} */
	json_t *msgs = json_is_object(m) ? json_object_get(m, "messages") : m;
	json_t *tools = json_is_object(m) ? json_object_get(m, "tools") : NULL;
	int r = chat_render(&c, msgs, tools, &out, err, sizeof(err));
	if (r == 0) {
		int bos =
		    c.format != CHAT_QWEN3 && (c.format != CHAT_LLAMA3 || json_array_size(msgs));
		if (!ends_with(out.p, out.len, formats[f].ends) ||
		    (bos && (out.len < 3 || memcmp(out.p, "<B>", 3))))
			abort();
	} else if (r != -EINVAL || !err[0]) {
		abort();
	}
	chat_text_free(&out);
	json_decref(m);
}

/* Encodes a few texts with <t> and decodes their ids one by one. */
static void use(const struct tok *t, const uint8_t *text, size_t n)
{
	struct tok_scratch s;
	if (tok_scratch_init(&s, t) == 0) {
		static const char *texts[] = {"", "hello world", "  12345 <s> é\n\n", "\xff"};
		const uint32_t *ids;
		size_t nids;
		for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
			tok_encode(&s, texts[i], strlen(texts[i]), 1, &ids, &nids);
		if (tok_encode(&s, (const char *)text, n, 1, &ids, &nids) == 0) {
			struct detok d = {0};
			static char piece[1 << 16];
			for (size_t i = 0; i < nids; i++)
				if (detok_room(t, ids[i]) <= sizeof(piece) &&
				    detok_piece(t, &d, ids[i], piece, sizeof(piece)) < 0)
					abort();
			detok_end(t, &d, piece, sizeof(piece));
		}
	}
	tok_scratch_free(&s);
}

/* The input as a file of either kind, through tok_load(). */
static void file_fuzz(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz_tok", 0);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	char path[64], err[1024] = "";
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct tok t;
	int r = tok_load(path, &t, err, sizeof(err));
	close(fd);
	if (r) {
		if ((r != -EINVAL && r != -ENOMEM) || strncmp(err, path, strlen(path)))
			abort();
		return;
	}
	use(&t, data, size);
	tok_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!tiny_s.tok)
		tiny_build();
	if (size == 0)
		return 0;
	if (data[0] == 2) {
		chat_fuzz(data + 1, size - 1);
		return 0;
	}
	if (data[0] == 3) {
		file_fuzz(data + 1, size - 1);
		return 0;
	}
	if (data[0] != 0) {
		roundtrip(data + 1, size - 1);
		return 0;
	}
	struct tok t;
	char err[512] = "";
	int r = tokjson_load_buffer((const char *)data + 1, size - 1, "fuzz.json", &t, err,
				    sizeof(err));
	if (r) {
		if ((r != -EINVAL && r != -ENOMEM) || strncmp(err, "fuzz.json", 9))
			abort();
		return 0;
	}
	use(&t, data + 1, size - 1);
	tok_free(&t);
	return 0;
}
