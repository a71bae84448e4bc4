/*
 * store.h - the response cache's memory: objects under keys, sharded, refcounted, evicted by
 * a policy (policy/evict.h) to stay within a byte budget.
 *
 * An object is one stored response: its key (the primary key, and the Vary names and the
 * values the request had for them), its head as the cache replays it (cache/head.h), its
 * freshness (cache/fresh.h), and its body in segments. It is made on a miss, linked under
 * its key at once while it fills (so that concurrent misses for the key wait for this fill
 * instead of asking the backend again: request coalescing), and filled by the one exchange
 * that fetches it: the head, then the body as it arrives. Readers read it while it fills:
 * body_len (release/acquire) says how many body bytes are there to read, and bytes below it
 * never change. A reader caught up with the fill waits (cache_obj_wait) and is notified
 * through its own callback, from the filling thread, when more comes or the fill ends.
 *
 * Keys are compared whole, never by hash alone. The shards are chosen by the key's hash;
 * each has its own lock, hash table, eviction policy and a share of the budget, so workers
 * hitting different keys never meet, and a hit holds its shard's lock for one table walk and
 * the policy's touch (sieve: one bit). The store keeps one reference on each linked object;
 * each reader and the filler hold their own: an object evicted or purged while a hit streams
 * it is unlinked at once and freed when the last reader lets go.
 *
 * Memory: a shard's budget is cache.memory / shards; it counts the bytes of its linked
 * objects, complete, filling or pass markers. A fill that would pass the budget evicts
 * complete objects and markers first; an object larger than cache.max_object (or than a
 * shard's budget) is not stored.
 * What readers still hold of unlinked objects is outside the count for the moment it takes
 * them to finish.
 */
#ifndef ACCELNET_CACHE_STORE_H
#define ACCELNET_CACHE_STORE_H

#include "cache/fresh.h"
#include "core/list.h"
#include "policy/evict.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum cache_fill_state {
	CACHE_FILLING,	/* being fetched; head and body may still come */
	CACHE_COMPLETE, /* whole */
	CACHE_FAILED,	/* the fetch failed, or the response may not be stored: readers that
			   have not started go to the backend themselves */
	CACHE_PASS,	/* a marker: this key's last response could not be stored, so requests
			   for it go to the backend at once for a while, without waiting */
};

/* A run of body bytes. len, next (and an object's first) are written by the filler while
 * readers read them: atomics, though body_len is what says which bytes are there. */
struct cache_seg {
	struct cache_seg *_Atomic next;
	_Atomic uint32_t len; /* bytes written */
	uint32_t cap;
	char data[];
};

enum cache_wait_state {
	CACHE_WAIT_IDLE,
	CACHE_WAIT_LISTED,   /* on obj->waiters */
	CACHE_WAIT_NOTIFIED, /* taken off it and notified: its owner has yet to take the wake
				(and then sets it IDLE, from its own thread) */
};

/* Someone waiting for an object to fill further. */
struct cache_wait {
	struct list_node link; /* on obj->waiters while LISTED; the notify's after */
	int waiting;	       /* enum cache_wait_state: changed under the object's lock, but
				  NOTIFIED -> IDLE by the owner once it has its wake */
	/* called with the object's lock held, from the filling thread, once: more bytes came,
	 * the head came, or the fill ended. It must not call back into the store. */
	void (*notify)(struct cache_wait *cw);
};

struct cache_obj {
	struct evict_item ev;	/* in its shard's policy once complete */
	struct cache_obj *next; /* its shard's hash chain */
	uint64_t hash;		/* of the primary key */
	unsigned shard;
	atomic_uint refs;
	_Atomic int state; /* enum cache_fill_state */
	unsigned linked : 1, in_policy : 1;
	atomic_flag refreshing; /* a background refresh (stale-while-revalidate) is under way */
	/* the key, the Vary names the response gave and the request's values for them */
	char *key;
	uint32_t key_len;
	char *vary;	   /* names, '\n' after each (cache/vary.h); NULL: no Vary */
	char *vary_values; /* the values of the request that filled it */
	uint32_t vary_len, vary_values_len;
	/* the response: set once by cache_fill_head() before has_head is published */
	_Atomic int has_head;
	int status;
	char *head; /* the stored head, without its framing and its final CRLF */
	uint32_t head_len;
	uint32_t etag_off, etag_len; /* the ETag value inside head; len 0: none */
	uint32_t lm_off, lm_len;     /* the Last-Modified value */
	struct cache_times times;
	int64_t pass_until; /* CACHE_PASS: until then (seconds) */
	/* the body */
	uint64_t total;		   /* its length when the response said (Content-Length); else ~0 */
	_Atomic uint64_t body_len; /* bytes readable */
	struct cache_seg *_Atomic first;
	struct cache_seg *last; /* the filler's */
	uint64_t charged;	/* bytes counted against the shard's budget */
	/* readers waiting for more */
	pthread_mutex_t lock;
	struct list_head waiters;
	struct cache_obj *body_of; /* a revalidated copy reads its body from this object */
};

