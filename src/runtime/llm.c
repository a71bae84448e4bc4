/*
 * llm.c - per-backend prefix index and TTFT fit, per-request block arrays (see llm.h).
 */
#include "runtime/llm.h"
#include "core/clock.h"
#include "http/prompt.h"

#include <errno.h>
#include <stdlib.h>

/* A request's time after its first byte: each sample moves the mean by this share. */
#define DECODE_WEIGHT 8

static void fit_init(struct llm_fit *f)
{
	atomic_flag_clear(&f->busy);
	ttft_fit_init(&f->fit);
	f->ready = 0;
	uint32_t base, block;
	ttft_fit_solve(&f->fit, &base, &block);
	atomic_init(&f->base_us, base);
	atomic_init(&f->block_us, block);
}

int llm_fit_new(struct llm_fit **out)
{
	if (!(*out = malloc(sizeof(**out))))
		return -ENOMEM;
	fit_init(*out);
	return 0;
}

int llm_backend_new(const struct lb_state *st, struct llm_fit *pool, struct llm_backend **out)
{
	struct llm_backend *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	if (prefix_index_new(st->cache_blocks, &l->prefix) < 0) {
		free(l);
		return -ENOMEM;
	}
	fit_init(&l->fit);
	l->pool = pool;
	*out = l;
	return 0;
}

void llm_backend_free(struct llm_backend *l)
{
	if (!l)
		return;
	prefix_index_free(l->prefix);
	prefix_pending_free(l->pending);
	prefix_feed_free(l->feed);
	free(l);
}

int llm_follow_events(struct llm_backend *l)
{
	size_t entries = prefix_index_capacity(l->prefix) / LLM_PENDING_SHARE;
	if (!l->pending && prefix_pending_new(entries > LLM_MAX_BLOCKS ? entries : LLM_MAX_BLOCKS,
					      LLM_PENDING_MS, &l->pending) < 0)
		return -ENOMEM;
	l->exact = 1;
	return 0;
}

int llm_share(struct llm_backend *l)
{
	if (l->exact || l->feed)
		return 0;
	return prefix_feed_new(&l->feed);
}

/* The fit the pick uses: its own line once it has one (ready is only ever set), else the
 * pool's. */
static const struct llm_fit *fit_of(const struct llm_backend *l)
{
	return atomic_load_explicit(&l->own_ready, memory_order_relaxed) ? &l->fit : l->pool;
}

void llm_candidate(const struct llm_backend *l, const uint64_t *blocks, uint32_t n,
		   struct lb_candidate *c)
{
	const struct llm_fit *f = fit_of(l);
	if (!n)
		c->hit_blocks = 0;
	else if (l->pending && atomic_load_explicit(&l->exact, memory_order_relaxed))
		c->hit_blocks = (uint32_t)prefix_pending_match(l->prefix, l->pending, blocks, n,
							       clock_now_ms());
	else
		c->hit_blocks = (uint32_t)prefix_index_match(l->prefix, blocks, n);
	c->base_us = atomic_load_explicit(&f->base_us, memory_order_relaxed);
	c->block_us = atomic_load_explicit(&f->block_us, memory_order_relaxed);
	/* a slot frees after about the mean of what holds them */
	uint64_t work = atomic_load_explicit(&l->work_us, memory_order_relaxed);
	unsigned working = atomic_load_explicit(&l->working, memory_order_relaxed);
	c->service_us =
	    working ? (uint32_t)(work / working)
		    : c->base_us + atomic_load_explicit(&l->decode_us, memory_order_relaxed);
	c->waiting = atomic_load_explicit(&l->waiting, memory_order_relaxed);
}

void llm_wait_for(struct llm_backend *from, struct llm_backend *to)
{
	if (from == to)
		return;
	if (from)
		atomic_fetch_sub_explicit(&from->waiting, 1, memory_order_relaxed);
	if (to)
		atomic_fetch_add_explicit(&to->waiting, 1, memory_order_relaxed);
}

/* For the other instances (cluster): every block, a feed entry's worth at a time. */
static void share(struct llm_backend *l, const uint64_t *blocks, uint32_t n)
{
	if (!l->feed)
		return;
	for (uint32_t i = 0; i < n; i += PREFIX_FEED_BLOCKS)
		prefix_feed_push(l->feed, blocks + i, n - i);
}

