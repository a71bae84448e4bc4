/*
 * store.c - the cache's sharded, refcounted object store (see store.h).
 *
 * Each shard: a mutex, a chained hash table that doubles when its load passes 1, the
 * eviction policy's order of its complete objects, and its bytes. Lock order: a shard's
 * lock, then an object's lock (the waiters'), then whatever a waiter's notify takes (the
 * owner's inbox). The object lock guards only the waiter list and the publication that
 * wakes it; everything else of an object is written once, before it is published (has_head,
 * body_len, state: release stores read with acquire loads).
 */
#include "cache/store.h"
#include "core/check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SEG_FIRST                                                                                  \
	2048u		   /* the first segment of a body of unknown length (a short streamed      \
			       answer is charged little more than its size) */
#define SEG_MAX (1u << 20) /* segments grow by doubling up to this */
#define TABLE_FIRST 256u

struct shard {
	pthread_mutex_t lock;
	struct cache_obj **table;
	size_t nbuckets, nlinked;
	struct evict ev;
	uint64_t bytes, budget; /* charged (linked objects), and the most allowed */
	uint64_t evicted_space, evicted_purge, evicted_replaced, too_big;
	char pad[64];
};

struct cache_store {
	struct cache_store_conf conf;
	struct shard *shards;
};

uint64_t cache_key_hash(const char *key, size_t len)
{
	return XXH3_64bits(key, len);
}

int cache_store_new(const struct cache_store_conf *c, struct cache_store **out)
{
	unsigned n = c->shards ? c->shards : 1;
	if (n & (n - 1) || !c->evict || c->memory / n < 4096)
		return -EINVAL;
	struct cache_store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->conf = *c;
	s->conf.shards = n;
	if (!(s->shards = calloc(n, sizeof(*s->shards))))
		goto fail;
	for (unsigned i = 0; i < n; i++) {
		struct shard *sh = &s->shards[i];
		pthread_mutex_init(&sh->lock, NULL);
		sh->nbuckets = TABLE_FIRST;
		sh->budget = c->memory / n;
		sh->ev.ops = c->evict;
		c->evict->init(&sh->ev);
		if (!(sh->table = calloc(sh->nbuckets, sizeof(*sh->table)))) {
			cache_store_free(s);
			return -ENOMEM;
		}
	}
	*out = s;
	return 0;
fail:
	free(s);
	return -ENOMEM;
}

static void obj_free(struct cache_store *s, struct cache_obj *o);

void cache_store_free(struct cache_store *s)
{
	if (!s)
		return;
	for (unsigned i = 0; s->shards && i < s->conf.shards; i++) {
		struct shard *sh = &s->shards[i];
		for (size_t b = 0; sh->table && b < sh->nbuckets; b++) {
			struct cache_obj *o = sh->table[b];
			while (o) {
				struct cache_obj *next = o->next;
				o->linked = 0;
				cache_obj_put(s, o);
				o = next;
			}
		}
		free(sh->table);
		pthread_mutex_destroy(&sh->lock);
	}
	free(s->shards);
	free(s);
}

static struct shard *shard_of(struct cache_store *s, uint64_t hash)
{
	return &s->shards[(hash >> 48) & (s->conf.shards - 1)];
}

static size_t bucket_of(const struct shard *sh, uint64_t hash)
{
	return hash & (sh->nbuckets - 1);
}

/* Double the table when it holds more objects than buckets (no memory: stay as it is). */
static void table_grow(struct shard *sh)
{
	if (sh->nlinked <= sh->nbuckets)
		return;
	size_t n = sh->nbuckets * 2;
	struct cache_obj **t = calloc(n, sizeof(*t));
	if (!t)
		return;
	for (size_t b = 0; b < sh->nbuckets; b++) {
		struct cache_obj *o = sh->table[b];
		while (o) {
			struct cache_obj *next = o->next;
			o->next = t[o->hash & (n - 1)];
			t[o->hash & (n - 1)] = o;
			o = next;
		}
	}
	free(sh->table);
	sh->table = t;
	sh->nbuckets = n;
}