/* What a store is made with (the config's cache: section). */
struct cache_store_conf {
	uint64_t memory;     /* bytes, all shards */
	uint64_t max_object; /* the largest body stored */
	unsigned shards;     /* a power of two */
	const struct evict_ops *evict;
};

/* What the store did, for the metrics (summed over shards when read). */
struct cache_store_stats {
	uint64_t bytes, objects;
	uint64_t evicted_space, evicted_purge, evicted_replaced, too_big;
};

struct cache_store;

/* 0, or -ENOMEM / -EINVAL (a budget too small for its shards). */
int cache_store_new(const struct cache_store_conf *c, struct cache_store **out);
/* Every object is let go; readers must be gone. */
void cache_store_free(struct cache_store *s);

/* The hash a key is filed under. */
uint64_t cache_key_hash(const char *key, size_t len);

/*
 * The object stored under <key> whose Vary values match what <vary_of> says the request
 * has (called with each candidate's names; it writes the request's values into out[0..cap)
 * and returns their length, or -1 when they cannot be had), referenced (cache_obj_put), or
 * NULL: a complete one (or a pass marker), and in *filling (when not NULL) a fill under way
 * for it, referenced too, or NULL. With <filling> NULL a fill is returned when nothing else
 * is stored. A filling object whose head has not come matches any request (its Vary is not
 * known yet: the caller looks again once it has). A hit counts as a use for eviction.
 */
struct cache_obj *cache_lookup(struct cache_store *s, const char *key, size_t len, uint64_t hash,
			       long (*vary_of)(void *arg, const char *names, size_t nlen, char *out,
					       size_t cap),
			       void *arg, struct cache_obj **filling);

/*
 * A new object for <key>, FILLING, linked in place of whatever was there, referenced for
 * the filler (and by the store). NULL without memory.
 */
struct cache_obj *cache_fill_begin(struct cache_store *s, const char *key, size_t len,
				   uint64_t hash);

/*
 * cache_fill_begin, unless a fill of <key> is under way already (begun by another request
 * since the caller's lookup, on any worker): then NULL with *filling that fill, referenced,
 * to wait on. Lookup and fill are two steps; this makes two requests that miss at once one
 * fill, never two. (A fill whose head has come with a Vary is not joined: it may be another
 * variant's.) NULL with *filling NULL: no memory. <filling> NULL: never joins (the fill is
 * made whatever is under way: cache_fill_begin).
 */
struct cache_obj *cache_fill_begin_once(struct cache_store *s, const char *key, size_t len,
					uint64_t hash, struct cache_obj **filling);
/*
 * cache_fill_begin_once, unless a complete object of <key> that the request matches (its
 * Vary values from <vary_of>, as cache_lookup takes them), other than <seen> (what the
 * caller's lookup found, or NULL), was stored since the caller's lookup: a fill that ended
 * between the two steps (on another worker) answers the request, never a second fetch.
 * Then NULL with *filling that object, referenced, complete: the caller looks up again.
 */
struct cache_obj *cache_fill_begin_unless(
    struct cache_store *s, const char *key, size_t len, uint64_t hash,
    long (*vary_of)(void *arg, const char *names, size_t nlen, char *out, size_t cap), void *arg,
    const struct cache_obj *seen, struct cache_obj **filling);
