/*
 * stick.h - where each conversation went: a bounded table from a session's hash to a backend
 * of one pool, with a time to live, that every worker reads and writes without a lock; and a
 * feed of what was written, for the cluster thread to pass on.
 *
 * A session is named by the client (pools[].session: a header, a cookie, the Responses API's
 * previous_response_id); the table never holds those strings, only their 64-bit hash, and the
 * backend as its index in the pool. The two kinds of name live in two key spaces (the key's
 * top bit says which, enum stick_kind): a client that names its session after another
 * conversation's response id, or sends a session's name as previous_response_id, names a
 * conversation of its own, never the other one, however the hashes fall. What it answers is a
 * preference: the balancer's pick (runtime/pick.c) takes it only when that backend is eligible for
 * the request, so a hash that names a backend out of the pool, down, draining or full changes
 * nothing.
 *
 * The table is set-associative: a hash has STICK_WAYS places in its bucket, and an entry that
 * finds none free nor expired takes the place of the one that expires first. Its size is fixed
 * when it is made (max_entries), so a client that invents session ids by the million pushes
 * out the oldest entries and takes no memory. Each place is two words, the hash and its value
 * (a tag of the hash, the backend, the expiry in seconds); a reader that meets a place being
 * rewritten sees the tag disagree and takes it for a miss (a miss costs a balancer's pick).
 *
 * The feed is a ring of the entries written with stick_put(..., 1): many writers claim slots
 * with one fetch-add and stamp them (odd while writing, even once written), a reader drains
 * it behind them with a cursor of its own and skips what it fell a ring behind on
 * (policy/prefix_feed.h works the same way). Its readers: the cluster's sync (cluster:), and
 * after a reload the main thread, which follows the old configuration's table into the new
 * one's until the old one's last request ends (stick_copy() takes what was there before).
 */
#ifndef ACCELNET_POLICY_STICK_H
#define ACCELNET_POLICY_STICK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define STICK_WAYS 4
#define STICK_FEED_SLOTS 1024

struct stick_place {
	_Atomic uint64_t key;
	_Atomic uint64_t val; /* tag (16) | backend + 1 (16) | expiry, seconds (32); 0: empty */
};

struct stick_feed_slot {
	_Atomic uint64_t stamp; /* 2i + 1 while entry i is written, 2i + 2 once it is */
	_Atomic uint64_t key;
	_Atomic uint32_t backend;
};

struct stick_table {
	struct stick_place *place; /* nbuckets * STICK_WAYS */
	size_t nbuckets;	   /* a power of two */
	unsigned ttl_s;
	_Atomic int shared;    /* the feed is read (cluster:, or a reload follows the table) */
	uint64_t follow;       /* a reload's reader of the feed: its cursor, */
	int followed;	       /* ... once stick_follow() began it (the main thread's) */
	_Atomic uint64_t head; /* feed entries claimed so far */
	struct stick_feed_slot feed[STICK_FEED_SLOTS];
};

/* A table of about <max_entries> (at least STICK_WAYS) whose entries last <ttl_s>. 0 or
 * -ENOMEM. */
int stick_table_new(size_t max_entries, unsigned ttl_s, struct stick_table **out);
void stick_table_free(struct stick_table *t);

/* What names a conversation: the session header or cookie the operator configured, or a
 * response id the backend wrote (what previous_response_id refers to). */
enum stick_kind { STICK_NAMED = 0, STICK_RESPONSE = 1 };

#define STICK_KIND_BIT 63

/* The key of a session's name <p>[0..len) of <kind>: its hash (the same on every instance:
 * unseeded), the top bit the kind's; never 0. */
uint64_t stick_key(enum stick_kind kind, const void *p, size_t len);

/*
 * The backend <key> went to, while its entry lives at <now_s>: its index, and in *expires_s
 * (may be NULL) when the entry expires; -1 when none.
 */
int stick_get(const struct stick_table *t, uint64_t key, uint32_t now_s, uint32_t *expires_s);

/* <key> goes to backend <backend> (< 65535) from <now_s> for the table's ttl; also into the
 * feed when <feed> (what this instance learned, not what another told it) and the table is
 * shared (no one reads the feed otherwise: its head is not written). */
void stick_put(struct stick_table *t, uint64_t key, unsigned backend, uint32_t now_s, int feed);

/*
 * Every entry of <from> alive at <now_s> into <to> (a reload: the new configuration's table
 * of the pool), its backend i as map[i] (i < nmap; -1: not in the new pool, the entry stays
 * behind), expiring when it would have (at most <to>'s ttl from <now_s>); not into <to>'s
 * feed. Workers may write <from> meanwhile: a place caught between two writes is passed over.
 * How many were copied.
 */
size_t stick_copy(struct stick_table *to, const struct stick_table *from, const int *map,
		  size_t nmap, uint32_t now_s);

/*
 * From now on what <t>'s writers learn goes into its feed (as when shared), read from
 * t->follow on (stick_feed_take(t, &t->follow, ...); t->followed set): an entry put before this
 * call is in the table for a stick_copy() made after it, one put after is in the feed, or both.
 * Main thread.
 */
void stick_follow(struct stick_table *t);

/*
 * The next entry of the feed after *cursor (the reader's own count, 0 at first): 1 with *key
 * and *backend, or 0 when none is ready. One reader.
 */
int stick_feed_take(struct stick_table *t, uint64_t *cursor, uint64_t *key, unsigned *backend);

#endif