static void obj_free(struct cache_store *s, struct cache_obj *o)
{
	struct cache_seg *g = o->first;
	while (g) {
		struct cache_seg *next = g->next;
		free(g);
		g = next;
	}
	if (o->body_of)
		cache_obj_put(s, o->body_of);
	pthread_mutex_destroy(&o->lock);
	free(o->head);
	free(o->vary);
	free(o->key);
	free(o);
}

void cache_obj_put(struct cache_store *s, struct cache_obj *o)
{
	if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1)
		obj_free(s, o);
}

/* Tell every waiter of <o> that something changed (the object's lock held). */
static void wake_waiters(struct cache_obj *o)
{
	struct list_node *n;
	while ((n = list_pop_front(&o->waiters))) {
		struct cache_wait *cw = container_of(n, struct cache_wait, link);
		cw->waiting = CACHE_WAIT_NOTIFIED;
		cw->notify(cw);
	}
}

/* Take <o> out of its shard (the shard's lock held): no longer found, no longer counted;
 * the store's reference is dropped by the caller once the lock is let go. */
static void unlink_locked(struct shard *sh, struct cache_obj *o)
{
	struct cache_obj **p = &sh->table[bucket_of(sh, o->hash)];
	while (*p && *p != o)
		p = &(*p)->next;
	if (*p)
		*p = o->next;
	o->next = NULL;
	o->linked = 0;
	sh->nlinked--;
	if (o->in_policy) {
		sh->ev.ops->remove(&sh->ev, &o->ev);
		o->in_policy = 0;
	}
	sh->bytes -= o->charged;
	o->charged = 0;
}

/* Unlinked objects whose store reference is to be dropped once the shard lock is let go. */
struct dropped {
	struct cache_obj *o[32];
	unsigned n;
};

static void drop_all(struct cache_store *s, struct dropped *d)
{
	for (unsigned i = 0; i < d->n; i++) {
		cache_obj_put(s, d->o[i]); /* a fill's readers keep reading what comes */
	}
	d->n = 0;
}

/* Evict complete objects of <sh> until <need> more bytes fit (its lock held). 0, or -EFBIG
 * when nothing more can go (the rest is filling) or the dropped list is full. */
static int make_room(struct shard *sh, uint64_t need, struct dropped *d)
{
	while (sh->bytes + need > sh->budget) {
		if (d->n == sizeof(d->o) / sizeof(d->o[0]))
			return -EAGAIN;
		struct evict_item *it = sh->ev.ops->victim(&sh->ev);
		if (!it)
			return -EFBIG;
		struct cache_obj *o = container_of(it, struct cache_obj, ev);
		o->in_policy = 0;
		unlink_locked(sh, o);
		sh->evicted_space++;
		d->o[d->n++] = o;
	}
	return 0;
}

/* Count <n> more bytes of <o> against its shard, making room. 0 or -EFBIG. */
static int charge(struct cache_store *s, struct cache_obj *o, uint64_t n)
{
	struct shard *sh = &s->shards[o->shard];
	struct dropped d = {.n = 0};
	int err;
	for (;;) {
		pthread_mutex_lock(&sh->lock);
		if (!o->linked) { /* evicted or replaced meanwhile: readers only, uncounted */
			pthread_mutex_unlock(&sh->lock);
			return 0;
		}
		err = n > sh->budget ? -EFBIG : make_room(sh, n, &d);
		if (!err) {
			sh->bytes += n;
			o->charged += n;
		} else if (err == -EFBIG) {
			sh->too_big++;
		}
		pthread_mutex_unlock(&sh->lock);
		drop_all(s, &d);
		if (err != -EAGAIN)
			return err;
	}
}

