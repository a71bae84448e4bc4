/*
 * kvevents.h - the simulated accelerator's KV-cache events, published the way vLLM publishes
 * its own (vllm/distributed/kv_events.py, ZmqEventPublisher), so that whatever consumes
 * vLLM's events -- a cache-aware router -- can be tested against the simulator. The wire
 * format is written out in sim.h.
 *
 * Events are gathered as the cache changes and published together by kvevents_flush(), one
 * ZeroMQ message per batch. Publishing never blocks: a batch that the socket will not take at
 * once (a subscriber's queue is full) is dropped and counted, and its sequence number is
 * skipped, so a subscriber sees the gap as vLLM's subscribers do; with a replay socket, as
 * vLLM's, the subscriber can ask for it again.
 */
#ifndef ACCELNET_SIM_KVEVENTS_H
#define ACCELNET_SIM_KVEVENTS_H

#include <stddef.h>
#include <stdint.h>

enum kvevents_format {
	KVEVENTS_MAP,	 /* each event a msgpack map tagged "type" (vLLM since PR #42892) */
	KVEVENTS_ARRAY,	 /* each event a tagged msgpack array (vLLM before it) */
	KVEVENTS_SGLANG, /* SGLang's (sglang/srt/disaggregation/kv_events.py): tagged arrays
			  * without medium or lora_name, the batch [ts, events] without a
			  * data-parallel rank, block hashes signed 64-bit (Python's hash()) */
};

struct kvevents;

/*
 * Bind a publisher on <endpoint> (ZeroMQ syntax: tcp://127.0.0.1:5557, tcp://127.0.0.1:*
 * for any free port), publishing on <topic> (may be ""), blocks of <block_size>. 0 or -errno;
 * *why says what went wrong in words.
 */
int kvevents_open(const char *endpoint, const char *topic, unsigned block_size,
		  enum kvevents_format format, struct kvevents **out, const char **why);
void kvevents_close(struct kvevents *e);

/* The endpoint actually bound (the port chosen for a '*'). */
const char *kvevents_endpoint(const struct kvevents *e);

/* Gather one event for the next batch; a BlockStored carries ids[0 .. n x block_size), the
 * blocks' token ids (ids NULL: an empty token_ids, for a cache of prompt-text blocks). */
void kvevents_stored(struct kvevents *e, const uint64_t *hash, size_t n, const uint64_t *parent,
		     const uint32_t *ids);
void kvevents_removed(struct kvevents *e, const uint64_t *hash, size_t n);
void kvevents_cleared(struct kvevents *e);

/* The batch that would get sequence number <seq> (>= 1) is not sent and its number is
 * skipped, as a batch lost on the way: for tests of a subscriber's gap handling. */
void kvevents_skip(struct kvevents *e, uint64_t seq);

/* Answer replay requests on <endpoint> (sim/kvreplay.h, vLLM's replay_endpoint) from the
 * last <steps> batches (vLLM's buffer_steps). 0 or -errno, *why in words. */
int kvevents_replay(struct kvevents *e, const char *endpoint, unsigned steps, const char **why);
/* Its descriptor (ZMQ_FD, edge-style; -1 without), what answers the requests waiting, the
 * endpoint bound ("" without) and the requests answered. */
int kvevents_replay_fd(const struct kvevents *e);
void kvevents_replay_serve(struct kvevents *e);
const char *kvevents_replay_endpoint(const struct kvevents *e);
unsigned long kvevents_replays(const struct kvevents *e);

/* Publish the gathered events as one batch (nothing when there are none). */
void kvevents_flush(struct kvevents *e);

/* Batches published, and events dropped because the socket would have blocked. */
unsigned long kvevents_batches(const struct kvevents *e);
unsigned long kvevents_dropped(const struct kvevents *e);
/* The number the next batch gets: the batches numbered so far, lost ones included. */
uint64_t kvevents_next_seq(const struct kvevents *e);

#endif
