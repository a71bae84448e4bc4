/*
 * kvmap.h - an engine's block hashes mapped to accelnet's own, for one backend's KV-cache
 * events. vLLM names a block by a hash accelnet cannot compute (SHA-256, or Python's hash,
 * over pickled token tuples), but its BlockStored carries the blocks' token ids: the
 * subscriber hashes those its own way (tok/tokmodel.h: the chain a prompt's blocks get on the
 * request path), keys the prefix index on that, and keeps engine hash -> own hash here, so
 * that a later BlockStored naming a parent and a BlockRemoved naming blocks find them.
 *
 * Memory is fixed when made: an open-addressed table of 2 x <capacity> slots rounded up to
 * a power of two, linear probing from a keyed hash of the engine's hash (an engine cannot
 * line its hashes up in one probe run), deletion by shifting back (no tombstones), a clear in
 * O(1) (an engine drives how often). A put into a table holding <capacity> entries fails:
 * the engine holds more blocks than the index it feeds can, and that block stays unknown (a
 * miss, never a false hit). Main thread only.
 */
#ifndef ACCELNET_CONTROL_KVMAP_H
#define ACCELNET_CONTROL_KVMAP_H

#include <stddef.h>
#include <stdint.h>

struct kvmap;

/* A map of at most <capacity> (>= 1) blocks. 0 or -ENOMEM. */
int kvmap_new(size_t capacity, struct kvmap **out);
void kvmap_free(struct kvmap *m);

/* Engine hash <engine> names our block <own> (replacing what it named). 0, or -ENOSPC. */
int kvmap_put(struct kvmap *m, uint64_t engine, uint64_t own);
/* Our hash of <engine> into *own: 1, or 0 when unknown. */
int kvmap_get(const struct kvmap *m, uint64_t engine, uint64_t *own);
/* ... and forget it. */
int kvmap_take(struct kvmap *m, uint64_t engine, uint64_t *own);
void kvmap_clear(struct kvmap *m);
size_t kvmap_count(const struct kvmap *m);
/* The farthest any entry sits from its home slot (a walk of the whole table: for tests and
 * diagnostics, never the event path): what one put, get or take may have to probe. */
size_t kvmap_longest_probe(const struct kvmap *m);

#endif
