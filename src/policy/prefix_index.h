/*
 * prefix_index.h - which prompt blocks one backend holds in its KV cache, as far as we know.
 *
 * An inference engine keeps the KV state of the prompts it served in fixed-size blocks and
 * reuses it for a new prompt that starts the same way, evicting the least recently used
 * blocks when full. This index mirrors that for one backend, keyed by the chain hashes of
 * http_prompt_blocks(), or of tokmodel_blocks() for a model with a tokenizer (hash[i] names
 * the whole prefix through block i). It learns in one of
 * two ways: approximately, from the prompts we route there (prefix_index_insert after each
 * pick), or exactly, from the engine's own KV-cache events (insert on BlockStored, remove on
 * BlockRemoved, clear on AllBlocksCleared).
 *
 * Memory is fixed at creation: a set-associative table of 4-way sets (one cache line each),
 * twice the capacity rounded to a power of two. Each entry carries a stamp, a clock reading
 * when it was last used; a block whose stamp the clock has passed by <capacity> is taken for
 * gone, as the engine's LRU drops a block once <capacity> others were used after it. What
 * moves the clock is what pushes a block down that LRU: every new block, and a refreshed one
 * (a hit) for every block younger than it, which it passes on its way to the top. The clock
 * is one number for all, so a refresh of a block of age a ticks it a / capacity: over a
 * block's life in the cache its age runs from 0 to the capacity, and it is younger than the
 * refreshed one for that share of it. (Counting new blocks only, as this did before, let a
 * block outlive its place in the engine's LRU whenever hits were many: on a fleet where
 * conversations come back to their server the index promised half again the blocks the
 * servers held; counting every refresh whole would drop blocks the engine still holds.)
 * Within a full set the oldest way makes room.
 *
 * Lookups and updates come from every worker at once, without a lock: each key and stamp is
 * a relaxed atomic, so a race costs at worst a wrong guess about one block (the index is an
 * estimate), never a torn value.
 */
#ifndef ACCELNET_POLICY_PREFIX_INDEX_H
#define ACCELNET_POLICY_PREFIX_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct prefix_index;

/* An index for a cache of <capacity> blocks (>= 1). 0 or -ENOMEM. */
int prefix_index_new(size_t capacity, struct prefix_index **out);
void prefix_index_free(struct prefix_index *ix);
/* Make <to> hold what <from> holds (a reload's new runtime learns the old one's), while
 * <from> may still be used: each entry is copied whole. -EINVAL when their capacities
 * differ (nothing is copied). */
int prefix_index_copy(struct prefix_index *to, const struct prefix_index *from);

/* How many of the first <n> blocks of <hash> the backend holds: the longest cached prefix. */
size_t prefix_index_match(const struct prefix_index *ix, const uint64_t *hash, size_t n);

/* Does the backend hold block <h> (one probe)? */
int prefix_index_holds(const struct prefix_index *ix, uint64_t h);

/* The blocks are in the cache now (a prompt served there, or BlockStored): refresh the ones
 * known, add the rest. The clock's ticks this took (for prefix_index_take_back). */
uint64_t prefix_index_insert(struct prefix_index *ix, const uint64_t *hash, size_t n);

/* The engine dropped these blocks (BlockRemoved). */
void prefix_index_remove(struct prefix_index *ix, const uint64_t *hash, size_t n);

/* These blocks, inserted for a request that got no answer, never reached the cache: they go,
 * and the clock turns back by <ticks>, what their insert returned, so that the blocks they
 * pushed past are held again (a prompt refused or cancelled must not age the rest: a client
 * whose requests all fail would otherwise empty the index, 1,024 blocks a request). Never
 * more than the insert took: blocks that were there before go, but their age is not given
 * back twice. */
void prefix_index_take_back(struct prefix_index *ix, const uint64_t *hash, size_t n,
			    uint64_t ticks);

/* The engine dropped everything (AllBlocksCleared, or it restarted). */
void prefix_index_clear(struct prefix_index *ix);

/* The <capacity> it was made with. */
size_t prefix_index_capacity(const struct prefix_index *ix);

/* Blocks it believes held, for /status and tests (a scan: not for the request path). */
size_t prefix_index_count(const struct prefix_index *ix);

#endif