/*
 * The response head came: its stored form <head>[0..hlen) (cache/head.h), its status,
 * validators (offsets into head), freshness, Vary names and the request's values for them,
 * and the body's length if known (~0 if not). Readers are notified. -EFBIG when the body is
 * known to be too large to store, -ENOMEM: the fill is then to be failed.
 */
int cache_fill_head(struct cache_store *s, struct cache_obj *o, const char *head, size_t hlen,
		    int status, const struct cache_times *t, const char *vary, size_t vlen,
		    const char *vary_values, size_t vvlen, uint64_t total);
/* More body bytes p[0..n). 0, -EFBIG (past max_object or the budget), -ENOMEM. */
int cache_fill_body(struct cache_store *s, struct cache_obj *o, const char *p, size_t n);
/* The fill ended: whole (<ok>) or not. Readers are notified; a failed object is unlinked. */
void cache_fill_end(struct cache_store *s, struct cache_obj *o, int ok);
/* The response may not be stored: mark the key so until <until> (seconds; requests skip
 * waiting). The marker is counted and evicted as objects are; it replaces the key's older. */
void cache_fill_pass(struct cache_store *s, struct cache_obj *o, int64_t until);

/*
 * A revalidation's 304 gave the stored response <old> a new head and freshness: a new
 * object with <head> whose body is <old>'s (shared, not copied), linked in its place,
 * referenced for the caller. NULL without memory.
 */
struct cache_obj *cache_replace_head(struct cache_store *s, struct cache_obj *old, const char *head,
				     size_t hlen, const struct cache_times *t);

/* Let go of a reference. */
void cache_obj_put(struct cache_store *s, struct cache_obj *o);
static inline void cache_obj_get(struct cache_obj *o)
{
	atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
}

/* The segments that hold the body (those of the object it shares its body with). */
static inline const struct cache_seg *cache_obj_body(const struct cache_obj *o)
{
	return o->body_of ? o->body_of->first : o->first;
}
/* The body bytes of <o> in [from, to) (within cache_obj_body_len()) as up to <max> iovecs
 * from <iov>: how many. */
static inline int cache_obj_iov(const struct cache_obj *o, uint64_t from, uint64_t to,
				struct iovec *iov, int max)
{
	int n = 0;
	uint64_t at = 0;
	for (const struct cache_seg *g = cache_obj_body(o); g && at < to && n < max; g = g->next) {
		uint64_t end = at + g->len;
		if (end > from) {
			uint64_t a = from > at ? from - at : 0;
			uint64_t b = (to < end ? to : end) - at;
			iov[n++] = (struct iovec){(void *)(g->data + a), (size_t)(b - a)};
		}
		at = end;
	}
	return n;
}
static inline uint64_t cache_obj_body_len(const struct cache_obj *o)
{
	return atomic_load_explicit(o->body_of ? &o->body_of->body_len : &o->body_len,
				    memory_order_acquire);
}
static inline enum cache_fill_state cache_obj_state(const struct cache_obj *o)
{
	return (enum cache_fill_state)atomic_load_explicit(&o->state, memory_order_acquire);
}

/*
 * Wait for <o> to move past <have> body bytes (UINT64_MAX: for its head), or to end: 1 when it has
 * already (nothing registered), 0 when <cw> is registered and will be notified once (or was
 * registered or notified already: a wake is coming).
 */
int cache_obj_wait(struct cache_obj *o, struct cache_wait *cw, uint64_t have);
/* Stop waiting; 1 when <cw> was still registered, 0 when it has been notified already. */
int cache_obj_unwait(struct cache_obj *o, struct cache_wait *cw);

/*
 * Purge: unlink every object whose key is <key> (all its variants), or for which
 * <match>(<arg>, object) says 1 (cache/purge.h has the admin's). Returns how many went.
 * <match> runs under a shard's lock: it must be cheap and must not call into the store.
 */
size_t cache_purge_key(struct cache_store *s, const char *key, size_t len);
size_t cache_purge_match(struct cache_store *s, int (*match)(void *arg, const struct cache_obj *o),
			 void *arg);

/* Invalidate (RFC 9111 4.4): unlink what is stored under <key>. */
static inline size_t cache_invalidate(struct cache_store *s, const char *key, size_t len)
{
	return cache_purge_key(s, key, len);
}

void cache_store_stats(struct cache_store *s, struct cache_store_stats *out);

#endif
