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

/* One event: its block hashes are batch->hash[first .. first + n). */
struct kvevent {
	enum kvevent_kind kind;
	uint32_t first, n;
};

/* A decoded batch, into arrays the caller owns: ev[ev_cap], hash[hash_cap]. */
struct kvevent_batch {
	double ts;
	struct kvevent *ev;
	size_t nev, ev_cap;
	uint64_t *hash;
	size_t nhash, hash_cap;
};

/*
 * Decode payload <buf>[0..len) into <b> (nev and nhash set anew). 0; -EBADMSG when it is not
 * a KVEventBatch (then <b> holds nothing to apply); -E2BIG when it holds more events or
 * hashes than <b> has room for.
 */
int kvevent_decode(const void *buf, size_t len, struct kvevent_batch *b);

/* The sequence number frame: 8 bytes, big-endian. 0, or -EBADMSG for another length. */
int kvevent_seq(const void *buf, size_t len, uint64_t *seq);

#endif
