/*
 * test_kvevent.c - the KV-cache event decoder: a batch as vLLM's msgspec writes it (made
 * with Python's msgpack), each kind of event, hashes as integers and as bytes, unknown kinds
 * skipped, BlockStored's parent, token ids, block size and adapter, and every cut or lying
 * length refused without reading past the bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "obs/kvevent.h"

#include <errno.h>
#include <stdlib.h>

/* msgpack.packb([1.5, [["BlockStored", [1, 2, 2**64-1], None, [5, 6], 16, None],
 *                      ["BlockRemoved", [2], "gpu"], ["AllBlocksCleared"], ["Weird", 1]], 0]) */
static const char batch[] =
    "\x93\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\x94\x96\xab\x42\x6c\x6f\x63\x6b\x53\x74\x6f\x72"
    "\x65\x64\x93\x01\x02\xcf\xff\xff\xff\xff\xff\xff\xff\xff\xc0\x92\x05\x06\x10\xc0\x93\xac"
    "\x42\x6c\x6f\x63\x6b\x52\x65\x6d\x6f\x76\x65\x64\x91\x02\xa3\x67\x70\x75\x91\xb0\x41\x6c"
    "\x6c\x42\x6c\x6f\x63\x6b\x73\x43\x6c\x65\x61\x72\x65\x64\x92\xa5\x57\x65\x69\x72\x64\x01"
    "\x00";

static struct kvevent ev[8];
static uint64_t hash[16];

static int decode(const void *p, size_t n, struct kvevent_batch *b)
{
	*b = (struct kvevent_batch){.ev = ev, .ev_cap = 8, .hash = hash, .hash_cap = 16};
	return kvevent_decode(p, n, b);
}

static void a_whole_batch(void **state)
{
	(void)state;
	struct kvevent_batch b;
	assert_int_equal(decode(batch, sizeof(batch) - 1, &b), 0);
	assert_true(b.ts == 1.5);
	assert_int_equal(b.nev, 3); /* "Weird" skipped */
	assert_int_equal(b.ev[0].kind, KVEVENT_STORED);
	assert_int_equal(b.ev[0].n, 3);
	assert_true(b.hash[b.ev[0].first] == 1 && b.hash[b.ev[0].first + 2] == UINT64_MAX);
	assert_int_equal(b.ev[1].kind, KVEVENT_REMOVED);
	assert_int_equal(b.ev[1].n, 1);
	assert_true(b.hash[b.ev[1].first] == 2);
	assert_int_equal(b.ev[2].kind, KVEVENT_CLEARED);
	assert_int_equal(b.ev[2].n, 0);
}

/* The same as maps, as current vLLM writes them (keys in any order):
 * [1.5, [{"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None,
 *         "token_ids": [], "block_size": 64, "lora_id": None, "medium": "GPU",
 *         "lora_name": None},
 *        {"block_hashes": [2], "type": "BlockRemoved", "medium": "GPU"},
 *        {"type": "AllBlocksCleared"}], 0] */
static const char map_batch[] =
    "\x93\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\x93\x88\xa4\x74\x79\x70\x65\xab\x42\x6c\x6f\x63"
    "\x6b\x53\x74\x6f\x72\x65\x64\xac\x62\x6c\x6f\x63\x6b\x5f\x68\x61\x73\x68\x65\x73\x92\x01"
    "\x02\xb1\x70\x61\x72\x65\x6e\x74\x5f\x62\x6c\x6f\x63\x6b\x5f\x68\x61\x73\x68\xc0\xa9\x74"
    "\x6f\x6b\x65\x6e\x5f\x69\x64\x73\x90\xaa\x62\x6c\x6f\x63\x6b\x5f\x73\x69\x7a\x65\x40\xa7"
    "\x6c\x6f\x72\x61\x5f\x69\x64\xc0\xa6\x6d\x65\x64\x69\x75\x6d\xa3\x47\x50\x55\xa9\x6c\x6f"
    "\x72\x61\x5f\x6e\x61\x6d\x65\xc0\x83\xac\x62\x6c\x6f\x63\x6b\x5f\x68\x61\x73\x68\x65\x73"
    "\x91\x02\xa4\x74\x79\x70\x65\xac\x42\x6c\x6f\x63\x6b\x52\x65\x6d\x6f\x76\x65\x64\xa6\x6d"
    "\x65\x64\x69\x75\x6d\xa3\x47\x50\x55\x81\xa4\x74\x79\x70\x65\xb0\x41\x6c\x6c\x42\x6c\x6f"
    "\x63\x6b\x73\x43\x6c\x65\x61\x72\x65\x64\x00";

