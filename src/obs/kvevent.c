/*
 * kvevent.c - the decoder behind kvevent.h: a cursor over the bytes with one reader per
 * MessagePack shape we need (array header, integer, string or bytes, nil) and one that skips
 * any value, nested at most MAX_DEPTH deep. Every count and length is checked against the
 * bytes left before it is used: an array of n elements needs at least n more bytes.
 */
#include "obs/kvevent.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 32 /* nesting skipped at most; KVEventBatch needs 3 */

struct cur {
	const uint8_t *p;
	size_t n, i;
};

static size_t left(const struct cur *c)
{
	return c->n - c->i;
}

/* The next <k> bytes as a big-endian number (k <= 8). */
static int take_be(struct cur *c, size_t k, uint64_t *v)
{
	if (left(c) < k)
		return -1;
	uint64_t x = 0;
	for (size_t j = 0; j < k; j++)
		x = x << 8 | c->p[c->i + j];
	c->i += k;
	*v = x;
	return 0;
}

static int take_byte(struct cur *c, uint8_t *b)
{
	if (!left(c))
		return -1;
	*b = c->p[c->i++];
	return 0;
}

/* A container's header, whose short forms are fix..fix+15 (the count in the low nibble) and
 * long forms b16 and b16 + 1 (a 16- or 32-bit count): its count, each item at least <item>
 * bytes of what is left. */
static int read_count(struct cur *c, uint8_t fix, uint8_t b16, size_t item, uint64_t *count)
{
	uint8_t t;
	if (take_byte(c, &t) < 0)
		return -1;
	if (t >= fix && t <= fix + 0x0f)
		*count = t & 0x0f;
	else if (t == b16 || t == b16 + 1) {
		if (take_be(c, t == b16 ? 2 : 4, count) < 0)
			return -1;
	} else
		return -1;
	return *count <= left(c) / item ? 0 : -1;
}

/* An array header: its element count, each element at least one byte of what is left. */
static int read_array(struct cur *c, uint64_t *count)
{
	return read_count(c, 0x90, 0xdc, 1, count);
}

/* A map header: its pair count, each pair at least two bytes of what is left. */
static int read_map(struct cur *c, uint64_t *count)
{
	return read_count(c, 0x80, 0xde, 2, count);
}

/* An integer of any width, as its 64-bit pattern. */
static int read_int(struct cur *c, uint64_t *v)
{
	uint8_t t;
	if (take_byte(c, &t) < 0)
		return -1;
	if (t <= 0x7f || t >= 0xe0) {
		*v = (uint64_t)(int64_t)(int8_t)t; /* positive and negative fixint */
		if (t <= 0x7f)
			*v = t;
		return 0;
	}
	static const uint8_t width[8] = {1, 2, 4, 8, 1, 2, 4, 8}; /* 0xcc..0xd3 */
	if (t < 0xcc || t > 0xd3)
		return -1;
	size_t k = width[t - 0xcc];
	if (take_be(c, k, v) < 0)
		return -1;
	if (t >= 0xd0 && k < 8 && (*v >> (8 * k - 1)) & 1) /* sign-extend intN */
		*v |= ~0ull << (8 * k);
	return 0;
}

/* A string or byte string: where its bytes are and how many. */
static int read_bytes(struct cur *c, const uint8_t **s, size_t *len)
{
	uint8_t t;
	uint64_t n;
	if (take_byte(c, &t) < 0)
		return -1;
	if (t >= 0xa0 && t <= 0xbf)
		n = t & 0x1f;
	else if (t == 0xd9 || t == 0xc4) {
		if (take_be(c, 1, &n) < 0)
			return -1;
	} else if (t == 0xda || t == 0xc5) {
		if (take_be(c, 2, &n) < 0)
			return -1;
	} else if (t == 0xdb || t == 0xc6) {
		if (take_be(c, 4, &n) < 0)
			return -1;
	} else
		return -1;
	if (n > left(c))
		return -1;
	*s = c->p + c->i;
	*len = (size_t)n;
	c->i += (size_t)n;
	return 0;
}

/* Past one integer, the common element of a long array (token ids): 0, or -1 when the
 * next value is not an integer whose bytes are all there (nothing is taken then). */
static int skip_int(struct cur *c)
{
	static const uint8_t width[8] = {1, 2, 4, 8, 1, 2, 4, 8}; /* 0xcc..0xd3 */
	uint8_t t = left(c) ? c->p[c->i] : 0xc1;
	size_t k;
	if (t <= 0x7f || t >= 0xe0)
		k = 0;
	else if (t >= 0xcc && t <= 0xd3)
		k = width[t - 0xcc];
	else
		return -1;
	if (left(c) < 1 + k)
		return -1;
	c->i += 1 + k;
	return 0;
}

