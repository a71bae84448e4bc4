/*
 * kvevent.h - decoding an inference engine's KV-cache events: which prompt blocks it stored
 * and dropped, as vLLM publishes them (vllm/distributed/kv_events.py; SGLang the same).
 *
 * The engine publishes on a ZeroMQ PUB socket multipart messages [topic, sequence number
 * (8 bytes, big-endian), payload]; the payload is a MessagePack KVEventBatch encoded
 * array-like (msgspec array_like=True): [ts, [event, ...], data_parallel_rank], each event a
 * tagged array whose first element names its kind:
 *
 *   ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, ...]
 *   ["BlockRemoved", block_hashes, ...]
 *   ["AllBlocksCleared"]
 *
 * Current vLLM (msgspec tag=True without array_like) writes each event as a map instead,
 * its kind under "type": {"type": "BlockStored", "block_hashes": [...], ...}; both forms are
 * read, the keys of a map in any order. Trailing fields an engine version adds (medium,
 * lora_name, ...) and the rank are skipped. A block
 * BlockStored's parent_block_hash, token_ids (each below 2^32), block_size, lora_id and
 * lora_name are read too (a subscriber keys blocks by their token ids: control/kvmap.h). A block
 * hash is an unsigned integer (accelnet sim publishes our own chain hashes, http/prompt.h);
 * a negative one is taken as its 64-bit pattern, and a byte string (newer vLLM hashes
 * blocks with SHA-256) as its first 8 bytes, big-endian: such hashes never match a prompt's
 * chain, but stored and removed still balance. An event of a kind not listed is skipped.
 *
 * The decoder is our own walk over the bytes, not a general MessagePack library: it
 * allocates nothing and checks every length against the bytes left before believing it (a
 * library that builds an object tree allocates what an array header claims before its
 * elements arrive: a five-byte message could ask for gigabytes). Pure; the fuzzer sees it.
 */
#ifndef ACCELNET_OBS_KVEVENT_H
#define ACCELNET_OBS_KVEVENT_H

#include <stddef.h>
#include <stdint.h>

enum kvevent_kind { KVEVENT_STORED, KVEVENT_REMOVED, KVEVENT_CLEARED, KVEVENT_KINDS };

/* One event: its block hashes are batch->hash[first .. first + n); a BlockStored's token
 * ids batch->tok[tok_first .. tok_first + ntok) (none when the batch has no room for ids),
 * its parent_block_hash (has_parent: not nil), block_size (0: not given) and whether it
 * names a LoRA adapter (lora_id or lora_name not nil). */
struct kvevent {
	enum kvevent_kind kind;
	uint32_t first, n;
	uint32_t tok_first, ntok;
	uint32_t block_size;
	unsigned has_parent : 1, lora : 1;
	uint64_t parent;
};

/* A decoded batch, into arrays the caller owns: ev[ev_cap], hash[hash_cap], tok[tok_cap]
 * (tok_cap 0: token ids are skipped). */
struct kvevent_batch {
	double ts;
	struct kvevent *ev;
	size_t nev, ev_cap;
	uint64_t *hash;
	size_t nhash, hash_cap;
	uint32_t *tok;
	size_t ntok, tok_cap;
};

/*
 * Decode payload <buf>[0..len) into <b> (nev and nhash set anew). 0; -EBADMSG when it is not
 * a KVEventBatch (then <b> holds nothing to apply); -E2BIG when it holds more events or
 * hashes than <b> has room for.
 */
int kvevent_decode(const void *buf, size_t len, struct kvevent_batch *b);

/* Where a decoding in parts stands; zero-initialised before the first part. */
struct kvevent_cursor {
	size_t at;	 /* bytes of the payload read so far */
	uint64_t events; /* events still to read */
	uint64_t fields; /* the batch's fields (2 and what follows) */
	int begun;	 /* the batch's head was read */
};

/*
 * The next part of payload <buf>[0..len) into <b> (nev and nhash set anew): whole events,
 * until about <bytes> more of the payload were read (at least one event) or <b>'s room is
 * full, from where <k> stands. 1 when more is to come (call again with the same <k>); 0 when
 * the batch was read to its end (this part may hold events); -EBADMSG when it is not a
 * KVEventBatch, -E2BIG when one event holds more hashes than <b> has room for (then <b>
 * holds nothing of this part; what earlier parts gave was whole events of the batch). So a
 * large batch is taken a bounded piece at a time.
 */
int kvevent_decode_part(const void *buf, size_t len, struct kvevent_cursor *k,
			struct kvevent_batch *b, size_t bytes);

/* The sequence number frame: 8 bytes, big-endian. 0, or -EBADMSG for another length. */
int kvevent_seq(const void *buf, size_t len, uint64_t *seq);

/*
 * One message of an answer from an engine's replay socket (vLLM's replay_endpoint, a ROUTER)
 * as a DEALER receives it: <nf> frames (more than 3 may be given as 4) of sizes
 * <size>[0..min(nf, 3)), <seqbuf> the second's bytes. A batch is [empty, sequence number
 * (8 bytes, big-endian), payload]: 1, *seq its number; the end of the answer is [empty,
 * ff ff ff ff ff ff ff ff (-1), empty]: 0; anything else -EBADMSG.
 */
int kvevent_replay_frame(int nf, const size_t *size, const void *seqbuf, uint64_t *seq);

#endif