static void a_batch_of_maps(void **state)
{
	(void)state;
	struct kvevent_batch b;
	assert_int_equal(decode(map_batch, sizeof(map_batch) - 1, &b), 0);
	assert_int_equal(b.nev, 3);
	assert_int_equal(b.ev[0].kind, KVEVENT_STORED);
	assert_int_equal(b.ev[0].n, 2);
	assert_true(b.hash[b.ev[0].first + 1] == 2);
	assert_int_equal(b.ev[1].kind, KVEVENT_REMOVED);
	assert_int_equal(b.ev[1].n, 1);
	assert_int_equal(b.ev[2].kind, KVEVENT_CLEARED);
	assert_int_equal(b.nhash, 3);
	for (size_t n = 0; n < sizeof(map_batch) - 1; n++)
		assert_int_equal(decode(map_batch, n, &b), -EBADMSG);
	/* a map without its type, or a stored one without hashes */
	assert_int_equal(decode("\x92\x00\x91\x81\xa1x\x01", 7, &b), -EBADMSG);
	assert_int_equal(decode("\x92\x00\x91\x81\xa4"
				"type\xab"
				"BlockStored",
				23, &b),
			 -EBADMSG);
}

static void every_cut_is_refused(void **state)
{
	(void)state;
	struct kvevent_batch b;
	for (size_t n = 0; n < sizeof(batch) - 1; n++) {
		char *copy = malloc(n ? n : 1); /* exactly n bytes: ASan sees any over-read */
		memcpy(copy, batch, n);
		assert_int_equal(decode(copy, n, &b), -EBADMSG);
		assert_int_equal(b.nev, 0);
		free(copy);
	}
	char more[sizeof(batch)];
	memcpy(more, batch, sizeof(batch) - 1);
	more[sizeof(batch) - 1] = 0;
	assert_int_equal(decode(more, sizeof(more), &b), -EBADMSG); /* a byte after it */
}

static void hashes_of_every_form(void **state)
{
	(void)state;
	struct kvevent_batch b;
	/* [0, [["BlockRemoved", [-1, b"\x01\x02", 0x1234 (uint16), -200 (int16)]]]]
	 * with no rank: two fields are enough */
	static const char m[] = "\x92\x00\x91\x92\xac"
				"BlockRemoved\x94\xff\xc4\x02\x01\x02"
				"\xcd\x12\x34\xd1\xff\x38";
	assert_int_equal(decode(m, sizeof(m) - 1, &b), 0);
	assert_int_equal(b.nev, 1);
	assert_int_equal(b.ev[0].n, 4);
	assert_true(hash[0] == UINT64_MAX);
	assert_true(hash[1] == 0x0102000000000000ull);
	assert_true(hash[2] == 0x1234);
	assert_true(hash[3] == (uint64_t)(int64_t)-200);
}

static void lies_and_wrong_shapes(void **state)
{
	(void)state;
	struct kvevent_batch b;
	/* an array of 2^32-1 elements in a few bytes */
	assert_int_equal(decode("\xdd\xff\xff\xff\xff\x00", 6, &b), -EBADMSG);
	/* the events are not an array; the tag is not a string; hashes are floats */
	assert_int_equal(decode("\x92\x00\x05", 3, &b), -EBADMSG);
	assert_int_equal(decode("\x92\x00\x91\x91\x05", 5, &b), -EBADMSG);
	assert_int_equal(decode("\x92\x00\x91\x92\xab"
				"BlockStored\x91\xcb\0\0\0\0\0\0\0\0",
				25, &b),
			 -EBADMSG);
	/* BlockStored without its hashes */
	assert_int_equal(decode("\x92\x00\x91\x91\xab"
				"BlockStored",
				15, &b),
			 -EBADMSG);
	/* a map (not array-like) batch */
	assert_int_equal(decode("\x81\xa2ts\x00", 5, &b), -EBADMSG);
	/* nesting deeper than any batch, in a skipped field */
	char deep[80] = "\x93\x00\x90";
	memset(deep + 3, 0x91, 60);
	deep[63] = 0;
	assert_int_equal(decode(deep, 64, &b), -EBADMSG);
}