/* Past one value of any kind. */
static int skip(struct cur *c, int depth)
{
	if (depth > MAX_DEPTH || !left(c))
		return -1;
	uint8_t t = c->p[c->i];
	uint64_t n, v;
	const uint8_t *s;
	size_t len;
	if (t <= 0x7f || t >= 0xe0 || (t >= 0xcc && t <= 0xd3))
		return read_int(c, &v);
	if ((t >= 0xa0 && t <= 0xbf) || (t >= 0xc4 && t <= 0xc6) || (t >= 0xd9 && t <= 0xdb))
		return read_bytes(c, &s, &len);
	if ((t >= 0x90 && t <= 0x9f) || t == 0xdc || t == 0xdd) {
		if (read_array(c, &n) < 0)
			return -1;
		for (uint64_t k = 0; k < n; k++)
			if (skip_int(c) < 0 && skip(c, depth + 1) < 0)
				return -1;
		return 0;
	}
	if ((t >= 0x80 && t <= 0x8f) || t == 0xde || t == 0xdf) {
		c->i++;
		if (t <= 0x8f)
			n = t & 0x0f;
		else if (take_be(c, t == 0xde ? 2 : 4, &n) < 0)
			return -1;
		if (n > left(c) / 2)
			return -1;
		for (uint64_t k = 0; k < 2 * n; k++)
			if (skip(c, depth + 1) < 0)
				return -1;
		return 0;
	}
	c->i++;
	switch (t) {
	case 0xc0: /* nil */
	case 0xc2: /* false */
	case 0xc3: /* true */
		return 0;
	case 0xca: /* float32 */
		return take_be(c, 4, &v);
	case 0xcb: /* float64 */
		return take_be(c, 8, &v);
	case 0xd4: /* fixext 1, 2, 4, 8, 16: a type byte and the data */
	case 0xd5:
	case 0xd6:
	case 0xd7:
	case 0xd8:
		len = (size_t)1 << (t - 0xd4);
		return take_be(c, 1, &v) < 0 || left(c) < len ? -1 : (c->i += len, 0);
	case 0xc7: /* ext 8, 16, 32 */
	case 0xc8:
	case 0xc9:
		if (take_be(c, (size_t)1 << (t - 0xc7), &n) < 0 || take_be(c, 1, &v) < 0 ||
		    n > left(c))
			return -1;
		c->i += (size_t)n;
		return 0;
	default: /* 0xc1: never used */
		return -1;
	}
}

/* A block hash: an integer, or the first 8 bytes of a byte string (zero-padded). */
static int read_hash(struct cur *c, uint64_t *h)
{
	if (!left(c))
		return -1;
	uint8_t t = c->p[c->i];
	if ((t >= 0xa0 && t <= 0xbf) || (t >= 0xc4 && t <= 0xc6) || (t >= 0xd9 && t <= 0xdb)) {
		const uint8_t *s;
		size_t len;
		if (read_bytes(c, &s, &len) < 0)
			return -1;
		uint64_t x = 0;
		for (size_t j = 0; j < 8; j++)
			x = x << 8 | (j < len ? s[j] : 0);
		*h = x;
		return 0;
	}
	return read_int(c, h);
}

static int read_float(struct cur *c, double *d)
{
	if (!left(c))
		return -1;
	uint8_t t = c->p[c->i];
	uint64_t v;
	if (t == 0xcb || t == 0xca) {
		c->i++;
		if (take_be(c, t == 0xcb ? 8 : 4, &v) < 0)
			return -1;
		if (t == 0xcb)
			memcpy(d, &v, sizeof(*d));
		else {
			uint32_t w = (uint32_t)v;
			float f;
			memcpy(&f, &w, sizeof(f));
			*d = f;
		}
		return 0;
	}
	if (read_int(c, &v) < 0)
		return -1;
	*d = (double)v;
	return 0;
}

static int tag_is(const uint8_t *s, size_t len, const char *name)
{
	return strlen(name) == len && memcmp(s, name, len) == 0;
}

static int is_map(const struct cur *c)
{
	uint8_t t = left(c) ? c->p[c->i] : 0;
	return (t >= 0x80 && t <= 0x8f) || t == 0xde || t == 0xdf;
}

static enum kvevent_kind kind_of(const uint8_t *tag, size_t len)
{
	if (tag_is(tag, len, "BlockStored"))
		return KVEVENT_STORED;
	if (tag_is(tag, len, "BlockRemoved"))
		return KVEVENT_REMOVED;
	if (tag_is(tag, len, "AllBlocksCleared"))
		return KVEVENT_CLEARED;
	return KVEVENT_KINDS; /* a kind we do not know: skipped */
}

