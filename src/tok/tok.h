/*
 * tok.h - a loaded tokenizer and the one call the request path needs: text in, token ids out,
 * the same ids Hugging Face's `tokenizers` gives for the same tokenizer.json (encode with its
 * special tokens added). A struct tok is built by tokjson_load() and read-only after, shared
 * by every thread; each thread encodes through its own struct tok_scratch, which holds every
 * buffer an encode needs (grown to the largest input seen, never per call) and a cache of
 * pre-token -> ids, so that a word seen before costs one hash and one compare.
 *
 * An encode: the text checked to be UTF-8; the added tokens that are matched on the text as
 * given cut out; each remaining piece normalized (norm.h: NFC; SentencePiece's "▁" put before
 * it and for its spaces), and the added tokens matched on normalized text cut out of it; the
 * rest split into pre-tokens (pretok.h; none for Llama 2: the piece is one); each pre-token
 * looked up whole where the model says so (ignore_merges), else merged by BPE (bpe.h) from
 * its bytes (byte-level) or its characters (SentencePiece-style); the post-processor's ids (a
 * BOS) put around the whole.
 *
 * A piece between two added tokens matched on the text as given (a segment) encodes the same
 * wherever it stands, but for the one the text starts with (Metaspace's prepend "first"): a
 * chat template puts special tokens between its messages, so a conversation's turn is its
 * last turn's segments and a few new ones. The scratch keeps the ids of segments it encoded
 * (segcache.h), keyed by a hash chained over everything before the segment and the segment
 * itself, checked on a hit against the segment's bytes; a hit copies the ids. A SentencePiece
 * model encodes through libsentencepiece, whole, without it.
 *
 * The two kinds of BPE differ in what a vocabulary string means: a byte-level file writes raw
 * bytes in its alphabet (bytelevel.h), decoded at load; a SentencePiece-style one (no ByteLevel
 * step) writes the text itself, "▁" for a space, and bytes as <0xNN> tokens. Decoding
 * (detok.h) follows the file's decoder: byte-level's, or Replace "▁" by " ", ByteFallback,
 * Fuse and Strip (struct tok_decoder).
 */
#ifndef ACCELNET_TOK_TOK_H
#define ACCELNET_TOK_TOK_H

#include "tok/added.h"
#include "tok/bpe.h"
#include "tok/norm.h"
#include "tok/pretok.h"
#include "tok/segcache.h"
#include "tok/vocab.h"

#include <stddef.h>
#include <stdint.h>

#define TOK_MAX_TEMPLATE 8 /* ids a post-processor may put before, and after, the text */

enum { TOK_META_ALWAYS, TOK_META_FIRST, TOK_META_NEVER };

/* An added token as decoding gives it back (detok.h): its text, and whether it is special
 * (a decode that skips special tokens drops it). Sorted by id. */
struct tok_named {
	uint32_t id, off, len;
	uint8_t special;
	uint8_t unstripped; /* no Strip of its text (libsentencepiece's " ⁇ " for unknown) */
};

/* A SentencePiece-style decoder (detok.h): each token's Replace steps, then <0xNN> as a byte
 * (byte_fallback), the whole joined (Fuse), then up to <strip> leading spaces cut. */
#define TOK_MAX_REPLACE 4
struct tok_decoder {
	struct {
		char from[16], to[16];
		uint8_t nfrom, nto; /* nto <= nfrom: a piece never grows */
	} replace[TOK_MAX_REPLACE];
	size_t nreplace;
	int byte_fallback;
	int by_char; /* a run of bytes read character by character, a byte that starts none
		      * U+FFFD (libsentencepiece's decoding), not whole (ByteFallback's) */
	int fused;
	unsigned strip;
	int strip_each; /* the Strip again for each piece until one gives text (libsentencepiece's,
			 * for a model that removes extra spaces; one that keeps them cuts only
			 * the space its dummy prefix put first) */
};

struct tok {
	struct vocab vocab;
	struct tok_named *named; /* the added tokens, by id; their text in named_text */
	size_t nnamed;
	char *named_text;
	size_t named_len;
	struct added raw;  /* added tokens matched on the text as given */
	struct added norm; /* added tokens matched after normalization */
	struct pretok pre;
	struct norm normalizer;
	int ignore_merges;	/* a pre-token in the vocabulary is taken whole */
	int chars;		/* SentencePiece-style: BPE from characters (above) */
	struct bpe_chars start; /* with chars: how a pre-token's characters become symbols */
	struct tok_decoder dec; /* with chars */
	struct spm_model *spm;	/* a SentencePiece model encodes through the library (spm.h) */
	/* a Metaspace pre-tokenizer: a piece's spaces made its replacement, the replacement put
	 * before it (scheme always, or first: the piece the text starts with) unless it starts
	 * with one; its split is a MergedWithNext step of pre */
	struct {
		int on, scheme; /* TOK_META_* */
		struct norm_step replace, prepend;
	} meta;
	uint32_t prefix[TOK_MAX_TEMPLATE], suffix[TOK_MAX_TEMPLATE];
	size_t nprefix, nsuffix;
};

struct tok_cache_entry;
struct spm_model;

struct tok_scratch {
	const struct tok *tok; /* the cache holds this tokenizer's ids */
	struct bpe_scratch bpe;
	struct norm_scratch norm;
	struct norm_scratch meta; /* Metaspace's, on what norm gave */
	struct pcre2_real_match_data_8 *md;
	uint32_t *ids;
	size_t nids, cap;
	struct tok_cache_entry *cache;
	uint64_t hits, misses; /* of the pre-token cache, for the bench */
	struct segcache seg;   /* the ids of whole segments (above) */
};

/* Releases what a tokenizer holds (one tokjson_load() made, or one half built). */
void tok_free(struct tok *t);

/* A scratch for encoding with <t>: 0 or -ENOMEM; tok_scratch_free() either way. */
int tok_scratch_init(struct tok_scratch *s, const struct tok *t);
void tok_scratch_free(struct tok_scratch *s);

/* Sets the segment cache's budget in bytes (0: off), emptying it; before or between encodes. */
void tok_scratch_segment_budget(struct tok_scratch *s, size_t bytes);

/*
 * The ids of text[0..n): *ids (in the scratch, valid until its next encode, never NULL) and
 * *nids; with <add_special>, the post-processor's ids around them (as Hugging Face's encode()
 * by default; a chat template writes its own BOS, and is encoded without).
 * 0; -EILSEQ when the text is not UTF-8 (overlong forms, surrogates and code points past
 * U+10FFFF included); -EOVERFLOW when the pre-tokenizer's regex engine gave up on it;
 * -EINVAL when libsentencepiece refused it (a SentencePiece model); -ENOMEM.
 */
int tok_encode(struct tok_scratch *s, const char *text, size_t n, int add_special,
	       const uint32_t **ids, size_t *nids);

#endif
