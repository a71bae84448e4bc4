/*
 * fuzz_engine_pb.c - libFuzzer target: an engine's gRPC answer as hostile bytes. The input is
 * read as gRPC message frames (5-byte header, then the message) as the proxy reads a
 * Generate stream; each message goes through engine_pb_read(), and the token ids of a good
 * one are walked (as many as it counted, no more) and detokenized with a small byte-level
 * tokenizer (256 bytes, a merged token, a special and a plain added token). What must hold:
 * nothing read outside the bytes, the walk gives exactly nids ids, and the text of the pieces
 * is always whole UTF-8, held-back bytes included once the stream ends.
 */
#include "http/engine_pb.h"
#include "tok/bytelevel.h"
#include "tok/detok.h"
#include "tok/tokjson.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tok *tokenizer(void)
{
	static struct tok t;
	static int ready;
	if (ready)
		return &t;
	static char s[1 << 14];
	size_t n = (size_t)snprintf(
	    s, sizeof(s),
	    "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":300,\"content\":\"<s>\",\"special\":"
	    "true},{\"id\":301,\"content\":\"<t>\",\"special\":false}],\"normalizer\":null,"
	    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":"
	    "true},\"post_processor\":null,\"model\":{\"type\":\"BPE\",\"vocab\":{");
	for (int b = 0; b < 256; b++) {
		char ch[2];
		size_t k = bytelevel_encode_byte((uint8_t)b, ch);
		if (ch[0] == '"' || ch[0] == '\\')
			n += (size_t)snprintf(s + n, sizeof(s) - n, "%s\"\\%c\":%d", b ? "," : "",
					      ch[0], b);
		else
			n += (size_t)snprintf(s + n, sizeof(s) - n, "%s\"%.*s\":%d", b ? "," : "",
					      (int)k, ch, b);
	}
	n += (size_t)snprintf(s + n, sizeof(s) - n, ",\"ab\":256},\"merges\":[\"a b\"]}}");
	char err[256];
	if (tokjson_load_buffer(s, n, "fuzz", &t, err, sizeof(err)) != 0)
		abort();
	ready = 1;
	return &t;
}

/* Is p[0..n) whole UTF-8 (no overlong forms, surrogates or code points past U+10FFFF)? */
static int utf8_whole(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = p[i], len = c < 0x80   ? 1
					 : c < 0xc2 ? 0
					 : c < 0xe0 ? 2
					 : c < 0xf0 ? 3
					 : c < 0xf5 ? 4
						    : 0;
		if (!len || i + len > n)
			return 0;
		for (unsigned k = 1; k < len; k++)
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
		if ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] > 0x9f) ||
		    (c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] > 0x8f))
			return 0;
		i += len;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct tok *t = tokenizer();
	struct detok d = {0};
	char piece[64];
	size_t at = 0;
	while (size - at >= 5) {
		size_t len = (size_t)data[at + 1] << 24 | (size_t)data[at + 2] << 16 |
			     (size_t)data[at + 3] << 8 | data[at + 4];
		if (len > size - at - 5)
			break;
		/* the message alone, in a buffer of its own size: ASan sees any read past it */
		uint8_t *m = malloc(len ? len : 1);
		memcpy(m, data + at + 5, len);
		struct engine_resp r;
		if (engine_pb_read(m, len, &r) == 0) {
			struct engine_idpos pos = {0};
			uint32_t id;
			uint64_t walked = 0;
			while (engine_pb_next_id(&r, &pos, &id)) {
				walked++;
				long k = detok_piece(t, &d, id, piece, sizeof(piece));
				if (k < 0 || !utf8_whole((unsigned char *)piece, (size_t)k))
					abort();
			}
			if ((r.kind == ENGINE_CHUNK || r.kind == ENGINE_COMPLETE) &&
			    walked != r.nids)
				abort();
		}
		free(m);
		at += 5 + len;
	}
	size_t k = detok_end(t, &d, piece, sizeof(piece));
	if (!utf8_whole((unsigned char *)piece, k))
		abort();
	return 0;
}