struct cache_obj *cache_lookup(struct cache_store *s, const char *key, size_t len, uint64_t hash,
			       long (*vary_of)(void *arg, const char *names, size_t nlen, char *out,
					       size_t cap),
			       void *arg, struct cache_obj **filling)
{
	struct shard *sh = shard_of(s, hash);
	char values[1024];
	struct cache_obj *found = NULL, *fill = NULL;
	pthread_mutex_lock(&sh->lock);
	for (struct cache_obj *o = sh->table[bucket_of(sh, hash)]; o; o = o->next) {
		if (o->hash != hash || o->key_len != len || memcmp(o->key, key, len) != 0)
			continue;
		if (atomic_load_explicit(&o->has_head, memory_order_acquire) && o->vary) {
			long n = vary_of(arg, o->vary, o->vary_len, values, sizeof(values));
			if (n < 0 || (size_t)n != o->vary_values_len ||
			    memcmp(values, o->vary_values, (size_t)n) != 0)
				continue;
		}
		if (cache_obj_state(o) != CACHE_FILLING) {
			if (!found)
				found = o;
		} else if (!fill) {
			fill = o;
		}
		if (found && fill)
			break;
	}
	if (!filling && !found) {
		found = fill; /* the caller takes either: a fill under way then */
		fill = NULL;
	}
	if (found) {
		cache_obj_get(found);
		if (found->in_policy)
			sh->ev.ops->touch(&sh->ev, &found->ev);
	}
	if (filling && (*filling = fill))
		cache_obj_get(fill);
	pthread_mutex_unlock(&sh->lock);
	return found;
}

static struct cache_obj *obj_new(struct cache_store *s, const char *key, size_t len, uint64_t hash)
{
	struct cache_obj *o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	if (!(o->key = malloc(len ? len : 1))) {
		free(o);
		return NULL;
	}
	memcpy(o->key, key, len);
	o->key_len = (uint32_t)len;
	o->hash = hash;
	o->shard = (unsigned)((hash >> 48) & (s->conf.shards - 1));
	o->total = UINT64_MAX;
	atomic_init(&o->refs, 2); /* the store's and the caller's */
	atomic_init(&o->state, CACHE_FILLING);
	pthread_mutex_init(&o->lock, NULL);
	list_init(&o->waiters);
	return o;
}

/* Link <o> in its shard (its lock held): first in its bucket, so it is found before an
 * older object of the same key and variant (which <replaces> names, to be unlinked). */
static void link_locked(struct shard *sh, struct cache_obj *o)
{
	size_t b = bucket_of(sh, o->hash);
	o->next = sh->table[b];
	sh->table[b] = o;
	o->linked = 1;
	sh->nlinked++;
	table_grow(sh);
}

/* Does <o> (linked, complete) answer the request whose values <vary_of> gives (its shard's
 * lock held)? */
static int vary_matches(const struct cache_obj *o,
			long (*vary_of)(void *arg, const char *names, size_t nlen, char *out,
					size_t cap),
			void *arg)
{
	char values[1024];
	if (!o->vary)
		return 1;
	long n = vary_of(arg, o->vary, o->vary_len, values, sizeof(values));
	return n >= 0 && (size_t)n == o->vary_values_len &&
	       memcmp(values, o->vary_values, (size_t)n) == 0;
}

struct cache_obj *cache_fill_begin_unless(
    struct cache_store *s, const char *key, size_t len, uint64_t hash,
    long (*vary_of)(void *arg, const char *names, size_t nlen, char *out, size_t cap), void *arg,
    const struct cache_obj *seen, struct cache_obj **filling)
{
	struct cache_obj *joined = NULL;
	if (len > UINT32_MAX)
		return NULL;
	struct cache_obj *o = obj_new(s, key, len, hash);
	if (!o)
		return NULL;
	struct shard *sh = &s->shards[o->shard];
	pthread_mutex_lock(&sh->lock);
	for (struct cache_obj *p = filling ? sh->table[bucket_of(sh, hash)] : NULL; p;
	     p = p->next) {
		if (p->hash != hash || p->key_len != len || memcmp(p->key, key, len) != 0)
			continue;
		enum cache_fill_state st = cache_obj_state(p);
		int head = atomic_load_explicit(&p->has_head, memory_order_acquire);
		/* one whose head (and Vary) came is another variant's, maybe: not joined */
		if (st == CACHE_FILLING && !(head && p->vary)) {
			joined = p;
			break;
		}
		/* stored since the caller looked: it answers (the caller looks again) */
		if (vary_of && st == CACHE_COMPLETE && p != seen && head &&
		    vary_matches(p, vary_of, arg)) {
			joined = p;
			break;
		}
	}
	if (joined)
		cache_obj_get(joined);
	else
		link_locked(sh, o);
	pthread_mutex_unlock(&sh->lock);
	if (filling)
		*filling = joined;
	if (!joined)
		return o;
	obj_free(s, o); /* never linked: no one else saw it */
	return NULL;
}