/* block_hashes: an array of hashes appended to <b>. 0, -EBADMSG or -E2BIG. */
static int read_hashes(struct cur *c, struct kvevent_batch *b, uint32_t *n_out)
{
	uint64_t n;
	if (read_array(c, &n) < 0)
		return -EBADMSG;
	if (n > b->hash_cap - b->nhash)
		return -E2BIG;
	for (uint64_t k = 0; k < n; k++)
		if (read_hash(c, &b->hash[b->nhash++]) < 0)
			return -EBADMSG;
	*n_out = (uint32_t)n;
	return 0;
}

/* parent_block_hash: nil, or a hash. */
static int read_parent(struct cur *c, struct kvevent *ev)
{
	if (left(c) && c->p[c->i] == 0xc0) {
		c->i++;
		return 0;
	}
	ev->has_parent = 1;
	return read_hash(c, &ev->parent) < 0 ? -EBADMSG : 0;
}

/* token_ids: an array of ids below 2^32 appended to <b> (skipped without room for ids). 0,
 * -EBADMSG or -E2BIG. */
static int read_tokens(struct cur *c, struct kvevent_batch *b, struct kvevent *ev)
{
	uint64_t n, v;
	if (!b->tok_cap)
		return skip(c, 2) < 0 ? -EBADMSG : 0;
	if (read_array(c, &n) < 0)
		return -EBADMSG;
	if (n > b->tok_cap - b->ntok)
		return -E2BIG;
	ev->tok_first = (uint32_t)b->ntok;
	for (uint64_t k = 0; k < n; k++) {
		if (read_int(c, &v) < 0 || v > UINT32_MAX)
			return -EBADMSG;
		b->tok[b->ntok++] = (uint32_t)v;
	}
	ev->ntok = (uint32_t)n;
	return 0;
}

/* block_size: an integer (any other value reads as not given). */
static int read_block_size(struct cur *c, struct kvevent *ev)
{
	uint64_t v;
	size_t at = c->i;
	if (read_int(c, &v) == 0) {
		ev->block_size = v <= UINT32_MAX ? (uint32_t)v : 0;
		return 0;
	}
	c->i = at;
	return skip(c, 2) < 0 ? -EBADMSG : 0;
}

/* lora_id or lora_name: nil, or an adapter. */
static int read_lora(struct cur *c, struct kvevent *ev)
{
	if (left(c) && c->p[c->i] == 0xc0) {
		c->i++;
		return 0;
	}
	ev->lora = 1;
	return skip(c, 2) < 0 ? -EBADMSG : 0;
}

/* A BlockStored's field <key> (of a map) or its <index>th (of an array, after the tag and
 * block_hashes: 0 parent_block_hash, 1 token_ids, 2 block_size, 3 lora_id, 5 lora_name): 1
 * when it was read, 0 when it is none of them, or -EBADMSG / -E2BIG. */
static int read_stored_field(struct cur *c, struct kvevent_batch *b, struct kvevent *ev,
			     const uint8_t *key, size_t key_len, int index)
{
	int rc;
	if (key ? tag_is(key, key_len, "parent_block_hash") : index == 0)
		rc = read_parent(c, ev);
	else if (key ? tag_is(key, key_len, "token_ids") : index == 1)
		rc = read_tokens(c, b, ev);
	else if (key ? tag_is(key, key_len, "block_size") : index == 2)
		rc = read_block_size(c, ev);
	else if (key ? tag_is(key, key_len, "lora_id") || tag_is(key, key_len, "lora_name")
		     : index == 3 || index == 5)
		rc = read_lora(c, ev);
	else
		return 0;
	return rc < 0 ? rc : 1;
}

/* An event written as a map (msgspec tag=True without array_like, current vLLM): the tag
 * under "type", the hashes under "block_hashes", in any order; other keys skipped. */
static int read_event_map(struct cur *c, struct kvevent_batch *b, struct kvevent *ev)
{
	uint64_t pairs;
	int typed = 0, hashed = 0, rc;
	if (read_map(c, &pairs) < 0)
		return -EBADMSG;
	for (uint64_t k = 0; k < pairs; k++) {
		const uint8_t *key, *tag;
		size_t key_len, tag_len;
		if (read_bytes(c, &key, &key_len) < 0)
			return -EBADMSG;
		if (tag_is(key, key_len, "type") && !typed) {
			if (read_bytes(c, &tag, &tag_len) < 0)
				return -EBADMSG;
			ev->kind = kind_of(tag, tag_len);
			typed = 1;
		} else if (tag_is(key, key_len, "block_hashes") && !hashed) {
			if ((rc = read_hashes(c, b, &ev->n)) < 0)
				return rc;
			hashed = 1;
		} else if (typed && ev->kind == KVEVENT_STORED &&
			   (rc = read_stored_field(c, b, ev, key, key_len, -1)) != 0) {
			if (rc < 0)
				return rc; /* (a key given twice: its last value) */
		} else if (skip(c, 3) < 0)
			return -EBADMSG;
	}
	if (!typed || (!hashed && (ev->kind == KVEVENT_STORED || ev->kind == KVEVENT_REMOVED)))
		return -EBADMSG;
	if (ev->kind == KVEVENT_CLEARED || ev->kind == KVEVENT_KINDS) {
		b->nhash = ev->first; /* hashes of a kind that has none: not kept */
		ev->n = 0;
	}
	return 0;
}