uint32_t llm_picked(struct llm_backend *l, const uint64_t *blocks, uint32_t n, uint32_t hit,
		    uint32_t *ticks)
{
	const struct llm_fit *f = fit_of(l);
	uint64_t took = 0;
	if (n && !l->exact) {
		took = prefix_index_insert(l->prefix, blocks, n);
		share(l, blocks, n);
	} else if (n > hit && l->pending) /* (hit <= n: the pick's match) */
		prefix_pending_add(l->pending, blocks + hit, n - hit, clock_now_ms());
	if (ticks)
		*ticks = took > UINT32_MAX ? UINT32_MAX : (uint32_t)took;
	atomic_fetch_add_explicit(&l->prompt_blocks, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&l->missed_blocks, n - hit, memory_order_relaxed);
	uint64_t work =
	    atomic_load_explicit(&f->base_us, memory_order_relaxed) +
	    (uint64_t)atomic_load_explicit(&f->block_us, memory_order_relaxed) * (n - hit) +
	    atomic_load_explicit(&l->decode_us, memory_order_relaxed);
	uint32_t w = work > UINT32_MAX ? UINT32_MAX : work ? (uint32_t)work : 1;
	atomic_fetch_add_explicit(&l->work_us, w, memory_order_relaxed);
	atomic_fetch_add_explicit(&l->working, 1, memory_order_relaxed);
	return w;
}

void llm_unpicked(struct llm_backend *l, const uint64_t *blocks, uint32_t n, uint32_t missed,
		  uint32_t ticks)
{
	if (!blocks || missed > n)
		return;
	if (!l->exact)
		prefix_index_take_back(l->prefix, blocks + (n - missed), missed, ticks);
	else if (l->pending)
		prefix_pending_remove(l->pending, blocks + (n - missed), missed);
}

void llm_done(struct llm_backend *l, uint32_t work_us)
{
	atomic_fetch_sub_explicit(&l->work_us, work_us, memory_order_relaxed);
	atomic_fetch_sub_explicit(&l->working, 1, memory_order_relaxed);
}

/* Add a sample to <f>; 1 when its line is ready. */
static int fit_add(struct llm_fit *f, uint32_t missed, uint64_t us)
{
	if (atomic_flag_test_and_set_explicit(&f->busy, memory_order_acquire))
		return 0; /* another worker is adding one: this sample is one among many */
	ttft_fit_add(&f->fit, missed, (double)us);
	uint32_t base, block;
	ttft_fit_solve(&f->fit, &base, &block);
	f->ready = f->ready || ttft_fit_ready(&f->fit);
	int ready = f->ready;
	atomic_store_explicit(&f->base_us, base, memory_order_relaxed);
	atomic_store_explicit(&f->block_us, block, memory_order_relaxed);
	atomic_flag_clear_explicit(&f->busy, memory_order_release); /* after both: one line */
	return ready;
}

void llm_cached(struct llm_backend *l, const uint64_t *blocks, uint32_t n, int picked)
{
	if (!n || l->exact || picked)
		return; /* its pick put it in the index and shared it already */
	prefix_index_insert(l->prefix, blocks, n); /* its prefill left them there */
	share(l, blocks, n);
}

void llm_first_token(struct llm_backend *l, uint32_t n, uint32_t missed, uint64_t us)
{
	if (!n)
		return; /* no prompt: says nothing of prefill, and would flatten the fit's line */
	fit_add(l->pool, missed, us);
	if (fit_add(&l->fit, missed, us))
		atomic_store_explicit(&l->own_ready, 1, memory_order_relaxed);
}

void llm_answered(struct llm_backend *l, const uint64_t *blocks, uint32_t n, uint32_t missed,
		  uint64_t us, int picked)
{
	llm_cached(l, blocks, n, picked);
	llm_first_token(l, n, missed, us);
}

void llm_observe_decode(struct llm_backend *l, uint64_t decode_us)
{
	uint32_t sample = decode_us > UINT32_MAX ? UINT32_MAX : (uint32_t)decode_us;
	uint32_t cur = atomic_load_explicit(&l->decode_us, memory_order_relaxed);
	/* the first sample stands alone; racing updates may lose one: one among many */
	cur = cur ? cur + (uint32_t)(((int64_t)sample - cur) / DECODE_WEIGHT) : sample ? sample : 1;
	atomic_store_explicit(&l->decode_us, cur, memory_order_relaxed);
}

void llm_scope_blocks(uint64_t *blocks, uint32_t n, const struct json_view *v, const char *body)
{
	const struct json_span *m = &v->model, *salt = &v->cache_salt;
	uint64_t scope =
	    http_prompt_scope(m->e ? body + m->s : NULL, m->e ? m->e - m->s : 0,
			      salt->e ? body + salt->s : NULL, salt->e ? salt->e - salt->s : 0);
	http_prompt_scope_blocks(blocks, n, scope);
}

/* A spare array starts with the link to the next. */
uint64_t *llm_blocks_get(struct llm_spares *s)
{
	uint64_t *a = s->head;
	if (a) {
		s->head = (void *)(uintptr_t)a[0];
		return a;
	}
	return malloc(LLM_MAX_BLOCKS * sizeof(uint64_t));
}

void llm_blocks_put(struct llm_spares *s, uint64_t *blocks)
{
	if (!blocks)
		return;
	blocks[0] = (uint64_t)(uintptr_t)s->head;
	s->head = blocks;
}

void llm_spares_free(struct llm_spares *s)
{
	uint64_t *a;
	while ((a = s->head)) {
		s->head = (void *)(uintptr_t)a[0];
		free(a);
	}
}
