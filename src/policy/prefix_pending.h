/*
 * prefix_pending.h - prompt blocks sent to a backend whose engine has not yet said it holds
 * them: the routing path's guesses beside an exact prefix index (policy/prefix_index.h) that
 * an engine's KV-cache events keep.
 *
 * An engine reports a prompt's blocks (BlockStored) only once it has admitted the prompt,
 * after its queue and the publisher's batching: a request that follows a similar one within
 * that time would find nothing in an index fed by the events alone, and go elsewhere to
 * compute the prefix again. So the pick also notes the blocks it sends as pending, for a
 * short time; a lookup counts a block held when the index holds it or it is pending. The
 * events stay the truth: a BlockStored confirms a block (it leaves this table for the
 * index), a BlockRemoved or AllBlocksCleared drops it from both, and one not confirmed
 * within <ttl_ms> of its pick is taken for one the engine did not keep.
 *
 * Memory is fixed at creation: 4-way sets of one cache line (a key and the ms it was sent),
 * a full set giving up its oldest entry (a guess lost: the index errs toward misses). Every
 * worker adds and looks up, the events' thread removes and clears, without a lock: each key
 * and stamp is a relaxed atomic, so a race costs at worst a wrong guess about one block for
 * at most <ttl_ms>. A clear is one store (entries sent at or before it are void); an expired
 * entry is never swept, only passed over and reused.
 */
#ifndef ACCELNET_POLICY_PREFIX_PENDING_H
#define ACCELNET_POLICY_PREFIX_PENDING_H

#include "policy/prefix_index.h"

#include <stddef.h>
#include <stdint.h>

struct prefix_pending;

/* A table of at least <entries> (>= 1) blocks pending for <ttl_ms> (>= 1). 0 or -ENOMEM. */
int prefix_pending_new(size_t entries, uint32_t ttl_ms, struct prefix_pending **out);
void prefix_pending_free(struct prefix_pending *p);

/* The blocks were sent to the backend at <now_ms>: pending from then (again, if they were). */
void prefix_pending_add(struct prefix_pending *p, const uint64_t *hash, size_t n, uint64_t now_ms);
/* The engine said what became of these blocks (BlockStored, BlockRemoved), or the request
 * that sent them got no answer: no longer pending. */
void prefix_pending_remove(struct prefix_pending *p, const uint64_t *hash, size_t n);
/* Everything sent until <now_ms> is void (AllBlocksCleared, the events' thread lost). */
void prefix_pending_clear(struct prefix_pending *p, uint64_t now_ms);

/* How many of the first <n> blocks of <hash> the backend holds, by <ix> or pending in <p> at
 * <now_ms>: the longest such prefix. */
size_t prefix_pending_match(const struct prefix_index *ix, const struct prefix_pending *p,
			    const uint64_t *hash, size_t n, uint64_t now_ms);

/* Blocks pending at <now_ms>, for /status and tests (a scan: not for the request path). */
size_t prefix_pending_count(const struct prefix_pending *p, uint64_t now_ms);

#endif
