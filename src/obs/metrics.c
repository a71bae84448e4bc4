/*
 * metrics.c - the registry: checking a feeder's table, laying its counters out in
 * cache-line-separated shards, handing shards to threads, and summing them when scraped.
 *
 * Every shard has the same layout: metric by metric, its series (a histogram's series take
 * HIST_BUCKETS counts and a sum each), rounded up to whole cache lines so no two shards share
 * one. Shards 0..nshards-1 are handed out by index, the next nspare are claimed by threads
 * on first use (metrics_shard_self), and the last is the shared one. A thread remembers its
 * claim for a few registries at once, keyed by the registry's generation so that a new
 * registry at an old address is never mistaken for the old one.
 */
#include "obs/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SELF_CACHE 4 /* registries a thread remembers its shard of */
#define WORDS_PER_LINE (METRICS_SHARD_ALIGN / sizeof(uint64_t))

struct metrics {
	struct metrics_config cfg;
	struct metrics_slot *slot;
	size_t stride; /* words per shard */
	size_t nall;   /* nshards + nspare + 1 (the shared one) */
	_Atomic uint64_t *words;
	struct metrics_shard *shards;
	atomic_size_t claimed;
	uint64_t gen;
};

static atomic_uint_fast64_t next_gen = 1;

static _Thread_local struct {
	uint64_t gen;
	struct metrics_shard *sh;
} self[SELF_CACHE];

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), t = strlen(tail);
	return n >= t && strcmp(s + n - t, tail) == 0;
}

/* Is <d> consistent with itself and the spaces of <cfg>? */
static int def_valid(const struct metrics_config *cfg, const struct metric_def *d)
{
	if (d->space >= cfg->nspaces || (d->nsub && (!d->sub_label || !d->sub_values)))
		return 0;
	if ((d->name && !d->help) || (d->type == METRIC_HISTOGRAM && d->nsub))
		return 0;
	if (d->name && d->type == METRIC_COUNTER && !ends_with(d->name, "_total"))
		return 0;
	if (d->name && d->unit && d->unit[0] && !strstr(d->name, d->unit))
		return 0;
	if (d->type == METRIC_GAUGE && !d->read && !d->read_str)
		return 0;
	if (d->json_as == MJ_STRING && !d->read_str)
		return 0;
	if (d->real && (d->type != METRIC_COUNTER || !d->read))
		return 0;
	if ((d->json_as == MJ_SUMMARY) != (d->json && d->type == METRIC_HISTOGRAM))
		return d->json_as == MJ_NONE && !d->json;
	return !d->json == (d->json_as == MJ_NONE);
}

static int spaces_valid(const struct metrics_config *cfg)
{
	for (size_t i = 0; i < cfg->nspaces; i++) {
		const struct metric_space *s = &cfg->spaces[i];
		if (s->nlabels > METRICS_MAX_LABELS ||
		    (s->n && s->nlabels && !s->values && !s->label))
			return 0;
		if (s->label && (s->parent >= 0 || !s->nlabels))
			return 0;
		if (s->parent >= (int)cfg->nspaces || s->parent == (int)i)
			return 0;
		if (s->parent >= 0 && ((s->n && !s->parent_of) || !s->json))
			return 0;
	}
	return 1;
}

/* Words of metric <d> in a shard. */
static size_t def_words(const struct metrics_config *cfg, const struct metric_def *d)
{
	size_t n = cfg->spaces[d->space].n * (d->nsub ? d->nsub : 1);
	switch (d->type) {
	case METRIC_COUNTER:
		return n;
	case METRIC_HISTOGRAM:
		return n * (HIST_BUCKETS + 1);
	default:
		return 0;
	}
}

int metrics_create(const struct metrics_config *cfg, struct metrics **out)
{
	if (!spaces_valid(cfg))
		return -EINVAL;
	for (size_t i = 0; i < cfg->ndefs; i++)
		if (!def_valid(cfg, &cfg->defs[i]))
			return -EINVAL;
	struct metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->gen = atomic_fetch_add(&next_gen, 1);
	m->nall = cfg->nshards + cfg->nspare + 1;
	m->slot = calloc(cfg->ndefs ? cfg->ndefs : 1, sizeof(*m->slot));
	m->shards = calloc(m->nall, sizeof(*m->shards));
	if (!m->slot || !m->shards)
		goto fail;
	size_t words = 0;
	for (size_t i = 0; i < cfg->ndefs; i++) {
		size_t n = def_words(cfg, &cfg->defs[i]);
		if (words + n > UINT32_MAX)
			goto fail;
		m->slot[i] = (struct metrics_slot){.off = (uint32_t)words, .n = (uint32_t)n};
		words += n;
	}
	m->stride = (words + WORDS_PER_LINE - 1) / WORDS_PER_LINE * WORDS_PER_LINE;
	if (!m->stride)
		m->stride = WORDS_PER_LINE;
	size_t bytes = m->stride * m->nall * sizeof(uint64_t);
	if (!(m->words = aligned_alloc(METRICS_SHARD_ALIGN, bytes)))
		goto fail;
	for (size_t i = 0; i < m->stride * m->nall; i++)
		atomic_init(&m->words[i], 0);
	for (size_t i = 0; i < m->nall; i++)
		m->shards[i] = (struct metrics_shard){
		    .v = m->words + i * m->stride, .slot = m->slot, .shared = i == m->nall - 1};
	*out = m;
	return 0;
fail:
	metrics_destroy(m);
	return -ENOMEM;
}

