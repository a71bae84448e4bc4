/*
 * kvsub.h - the backends' KV-cache events, on the main thread's loop beside the health checks:
 * for every backend with kv_events, a ZeroMQ SUB socket subscribed to everything its engine
 * publishes, and each batch (obs/kvevent.h) applied to the backend's prefix index: insert on
 * BlockStored, remove on BlockRemoved, clear on AllBlocksCleared.
 *
 * The index must mirror the engine exactly or say nothing, so whenever the thread is lost it
 * is cleared (state unknown): a gap in the sequence numbers (a message dropped at a full
 * queue, the engine restarted and counting from 0 again), the connection to the publisher
 * lost (ZeroMQ reconnects by itself; the socket monitor tells us), or a message dropped as
 * malformed (its events are missed). The first message after a connect starts the count.
 * With kv_events_replay (vLLM's replay socket) a gap is first asked for again: the batches
 * missed are applied in order, then the one that showed the gap, and the index is kept; only
 * a replay that cannot fill it (the engine no longer keeps them, no whole answer in time, a
 * malformed answer) clears it as above. What the engine stored before we subscribed is not
 * known until it stores it again (not replayed): the index errs toward misses.
 *
 * A BlockStored that carries its blocks' token ids (vLLM's do; accelnet sim's with a
 * tokenizer) is keyed by accelnet's own chain hash of those ids (tok/tokmodel.h), the key the
 * request path gives a prompt of a model with a tokenizer (models:), and the engine's hashes
 * are mapped to it (control/kvmap.h) for the parents and removals that name them. When such a
 * backend's thread is lost its balance: llm index stops being exact: routing learns from the
 * prompts sent there again (the events still applied) until the engine's next
 * AllBlocksCleared (vLLM's reset_prefix_cache, a restart) says what it holds.
 * A gap or lost connection that cleared the index counts in
 * accelnet_backend_kv_event_gaps_total, a malformed message in
 * accelnet_backend_kv_events_malformed_total, a replay in
 * accelnet_backend_kv_event_replays_total by outcome.
 */
#ifndef ACCELNET_CONTROL_KVSUB_H
#define ACCELNET_CONTROL_KVSUB_H

#include "core/loop.h"
#include "runtime/pool.h"

struct kvsub;

/* Subscribe for every backend with kv_events (none: *out is set, with nothing to do).
 * 0, -ENOMEM, or the errno of a socket ZeroMQ would not make. */
int kvsub_start(struct loop *loop, struct runtime *rt, struct kvsub **out);
void kvsub_stop(struct kvsub *k);

#endif