/* One event into <b>, written as a tagged array or as a map: 0, -EBADMSG or -E2BIG. */
static int read_event(struct cur *c, struct kvevent_batch *b)
{
	uint64_t fields;
	const uint8_t *tag;
	size_t tag_len;
	int rc;
	struct kvevent ev = {.first = (uint32_t)b->nhash};
	if (is_map(c)) {
		if ((rc = read_event_map(c, b, &ev)) < 0)
			return rc;
	} else {
		if (read_array(c, &fields) < 0 || fields < 1 || read_bytes(c, &tag, &tag_len) < 0)
			return -EBADMSG;
		fields--;
		ev.kind = kind_of(tag, tag_len);
		if (ev.kind == KVEVENT_STORED || ev.kind == KVEVENT_REMOVED) {
			if (!fields--)
				return -EBADMSG;
			if ((rc = read_hashes(c, b, &ev.n)) < 0)
				return rc;
		}
		for (uint64_t k = 0; k < fields; k++) {
			if (ev.kind == KVEVENT_STORED &&
			    (rc = read_stored_field(c, b, &ev, NULL, 0, (int)k)) != 0) {
				if (rc < 0)
					return rc;
			} else if (skip(c, 2) < 0)
				return -EBADMSG;
		}
	}
	if (ev.kind == KVEVENT_KINDS)
		return 0;
	if (b->nev == b->ev_cap)
		return -E2BIG;
	b->ev[b->nev++] = ev;
	return 0;
}

int kvevent_decode_part(const void *buf, size_t len, struct kvevent_cursor *k,
			struct kvevent_batch *b, size_t bytes)
{
	struct cur c = {.p = buf, .n = len, .i = k->at};
	b->nev = 0;
	b->nhash = 0;
	b->ntok = 0;
	if (b->hash_cap > UINT32_MAX)
		b->hash_cap = UINT32_MAX;
	if (b->tok_cap > UINT32_MAX)
		b->tok_cap = UINT32_MAX;
	int rc = -EBADMSG;
	if (!k->begun) {
		if (read_array(&c, &k->fields) < 0 || k->fields < 2 || read_float(&c, &b->ts) < 0 ||
		    read_array(&c, &k->events) < 0)
			goto fail;
		k->begun = 1;
	}
	size_t start = c.i;
	while (k->events) {
		size_t at = c.i, nev = b->nev, nhash = b->nhash, ntok = b->ntok;
		if (at > start && at - start >= bytes)
			goto more;
		if ((rc = read_event(&c, b)) < 0) {
			if (rc != -E2BIG || at == start)
				goto fail;
			c.i = at; /* no room left in this part: the event starts the next */
			b->nev = nev;
			b->nhash = nhash;
			b->ntok = ntok;
			goto more;
		}
		k->events--;
	}
	rc = -EBADMSG;
	for (uint64_t f = 2; f < k->fields; f++) /* data_parallel_rank, and what may follow */
		if (skip(&c, 1) < 0)
			goto fail;
	if (left(&c))
		goto fail; /* bytes after the batch */
	k->at = c.i;
	return 0;
more:
	k->at = c.i;
	return 1;
fail:
	b->nev = 0;
	b->nhash = 0;
	b->ntok = 0;
	return rc;
}

int kvevent_decode(const void *buf, size_t len, struct kvevent_batch *b)
{
	struct kvevent_cursor k = {0};
	int rc = kvevent_decode_part(buf, len, &k, b, SIZE_MAX);
	if (rc == 1) { /* the room filled before the batch's end */
		b->nev = 0;
		b->nhash = 0;
		b->ntok = 0;
		rc = -E2BIG;
	}
	return rc;
}

int kvevent_seq(const void *buf, size_t len, uint64_t *seq)
{
	struct cur c = {.p = buf, .n = len};
	if (len != 8)
		return -EBADMSG;
	return take_be(&c, 8, seq) < 0 ? -EBADMSG : 0;
}

int kvevent_replay_frame(int nf, const size_t *size, const void *seqbuf, uint64_t *seq)
{
	if (nf != 3 || size[0] != 0 || kvevent_seq(seqbuf, size[1], seq) < 0)
		return -EBADMSG;
	if (*seq != UINT64_MAX)
		return 1;
	return size[2] == 0 ? 0 : -EBADMSG; /* the end carries an empty payload */
}