struct cache_obj *cache_fill_begin_once(struct cache_store *s, const char *key, size_t len,
					uint64_t hash, struct cache_obj **filling)
{
	return cache_fill_begin_unless(s, key, len, hash, NULL, NULL, NULL, filling);
}

static void find_field(const char *head, size_t hlen, const char *name, uint32_t *off,
		       uint32_t *len)
{
	size_t n = strlen(name);
	const char *p = head, *end = head + hlen;
	*off = *len = 0;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > n + 1 && strncasecmp(p, name, n) == 0 && p[n] == ':') {
			const char *v = p + n + 1, *ve = eol;
			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			*off = (uint32_t)(v - head);
			*len = (uint32_t)(ve - v);
			return;
		}
		p = eol + 1;
	}
}

/* Keep the head and its facts in <o> (before has_head is published). 0 or -ENOMEM. */
static int set_head(struct cache_obj *o, const char *head, size_t hlen, int status,
		    const struct cache_times *t)
{
	char *h = malloc(hlen ? hlen : 1);
	if (!h)
		return -ENOMEM;
	memcpy(h, head, hlen);
	o->head = h;
	o->head_len = (uint32_t)hlen;
	o->status = status;
	o->times = *t;
	find_field(h, hlen, "etag", &o->etag_off, &o->etag_len);
	find_field(h, hlen, "last-modified", &o->lm_off, &o->lm_len);
	return 0;
}

int cache_fill_head(struct cache_store *s, struct cache_obj *o, const char *head, size_t hlen,
		    int status, const struct cache_times *t, const char *vary, size_t vlen,
		    const char *vary_values, size_t vvlen, uint64_t total)
{
	if (total != UINT64_MAX && total > s->conf.max_object)
		return -EFBIG;
	if (hlen > UINT32_MAX || vlen > UINT32_MAX || vvlen > UINT32_MAX)
		return -EFBIG;
	if (set_head(o, head, hlen, status, t) < 0)
		return -ENOMEM;
	if (vlen) {
		char *v = malloc(vlen + vvlen + 1);
		if (!v)
			return -ENOMEM;
		memcpy(v, vary, vlen);
		memcpy(v + vlen, vary_values, vvlen);
		o->vary = v;
		o->vary_len = (uint32_t)vlen;
		o->vary_values = v + vlen;
		o->vary_values_len = (uint32_t)vvlen;
	}
	o->total = total;
	int err = charge(s, o, hlen + o->key_len + vlen + vvlen + sizeof(*o));
	if (err)
		return err;
	if (total != UINT64_MAX && total && total <= UINT32_MAX) { /* one segment holds it all */
		if ((err = charge(s, o, total)) < 0)
			return err;
		struct cache_seg *g = malloc(sizeof(*g) + total);
		if (!g)
			return -ENOMEM;
		atomic_init(&g->next, NULL);
		atomic_init(&g->len, 0);
		g->cap = (uint32_t)total;
		atomic_store_explicit(&o->first, g, memory_order_relaxed);
		o->last = g;
	}
	pthread_mutex_lock(&o->lock);
	atomic_store_explicit(&o->has_head, 1, memory_order_release);
	wake_waiters(o);
	pthread_mutex_unlock(&o->lock);
	return 0;
}

