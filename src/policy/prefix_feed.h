/*
 * prefix_feed.h - the prompts a backend was sent, for another thread to pass on: a fixed
 * ring that any worker writes without a lock and one reader drains behind them.
 *
 * balance: llm learns which prefixes each backend holds from the prompts it routes there
 * (prefix_index.h). Instances sharing a Redis (cluster:) tell one another what they learned:
 * each prompt's chain hashes go into its backend's feed as it is sent there (llm_picked, or a
 * hedge's copy at its answer), PREFIX_FEED_BLOCKS an entry (runtime/llm.c pushes a long
 * prompt as several); nothing takes one back, so a prompt that then gets no answer stays in
 * the others' indexes until it ages out there. The cluster thread takes them
 * out, sends them, and inserts the others' into its own indexes. Every block is sent, not
 * only the first: an index that held only a prompt's start on its home would lose to an
 * instance's own longer match of it elsewhere.
 *
 * A writer claims a slot with one fetch-add on the head and stamps it odd while it writes
 * and even when done (a sequence lock per slot); the reader copies a slot only when its stamp
 * says it holds the entry the reader expects, and checks the stamp again after copying. A
 * reader that falls a ring behind skips what was overwritten: entries are hints, and a
 * lost one costs one miss.
 */
#ifndef ACCELNET_POLICY_PREFIX_FEED_H
#define ACCELNET_POLICY_PREFIX_FEED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PREFIX_FEED_BLOCKS 64 /* hashes of one entry, at most */
#define PREFIX_FEED_SLOTS 256

struct prefix_feed_slot {
	_Atomic uint64_t stamp; /* 2i + 1 while entry i is written, 2i + 2 once it is */
	_Atomic uint32_t n;
	_Atomic uint64_t hash[PREFIX_FEED_BLOCKS];
};

struct prefix_feed {
	_Atomic uint64_t head; /* entries claimed so far */
	struct prefix_feed_slot slot[PREFIX_FEED_SLOTS];
};

/* A feed, empty. 0 or -ENOMEM. */
int prefix_feed_new(struct prefix_feed **out);
void prefix_feed_free(struct prefix_feed *f);

/* The first (at most PREFIX_FEED_BLOCKS) of <n> chain hashes of a prompt: any thread. */
void prefix_feed_push(struct prefix_feed *f, const uint64_t *hash, size_t n);

/*
 * The next whole entry after *cursor (the reader's own count, 0 at first) into
 * hash[PREFIX_FEED_BLOCKS]: its number of hashes, or 0 when none is ready. Skips what was
 * overwritten before it could be read. One reader.
 */
size_t prefix_feed_take(struct prefix_feed *f, uint64_t *cursor, uint64_t *hash);

#endif
