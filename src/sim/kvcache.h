/*
 * kvcache.h - the simulated accelerator's block-level prefix cache, as an inference engine's
 * automatic prefix caching keeps it (vLLM's): a bounded set of blocks named by chain hashes
 * (hash[i] names the whole prompt prefix through block i, http/prompt.h), evicted least
 * recently used first.
 *
 * A prompt's cached prefix is its longest run hash[0..k) all present (kvcache_match). When
 * the prompt is admitted -- its prefill runs -- its blocks become the most recent ones, block
 * 0 most recent of all, so that within one chain the deepest block counts as least recent (as
 * vLLM frees a request's blocks tail first): an eviction shortens a cached prefix from its end
 * rather than cutting off its head and stranding the rest. At most <capacity> blocks of one
 * prompt are kept (the ones past that could not stay anyway).
 *
 * Everything is allocated by kvcache_create(): an open-addressed hash table of block indices
 * and an array of blocks threaded on one LRU list. Lookups, touches, inserts and evictions are
 * O(1); nothing is allocated afterwards. Pure: no sockets, no clock.
 */
#ifndef ACCELNET_SIM_KVCACHE_H
#define ACCELNET_SIM_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

/* What an admission changed, told in order: every eviction, then the new blocks. */
struct kvcache_sink {
	/* hash[0..n) left the cache */
	void (*removed)(void *arg, const uint64_t *hash, size_t n);
	/* hash[0..n), consecutive blocks of one chain, entered it; parent: the block before
	 * hash[0] in its chain, NULL for a chain's first block */
	void (*stored)(void *arg, const uint64_t *hash, size_t n, const uint64_t *parent);
	void *arg;
};

struct kvcache;

/*
 * A cache of <capacity> blocks (at least 1) for prompts of at most <max_prompt_blocks> blocks.
 * 0 or -ENOMEM / -EINVAL.
 */
int kvcache_create(size_t capacity, size_t max_prompt_blocks, struct kvcache **out);
void kvcache_destroy(struct kvcache *c);
/* Drop every block (an engine's reset of its prefix cache); no sink is told. */
void kvcache_clear(struct kvcache *c);

size_t kvcache_capacity(const struct kvcache *c);
size_t kvcache_used(const struct kvcache *c);
int kvcache_contains(const struct kvcache *c, uint64_t hash);

/* How many leading blocks of hash[0..n) are cached: the k of the longest run all present. */
size_t kvcache_match(const struct kvcache *c, const uint64_t *hash, size_t n);

/*
 * Admit a prompt of blocks hash[0..n) (n at most max_prompt_blocks), of which the first <hit>
 * are cached (kvcache_match's answer just before): touch those, insert the rest of the first
 * min(n, capacity), evicting the least recent blocks of other prompts for room, and tell
 * <sink> (may be NULL) what changed.
 */
void kvcache_admit(struct kvcache *c, const uint64_t *hash, size_t n, size_t hit,
		   const struct kvcache_sink *sink);

/*
 * The hashes from most to least recent into out[0..max); returns how many. For tests and
 * /sim/stats-style dumps, O(used).
 */
size_t kvcache_list(const struct kvcache *c, uint64_t *out, size_t max);

#endif