static void room_runs_out(void **state)
{
	(void)state;
	struct kvevent_batch b = {.ev = ev, .ev_cap = 8, .hash = hash, .hash_cap = 2};
	assert_int_equal(kvevent_decode(batch, sizeof(batch) - 1, &b), -E2BIG);
	assert_int_equal(b.nev, 0);
	b = (struct kvevent_batch){.ev = ev, .ev_cap = 2, .hash = hash, .hash_cap = 16};
	assert_int_equal(kvevent_decode(batch, sizeof(batch) - 1, &b), -E2BIG);
}

/* msgpack.packb([2.0, [{"type": "BlockStored", "block_hashes": [7, 8], "parent_block_hash": 5,
 *   "token_ids": [1, 2, 3, 70000], "block_size": 2, "lora_id": None, "medium": "GPU",
 *   "lora_name": None}, ["BlockStored", [9], None, [4, 5], 2, None, "GPU", "ad1"]], 0]) */
static const char tok_batch[] =
    "\x93\xcb\x40\x00\x00\x00\x00\x00\x00\x00\x92\x88\xa4\x74\x79\x70\x65\xab\x42\x6c\x6f\x63"
    "\x6b\x53\x74\x6f\x72\x65\x64\xac\x62\x6c\x6f\x63\x6b\x5f\x68\x61\x73\x68\x65\x73\x92\x07"
    "\x08\xb1\x70\x61\x72\x65\x6e\x74\x5f\x62\x6c\x6f\x63\x6b\x5f\x68\x61\x73\x68\x05\xa9\x74"
    "\x6f\x6b\x65\x6e\x5f\x69\x64\x73\x94\x01\x02\x03\xce\x00\x01\x11\x70\xaa\x62\x6c\x6f\x63"
    "\x6b\x5f\x73\x69\x7a\x65\x02\xa7\x6c\x6f\x72\x61\x5f\x69\x64\xc0\xa6\x6d\x65\x64\x69\x75"
    "\x6d\xa3\x47\x50\x55\xa9\x6c\x6f\x72\x61\x5f\x6e\x61\x6d\x65\xc0\x98\xab\x42\x6c\x6f\x63"
    "\x6b\x53\x74\x6f\x72\x65\x64\x91\x09\xc0\x92\x04\x05\x02\xc0\xa3\x47\x50\x55\xa3\x61\x64"
    "\x31\x00";

/* a token id of 2**32 */
static const char tok_too_big[] =
    "\x93\xcb\x40\x00\x00\x00\x00\x00\x00\x00\x91\x85\xa4\x74\x79\x70\x65\xab\x42\x6c\x6f\x63"
    "\x6b\x53\x74\x6f\x72\x65\x64\xac\x62\x6c\x6f\x63\x6b\x5f\x68\x61\x73\x68\x65\x73\x91\x0a"
    "\xb1\x70\x61\x72\x65\x6e\x74\x5f\x62\x6c\x6f\x63\x6b\x5f\x68\x61\x73\x68\xc0\xa9\x74\x6f"
    "\x6b\x65\x6e\x5f\x69\x64\x73\x92\xcf\x00\x00\x00\x01\x00\x00\x00\x00\x01\xaa\x62\x6c\x6f"
    "\x63\x6b\x5f\x73\x69\x7a\x65\x02\x00";