int cache_fill_body(struct cache_store *s, struct cache_obj *o, const char *p, size_t n)
{
	uint64_t have = atomic_load_explicit(&o->body_len, memory_order_relaxed);
	if (n > s->conf.max_object - have || (o->total != UINT64_MAX && n > o->total - have))
		return -EFBIG; /* (have is at most both) */
	size_t left = n;
	while (left) {
		struct cache_seg *g = o->last;
		if (!g || g->len == g->cap) {
			uint32_t cap = g ? g->cap * 2 : SEG_FIRST;
			if (cap > SEG_MAX)
				cap = SEG_MAX;
			int err = charge(s, o, cap);
			if (err)
				return err;
			struct cache_seg *ng = malloc(sizeof(*ng) + cap);
			if (!ng)
				return -ENOMEM;
			atomic_init(&ng->next, NULL);
			atomic_init(&ng->len, 0);
			ng->cap = cap;
			/* linked before its bytes are published (body_len, release) */
			atomic_store_explicit(g ? &g->next : &o->first, ng, memory_order_relaxed);
			o->last = g = ng;
		}
		uint32_t len = atomic_load_explicit(&g->len, memory_order_relaxed);
		size_t k = g->cap - len < left ? g->cap - len : left;
		memcpy(g->data + len, p, k);
		atomic_store_explicit(&g->len, len + (uint32_t)k, memory_order_relaxed);
		p += k;
		left -= k;
	}
	pthread_mutex_lock(&o->lock);
	atomic_store_explicit(&o->body_len, have + n, memory_order_release);
	wake_waiters(o);
	pthread_mutex_unlock(&o->lock);
	return 0;
}

void cache_fill_end(struct cache_store *s, struct cache_obj *o, int ok)
{
	struct shard *sh = &s->shards[o->shard];
	if (ok && o->total != UINT64_MAX && cache_obj_body_len(o) != o->total)
		ok = 0;
	struct dropped d = {.n = 0};
	pthread_mutex_lock(&sh->lock);
	if (o->linked && ok) {
		/* older objects of the same key and variant go: this one answers for them */
		for (struct cache_obj *p = sh->table[bucket_of(sh, o->hash)], *next; p; p = next) {
			next = p->next;
			if (p == o || p->hash != o->hash || p->key_len != o->key_len ||
			    memcmp(p->key, o->key, o->key_len) != 0 ||
			    cache_obj_state(p) == CACHE_FILLING ||
			    d.n == sizeof(d.o) / sizeof(d.o[0]))
				continue;
			if (p->vary_values_len != o->vary_values_len ||
			    (o->vary_values_len &&
			     memcmp(p->vary_values, o->vary_values, o->vary_values_len) != 0))
				continue;
			unlink_locked(sh, p);
			sh->evicted_replaced++;
			d.o[d.n++] = p;
		}
		o->ev.size = o->charged;
		sh->ev.ops->insert(&sh->ev, &o->ev);
		o->in_policy = 1;
	} else if (o->linked) {
		unlink_locked(sh, o);
		d.o[d.n++] = o;
	}
	pthread_mutex_unlock(&sh->lock);
	pthread_mutex_lock(&o->lock);
	atomic_store_explicit(&o->state, ok ? CACHE_COMPLETE : CACHE_FAILED, memory_order_release);
	wake_waiters(o);
	pthread_mutex_unlock(&o->lock);
	drop_all(s, &d);
}

/* Unlink the pass markers of <o>'s key other than <o> (its shard's lock held). */
static void drop_old_markers(struct shard *sh, struct cache_obj *o, struct dropped *d)
{
	for (struct cache_obj *p = sh->table[bucket_of(sh, o->hash)], *next; p; p = next) {
		next = p->next;
		if (p == o || p->hash != o->hash || p->key_len != o->key_len ||
		    memcmp(p->key, o->key, o->key_len) != 0 || cache_obj_state(p) != CACHE_PASS ||
		    d->n == sizeof(d->o) / sizeof(d->o[0]))
			continue;
		unlink_locked(sh, p);
		sh->evicted_replaced++;
		d->o[d->n++] = p;
	}
}