void metrics_destroy(struct metrics *m)
{
	if (!m)
		return;
	free(m->words);
	free(m->shards);
	free(m->slot);
	free(m);
}

struct metrics_shard *metrics_shard(struct metrics *m, size_t i)
{
	return i < m->cfg.nshards ? &m->shards[i] : NULL;
}

struct metrics_shard *metrics_shard_shared(struct metrics *m)
{
	return &m->shards[m->nall - 1];
}

/* Remember <sh> as this thread's shard of <m>, in a free entry or the oldest one. */
static void self_remember(const struct metrics *m, struct metrics_shard *sh)
{
	size_t i = 0;
	while (i < SELF_CACHE - 1 && self[i].gen && self[i].gen != m->gen)
		i++;
	if (self[i].gen && self[i].gen != m->gen) {
		memmove(&self[0], &self[1], sizeof(self[0]) * (SELF_CACHE - 1));
		i = SELF_CACHE - 1;
	}
	self[i].gen = m->gen;
	self[i].sh = sh;
}

struct metrics_shard *metrics_shard_self(struct metrics *m)
{
	for (size_t i = 0; i < SELF_CACHE; i++)
		if (self[i].gen == m->gen)
			return self[i].sh;
	size_t k = atomic_fetch_add(&m->claimed, 1);
	struct metrics_shard *sh =
	    k < m->cfg.nspare ? &m->shards[m->cfg.nshards + k] : metrics_shard_shared(m);
	self_remember(m, sh);
	return sh;
}

void metrics_thread_bind(struct metrics *m, struct metrics_shard *sh)
{
	self_remember(m, sh);
}

const struct metrics_config *metrics_config(const struct metrics *m)
{
	return &m->cfg;
}

const char *metrics_label(const struct metrics *m, unsigned sp, size_t series, size_t k)
{
	const struct metric_space *s = &m->cfg.spaces[sp];
	if (s->label)
		return s->label(m->cfg.ctx, series, k);
	return s->values[series * s->nlabels + k];
}

int metrics_series_live(const struct metrics *m, unsigned sp, size_t series)
{
	const struct metric_space *s = &m->cfg.spaces[sp];
	if (s->live && !s->live(m->cfg.ctx, series))
		return 0;
	return !s->label || s->label(m->cfg.ctx, series, 0) != NULL;
}

size_t metrics_series(const struct metrics *m, unsigned id)
{
	const struct metric_def *d = &m->cfg.defs[id];
	return m->cfg.spaces[d->space].n * (d->nsub ? d->nsub : 1);
}

/* Word <k> of metric <id>, summed over every shard. */
static uint64_t sum_word(const struct metrics *m, unsigned id, size_t k)
{
	uint64_t n = 0;
	size_t at = m->slot[id].off + k;
	for (size_t i = 0; i < m->nall; i++)
		n += atomic_load_explicit(&m->words[i * m->stride + at], memory_order_relaxed);
	return n;
}

uint64_t metrics_count(const struct metrics *m, unsigned id, size_t series)
{
	const struct metric_def *d = &m->cfg.defs[id];
	uint64_t n = d->read ? (uint64_t)d->read(m->cfg.ctx, series) : 0;
	return d->type == METRIC_COUNTER ? n + sum_word(m, id, series) : n;
}

double metrics_value(const struct metrics *m, unsigned id, size_t series)
{
	const struct metric_def *d = &m->cfg.defs[id];
	if (d->type == METRIC_COUNTER && d->real)
		return d->read(m->cfg.ctx, series) + (double)sum_word(m, id, series);
	if (d->type == METRIC_COUNTER)
		return (double)metrics_count(m, id, series);
	return d->read ? d->read(m->cfg.ctx, series) : 0;
}

void metrics_hist(const struct metrics *m, unsigned id, size_t series, struct hist_snap *out)
{
	const struct metric_def *d = &m->cfg.defs[id];
	memset(out, 0, sizeof(*out));
	if (d->type != METRIC_HISTOGRAM)
		return;
	size_t base = series * (HIST_BUCKETS + 1);
	for (size_t b = 0; b < HIST_BUCKETS; b++)
		out->count[b] = sum_word(m, id, base + b);
	out->sum_us = sum_word(m, id, base + HIST_BUCKETS);
	if (d->read_hist)
		d->read_hist(m->cfg.ctx, series, out);
}
