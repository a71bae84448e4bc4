/*
 * metrics.h - one metrics registry: every metric declared once, counted per thread, summed
 * when scraped, and written from that one list as Prometheus text (prom.h) and /status JSON
 * (json.h).
 *
 * A feeder (the proxy, later xfer) declares its metrics in one const table of struct
 * metric_def, indexed by its own enum: name, type, help, unit, the label space of its series,
 * its key in /status, and for live state a read callback. The registry knows nothing of pools
 * or backends: a label space is a list of series with their label values (pool "gpu", backend
 * "10.0.0.1:9000"), and may hang under a parent space (backends under pools), which is how
 * the JSON writer nests them. A space whose label values are met only at run time (tenants)
 * gives a label callback instead of values: it answers NULL for a series not in use yet, and
 * the writers leave that series out (obs/names.h keeps such values, bounded). A space may
 * also say, through its live callback, that a series is not in use now (a backend slot kept
 * empty for later): the writers leave it out too.
 *
 * Counters and histograms live in shards, one per counting thread, each on its own cache
 * lines. The thread that owns a shard bumps it with a plain relaxed load and store (no
 * read-modify-write, no line shared with another writer); readers load the same words
 * relaxed and add the shards up, so a scrape costs the workers nothing. A thread without a
 * shard of its own (the main thread, a health check, an xfer helper) uses
 * metrics_shard_self(), which claims a spare shard on first use, or falls back to the one
 * shared shard whose adds are atomic read-modify-writes.
 *
 * Gauges are live shared state (in-flight counts, up/down, EWMA, queue length) and are never
 * stored here: their read callback is asked at scrape time. A counter or histogram may also
 * carry a read callback while some of its increments still go to an older field: its value is
 * then the shards' sum plus what the callback reads, so call sites can move over one by one.
 */
#ifndef ACCELNET_OBS_METRICS_H
#define ACCELNET_OBS_METRICS_H

#include "core/check.h"
#include "obs/hist.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_LABELS 3 /* per label space */
#define METRICS_SHARD_ALIGN 64

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

/* How a metric shows in /status. */
enum metric_json {
	MJ_NONE,    /* not in /status */
	MJ_UINT,    /* an integer */
	MJ_BOOL,    /* true when the value is not 0 */
	MJ_FIXED3,  /* a number with three decimals, after json_scale */
	MJ_STRING,  /* read_str's answer */
	MJ_SUMMARY, /* histograms: {"count":N,"p50":MS,"p99":MS} */
};

/* Label <k> of series <series> of a space filled at run time, or NULL: not in use (yet). */
typedef const char *(*metric_label_fn)(const void *ctx, size_t series, size_t k);

/*
 * A label space: <n> series, each with <nlabels> label values (values[i * nlabels + k] is
 * label k of series i, or label(ctx, i, k) when label is given). A space with a parent hangs
 * under it in /status: series i sits inside the parent's series parent_of[i], in an array
 * called <json>. A root space (parent -1) is a top-level array called <json>. Strings are
 * the caller's and must outlive the registry (a label callback's, the registry's readers).
 */
struct metric_space {
	const char *json;
	const char *labels[METRICS_MAX_LABELS];
	size_t nlabels;
	size_t n;
	const char *const *values;
	int parent;
	const size_t *parent_of;
	metric_label_fn label; /* instead of values: labels filled in later (root spaces only) */
	/* may be NULL: is series i in use now? (a slot kept empty for later); the writers leave
	 * the others out */
	int (*live)(const void *ctx, size_t series);
};

/* Live state, read at scrape time: <ctx> is metrics_config.ctx. */
typedef double (*metric_read_fn)(const void *ctx, size_t series);
typedef void (*metric_read_hist_fn)(const void *ctx, size_t series, struct hist_snap *add);
typedef const char *(*metric_read_str_fn)(const void *ctx, size_t series);

/*
 * One metric. <name> is the Prometheus family (NULL: /status only); a counter's name ends in
 * _total, and <unit> (seconds, requests, ...) is part of the name when it has one. A metric
 * may split each series of its space by one more label, <sub_label>, with the fixed values
 * <sub_values>: its series are then space_series * nsub + sub. <json> is its key in /status
 * ("group.key" puts it inside an object "group" of its series' object).
 */