void cache_fill_pass(struct cache_store *s, struct cache_obj *o, int64_t until)
{
	struct shard *sh = &s->shards[o->shard];
	/* A marker is counted as any object is (what it holds, and at least itself and its
	 * key), so that the markers of keys never asked again go when room is needed: uncounted,
	 * a stream of responses that may not be stored would grow the store without end. */
	uint64_t least = sizeof(*o) + o->key_len;
	struct dropped d = {.n = 0};
	o->pass_until = until;
	for (;;) {
		pthread_mutex_lock(&sh->lock);
		if (!o->linked || o->in_policy)
			break;
		uint64_t need = o->charged < least ? least - o->charged : 0;
		int err = make_room(sh, need, &d);
		if (err == -EAGAIN) {
			pthread_mutex_unlock(&sh->lock);
			drop_all(s, &d);
			continue;
		}
		if (err) { /* no room even for a marker: none is kept */
			unlink_locked(sh, o);
			d.o[d.n++] = o;
			break;
		}
		sh->bytes += need;
		o->charged += need;
		drop_old_markers(sh, o, &d); /* this one says what they said */
		o->ev.size = o->charged;
		sh->ev.ops->insert(&sh->ev, &o->ev);
		o->in_policy = 1;
		break;
	}
	pthread_mutex_unlock(&sh->lock);
	pthread_mutex_lock(&o->lock);
	atomic_store_explicit(&o->state, CACHE_PASS, memory_order_release);
	wake_waiters(o);
	pthread_mutex_unlock(&o->lock);
	drop_all(s, &d);
}

struct cache_obj *cache_replace_head(struct cache_store *s, struct cache_obj *old, const char *head,
				     size_t hlen, const struct cache_times *t)
{
	struct cache_obj *o = obj_new(s, old->key, old->key_len, old->hash);
	if (!o)
		return NULL;
	if (set_head(o, head, hlen, old->status, t) < 0)
		goto fail;
	if (old->vary) {
		size_t n = (size_t)old->vary_len + old->vary_values_len;
		if (!(o->vary = malloc(n + 1)))
			goto fail;
		memcpy(o->vary, old->vary, n);
		o->vary_len = old->vary_len;
		o->vary_values = o->vary + old->vary_len;
		o->vary_values_len = old->vary_values_len;
	}
	struct cache_obj *body = old->body_of ? old->body_of : old;
	cache_obj_get(body);
	o->body_of = body;
	o->total = old->total;
	atomic_store_explicit(&o->has_head, 1, memory_order_relaxed);
	atomic_store_explicit(&o->state, CACHE_COMPLETE, memory_order_relaxed);
	struct shard *sh = &s->shards[o->shard];
	struct dropped d = {.n = 0};
	uint64_t size = hlen + o->key_len + o->vary_len + o->vary_values_len + sizeof(*o) +
			cache_obj_body_len(body);
	int err, linked = 0;
	for (;;) {
		pthread_mutex_lock(&sh->lock);
		if (!linked) { /* in the old one's place at once */
			if (old->linked) {
				unlink_locked(sh, old);
				sh->evicted_replaced++;
				d.o[d.n++] = old;
			}
			link_locked(sh, o);
			linked = 1;
		} else if (!o->linked) { /* purged or replaced while room was made */
			err = 0;
			break;
		}
		err = size > sh->budget ? -EFBIG : make_room(sh, size, &d);
		if (err != -EAGAIN)
			break;
		pthread_mutex_unlock(&sh->lock);
		drop_all(s, &d);
	}
	if (o->linked && !err) {
		sh->bytes += size;
		o->charged = size;
		o->ev.size = size;
		sh->ev.ops->insert(&sh->ev, &o->ev);
		o->in_policy = 1;
	} else if (o->linked) { /* no room: served to this request, not kept */
		unlink_locked(sh, o);
		sh->too_big++;
		d.o[d.n++] = o; /* the store's reference; the caller keeps its own */
	}
	pthread_mutex_unlock(&sh->lock);
	drop_all(s, &d);
	return o;
fail:
	free(o->head);
	o->head = NULL;
	atomic_store(&o->refs, 1);
	obj_free(s, o);
	return NULL;
}