static void token_ids_with_their_blocks(void **state)
{
	(void)state;
	uint32_t tok[8];
	struct kvevent_batch b = {
	    .ev = ev, .ev_cap = 8, .hash = hash, .hash_cap = 16, .tok = tok, .tok_cap = 8};
	assert_int_equal(kvevent_decode(tok_batch, sizeof(tok_batch) - 1, &b), 0);
	assert_int_equal(b.nev, 2);
	assert_int_equal(b.ntok, 6);
	/* a map: the parent, its ids, its block size, no adapter */
	assert_int_equal(b.ev[0].n, 2);
	assert_true(b.ev[0].has_parent && b.ev[0].parent == 5 && !b.ev[0].lora);
	assert_int_equal(b.ev[0].block_size, 2);
	assert_int_equal(b.ev[0].ntok, 4);
	assert_int_equal(tok[b.ev[0].tok_first + 3], 70000);
	/* an array: no parent, an adapter's name */
	assert_true(!b.ev[1].has_parent && b.ev[1].lora);
	assert_int_equal(b.ev[1].ntok, 2);
	assert_int_equal(tok[b.ev[1].tok_first], 4);
	/* an id past 32 bits is no token id; ids past the room are too many */
	assert_int_equal(kvevent_decode(tok_too_big, sizeof(tok_too_big) - 1, &b), -EBADMSG);
	assert_int_equal(b.ntok, 0);
	b.tok_cap = 5;
	assert_int_equal(kvevent_decode(tok_batch, sizeof(tok_batch) - 1, &b), -E2BIG);
	/* without room for ids they are skipped */
	b.tok_cap = 0;
	assert_int_equal(kvevent_decode(tok_batch, sizeof(tok_batch) - 1, &b), 0);
	assert_int_equal(b.ev[0].ntok + b.ev[1].ntok, 0);
	assert_int_equal(b.ev[1].n, 1);
}

/* A replay answer's messages (vLLM's replay socket, as a DEALER receives them). */
static void replay_frames(void **state)
{
	(void)state;
	const unsigned char seven[8] = {0, 0, 0, 0, 0, 0, 0, 7};
	const unsigned char end[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	const unsigned char nine[9] = {0};
	uint64_t seq = 0;
	assert_int_equal(kvevent_replay_frame(3, (size_t[]){0, 8, 40}, seven, &seq), 1);
	assert_int_equal(seq, 7);
	assert_int_equal(kvevent_replay_frame(3, (size_t[]){0, 8, 0}, seven, &seq), 1);
	assert_int_equal(kvevent_replay_frame(3, (size_t[]){0, 8, 0}, end, &seq), 0);
	/* the end with a payload, a delimiter that is not empty, a short or long number, a
	 * frame missing or one too many: refused */
	assert_int_equal(kvevent_replay_frame(3, (size_t[]){0, 8, 1}, end, &seq), -EBADMSG);
	assert_int_equal(kvevent_replay_frame(3, (size_t[]){1, 8, 4}, seven, &seq), -EBADMSG);
	assert_int_equal(kvevent_replay_frame(3, (size_t[]){0, 7, 4}, seven, &seq), -EBADMSG);
	assert_int_equal(kvevent_replay_frame(3, (size_t[]){0, 9, 4}, nine, &seq), -EBADMSG);
	assert_int_equal(kvevent_replay_frame(2, (size_t[]){8, 4, 0}, seven, &seq), -EBADMSG);
	assert_int_equal(kvevent_replay_frame(4, (size_t[]){0, 8, 4}, seven, &seq), -EBADMSG);
	assert_int_equal(kvevent_replay_frame(0, (size_t[]){0, 0, 0}, seven, &seq), -EBADMSG);
}

static void sequence_numbers(void **state)
{
	(void)state;
	uint64_t s;
	assert_int_equal(kvevent_seq("\0\0\0\0\0\0\x01\x02", 8, &s), 0);
	assert_true(s == 0x102);
	assert_int_equal(kvevent_seq("\0\0\0\x01", 4, &s), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_whole_batch),
	    cmocka_unit_test(a_batch_of_maps),
	    cmocka_unit_test(every_cut_is_refused),
	    cmocka_unit_test(hashes_of_every_form),
	    cmocka_unit_test(lies_and_wrong_shapes),
	    cmocka_unit_test(room_runs_out),
	    cmocka_unit_test(replay_frames),
	    cmocka_unit_test(sequence_numbers),
	    cmocka_unit_test(token_ids_with_their_blocks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