struct metric_def {
	const char *name;
	enum metric_type type;
	const char *help;
	const char *unit;
	unsigned space;
	const char *sub_label;
	const char *const *sub_values;
	unsigned nsub;
	const char *json;
	enum metric_json json_as;
	double json_scale;	       /* MJ_FIXED3: value times this; 0 means 1 */
	metric_read_fn read;	       /* gauges: the value; counters: added to the shards' sum */
	metric_read_hist_fn read_hist; /* histograms: added to the shards' counts */
	metric_read_str_fn read_str;   /* MJ_STRING */
	int real; /* a counter in seconds or the like: read's value, written as a real number */
};

struct metrics_config {
	const struct metric_def *defs;
	size_t ndefs;
	const struct metric_space *spaces;
	size_t nspaces;
	size_t nshards; /* private shards handed out by index: one per worker thread */
	size_t nspare;	/* more, claimed by metrics_shard_self() on a thread's first use */
	const void *ctx;
};

struct metrics;

/* Where one metric's series start in a shard, and how many there are (buckets included). */
struct metrics_slot {
	uint32_t off, n;
};

/* A thread's counters. Read-only after creation except the words of v. */
struct metrics_shard {
	_Atomic uint64_t *v;
	const struct metrics_slot *slot; /* by metric id */
	int shared;			 /* written by many threads: atomic adds */
};

/*
 * Build a registry for <cfg> (its tables are referenced, not copied). 0, -EINVAL for a table
 * that contradicts itself (a space out of range, a counter not ending in _total, a gauge
 * without read), or -ENOMEM.
 */
int metrics_create(const struct metrics_config *cfg, struct metrics **out);
void metrics_destroy(struct metrics *m);

/* Private shard <i> (< cfg.nshards), for one thread only; NULL beyond. */
struct metrics_shard *metrics_shard(struct metrics *m, size_t i);
/* The shard every thread may write (atomic adds): for slow paths. */
struct metrics_shard *metrics_shard_shared(struct metrics *m);
/*
 * The calling thread's shard of <m>: the one it bound, else a spare claimed now and kept for
 * the thread's life, else (spares used up) the shared one.
 */
struct metrics_shard *metrics_shard_self(struct metrics *m);
/* From now on metrics_shard_self(m) answers <sh> on this thread (a worker's own shard). */
void metrics_thread_bind(struct metrics *m, struct metrics_shard *sh);

/* Count <n> more of counter <id>, series <series>, in <sh>. */
static inline void metrics_add(struct metrics_shard *sh, unsigned id, size_t series, uint64_t n)
{
	const struct metrics_slot *s = &sh->slot[id];
	ASSERT(series < s->n);
	_Atomic uint64_t *p = &sh->v[s->off + series];
	if (sh->shared)
		atomic_fetch_add_explicit(p, n, memory_order_relaxed);
	else
		atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + n,
				      memory_order_relaxed);
}

/* One sample of <us> microseconds for histogram <id>, series <series>. */
static inline void metrics_observe(struct metrics_shard *sh, unsigned id, size_t series,
				   uint64_t us)
{
	size_t base = series * (HIST_BUCKETS + 1);
	metrics_add(sh, id, base + hist_bucket(us), 1);
	metrics_add(sh, id, base + HIST_BUCKETS, us);
}

/* <n> samples of <us> microseconds each (events that came together). */
static inline void metrics_observe_n(struct metrics_shard *sh, unsigned id, size_t series,
				     uint64_t us, uint64_t n)
{
	size_t base = series * (HIST_BUCKETS + 1);
	metrics_add(sh, id, base + hist_bucket(us), n);
	metrics_add(sh, id, base + HIST_BUCKETS, us * n);
}

/* What a reader sees: the registry's tables. */
const struct metrics_config *metrics_config(const struct metrics *m);
/* Label <k> of series <series> of space <sp>; NULL when the series is not in use yet. */
const char *metrics_label(const struct metrics *m, unsigned sp, size_t series, size_t k);
/* Is series <series> of space <sp> in use (a fixed space's always are)? */
int metrics_series_live(const struct metrics *m, unsigned sp, size_t series);
/* Series of metric <id> (its space's, times nsub). */
size_t metrics_series(const struct metrics *m, unsigned id);
/* A counter's total over the shards (plus its read callback). */
uint64_t metrics_count(const struct metrics *m, unsigned id, size_t series);
/* A gauge's reading, or a counter's total as a number. */
double metrics_value(const struct metrics *m, unsigned id, size_t series);
/* A histogram's counts over the shards (plus its read callback). */
void metrics_hist(const struct metrics *m, unsigned id, size_t series, struct hist_snap *out);

#endif