int cache_obj_wait(struct cache_obj *o, struct cache_wait *cw, uint64_t have)
{
	int ready;
	pthread_mutex_lock(&o->lock);
	int head = atomic_load_explicit(&o->has_head, memory_order_acquire);
	ready = cache_obj_state(o) != CACHE_FILLING ||
		(head && (have == UINT64_MAX || cache_obj_body_len(o) > have));
	if (cw->waiting) {
		ready = 0; /* registered, or notified and not yet taken: a wake is coming */
	} else if (!ready) {
		list_push_back(&o->waiters, &cw->link);
		cw->waiting = CACHE_WAIT_LISTED;
	}
	pthread_mutex_unlock(&o->lock);
	return ready;
}

int cache_obj_unwait(struct cache_obj *o, struct cache_wait *cw)
{
	int was;
	pthread_mutex_lock(&o->lock);
	was = cw->waiting == CACHE_WAIT_LISTED;
	if (was)
		list_del(&o->waiters, &cw->link);
	cw->waiting = CACHE_WAIT_IDLE;
	pthread_mutex_unlock(&o->lock);
	return was;
}

size_t cache_purge_match(struct cache_store *s, int (*match)(void *arg, const struct cache_obj *o),
			 void *arg)
{
	size_t n = 0;
	for (unsigned i = 0; i < s->conf.shards; i++) {
		struct shard *sh = &s->shards[i];
		struct dropped d = {.n = 0};
		/* the walk goes on from its bucket after each round of drops: the table only
		 * grows, and growing moves an object of bucket b to b or b + the old size, so
		 * nothing linked before the purge is passed over */
		size_t b = 0;
		int full;
		do {
			full = 0;
			pthread_mutex_lock(&sh->lock);
			for (; b < sh->nbuckets && !full; b++) {
				struct cache_obj *o = sh->table[b], *next;
				for (; o; o = next) {
					next = o->next;
					if (!match(arg, o))
						continue;
					unlink_locked(sh, o);
					sh->evicted_purge++;
					d.o[d.n++] = o;
					n++;
					if (d.n == sizeof(d.o) / sizeof(d.o[0])) {
						full = 1;
						break;
					}
				}
			}
			if (full)
				b--; /* the bucket it stopped in may hold more */
			pthread_mutex_unlock(&sh->lock);
			drop_all(s, &d);
		} while (full);
	}
	return n;
}

struct key_arg {
	const char *key;
	size_t len;
};

static int match_key(void *arg, const struct cache_obj *o)
{
	const struct key_arg *k = arg;
	return o->key_len == k->len && memcmp(o->key, k->key, k->len) == 0;
}

size_t cache_purge_key(struct cache_store *s, const char *key, size_t len)
{
	uint64_t hash = cache_key_hash(key, len);
	struct shard *sh = shard_of(s, hash);
	struct dropped d = {.n = 0};
	struct key_arg k = {key, len};
	size_t n = 0;
	int again;
	do { /* as many rounds as it takes to drop them all, 32 at a time */
		again = 0;
		pthread_mutex_lock(&sh->lock);
		for (struct cache_obj *o = sh->table[bucket_of(sh, hash)], *next; o; o = next) {
			next = o->next;
			if (o->hash != hash || !match_key(&k, o))
				continue;
			if (d.n == sizeof(d.o) / sizeof(d.o[0])) {
				again = 1;
				break;
			}
			unlink_locked(sh, o);
			sh->evicted_purge++;
			d.o[d.n++] = o;
			n++;
		}
		pthread_mutex_unlock(&sh->lock);
		drop_all(s, &d);
	} while (again);
	return n;
}

void cache_store_stats(struct cache_store *s, struct cache_store_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < s->conf.shards; i++) {
		struct shard *sh = &s->shards[i];
		pthread_mutex_lock(&sh->lock);
		out->bytes += sh->bytes;
		out->objects += sh->nlinked;
		out->evicted_space += sh->evicted_space;
		out->evicted_purge += sh->evicted_purge;
		out->evicted_replaced += sh->evicted_replaced;
		out->too_big += sh->too_big;
		pthread_mutex_unlock(&sh->lock);
	}
}

struct cache_obj *cache_fill_begin(struct cache_store *s, const char *key, size_t len,
				   uint64_t hash)
{
	return cache_fill_begin_once(s, key, len, hash, NULL);
}
