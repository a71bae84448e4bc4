/*
 * json.c - writing a registry as the /status document, walking the same table as the
 * Prometheus writer.
 *
 * The document's shape comes from the label spaces: a root space is a top-level array, a
 * space with a parent is an array inside each of the parent's objects (backends inside
 * their pool). A metric's /status key may name a group ("queue.length"): consecutive
 * metrics of one group share one object. A metric split by a sub label (responses by status
 * class) is an object keyed by the sub values; a histogram is a summary of count, median and
 * 99th percentile in milliseconds (bucket bounds; -1 beyond the last bound). A series of a
 * space filled at run time (tenants) shows once it is in use.
 *
 * The dashboard's feed (json_write_feed) is the same document with each histogram's bucket
 * counts and sum added, so that the page can take percentiles over the last few seconds from
 * two readings, as Prometheus does with rate(): cumulative summaries flatten as time goes on.
 */
#include "obs/json.h"

#include <string.h>

/* Where the writer is inside one series' object. */
struct obj {
	int first;	   /* nothing written yet at the current level */
	const char *group; /* the open group, or NULL */
	size_t glen;
};

void json_write_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* Open, close or switch the group for key <key>; returns the key's own name. */
static const char *enter_group(FILE *f, struct obj *o, const char *key)
{
	const char *dot = strchr(key, '.');
	size_t glen = dot ? (size_t)(dot - key) : 0;
	if (o->group && (!dot || glen != o->glen || strncmp(o->group, key, glen))) {
		fputc('}', f);
		o->group = NULL;
		o->first = 0;
	}
	if (dot && !o->group) {
		fprintf(f, "%s\"%.*s\":{", o->first ? "" : ",", (int)glen, key);
		o->group = key;
		o->glen = glen;
		o->first = 1;
	}
	return dot ? dot + 1 : key;
}

static void put_scalar(FILE *f, const struct metrics *m, unsigned id, size_t series)
{
	const struct metric_def *d = &metrics_config(m)->defs[id];
	switch (d->json_as) {
	case MJ_BOOL:
		fputs(metrics_value(m, id, series) != 0 ? "true" : "false", f);
		break;
	case MJ_FIXED3:
		fprintf(f, "%.3f",
			metrics_value(m, id, series) * (d->json_scale ? d->json_scale : 1));
		break;
	case MJ_STRING:
		json_write_string(f, d->read_str(metrics_config(m)->ctx, series));
		break;
	default:
		fprintf(f, "%llu",
			d->type == METRIC_COUNTER
			    ? (unsigned long long)metrics_count(m, id, series)
			    : (unsigned long long)metrics_value(m, id, series));
	}
}

/* A histogram's summary; with <buckets>, its counts per bucket (not cumulative) and sum. */
static void put_summary(FILE *f, const struct hist_snap *h, int buckets)
{
	fprintf(f, "{\"count\":%llu,\"p50\":%g,\"p99\":%g", (unsigned long long)hist_total(h),
		hist_quantile_ms(h, 0.5), hist_quantile_ms(h, 0.99));
	if (buckets) {
		fprintf(f, ",\"sum_ms\":%.3f,\"buckets\":[", (double)h->sum_us / 1000.0);
		for (size_t i = 0; i < HIST_BUCKETS; i++)
			fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)h->count[i]);
		fputc(']', f);
	}
	fputc('}', f);
}

static void put_value(FILE *f, const struct metrics *m, unsigned id, size_t series, int buckets)
{
	const struct metric_def *d = &metrics_config(m)->defs[id];
	if (d->json_as == MJ_SUMMARY) {
		struct hist_snap h;
		metrics_hist(m, id, series, &h);
		put_summary(f, &h, buckets);
		return;
	}
	if (!d->nsub) {
		put_scalar(f, m, id, series);
		return;
	}
	fputc('{', f);
	for (size_t k = 0; k < d->nsub; k++) {
		fputs(k ? "," : "", f);
		json_write_string(f, d->sub_values[k]);
		fputc(':', f);
		put_scalar(f, m, id, series * d->nsub + k);
	}
	fputc('}', f);
}

static void put_array(FILE *f, const struct metrics *m, unsigned sp, int parent, size_t pseries,
		      int buckets);

/* The object of series <i> of space <sp>: its metrics, then the spaces under it. */
static void put_object(FILE *f, const struct metrics *m, unsigned sp, size_t i, int buckets)
{
	const struct metrics_config *cfg = metrics_config(m);
	struct obj o = {.first = 1};
	fputc('{', f);
	for (unsigned id = 0; id < cfg->ndefs; id++) {
		const struct metric_def *d = &cfg->defs[id];
		if (!d->json || d->space != sp)
			continue;
		const char *key = enter_group(f, &o, d->json);
		fprintf(f, "%s", o.first ? "" : ",");
		json_write_string(f, key);
		fputc(':', f);
		put_value(f, m, id, i, buckets);
		o.first = 0;
	}
	enter_group(f, &o, "");
	for (unsigned c = 0; c < cfg->nspaces; c++)
		if (cfg->spaces[c].parent == (int)sp) {
			fprintf(f, "%s", o.first ? "" : ",");
			put_array(f, m, c, (int)sp, i, buckets);
			o.first = 0;
		}
	fputc('}', f);
}

/* "name":[...] of the series of <sp> (those under series <pseries> of its parent). */
static void put_array(FILE *f, const struct metrics *m, unsigned sp, int parent, size_t pseries,
		      int buckets)
{
	const struct metric_space *s = &metrics_config(m)->spaces[sp];
	int first = 1;
	json_write_string(f, s->json);
	fputs(":[", f);
	for (size_t i = 0; i < s->n; i++) {
		if ((parent >= 0 && s->parent_of[i] != pseries) || !metrics_series_live(m, sp, i))
			continue;
		fputs(first ? "" : ",", f);
		put_object(f, m, sp, i, buckets);
		first = 0;
	}
	fputc(']', f);
}

static void put_document(FILE *f, const struct metrics *m, int buckets)
{
	const struct metrics_config *cfg = metrics_config(m);
	int first = 1;
	fputc('{', f);
	if (buckets) {
		fputs("\"bounds_ms\":[", f);
		for (size_t i = 0; i < HIST_BUCKETS - 1; i++)
			fprintf(f, "%s%g", i ? "," : "", hist_bounds_ms[i]);
		fputc(']', f);
		first = 0;
	}
	for (unsigned sp = 0; sp < cfg->nspaces; sp++)
		if (cfg->spaces[sp].parent < 0 && cfg->spaces[sp].json) {
			fputs(first ? "" : ",", f);
			put_array(f, m, sp, -1, 0, buckets);
			first = 0;
		}
	fputs("}\n", f);
}

void json_write_status(FILE *f, const struct metrics *m)
{
	put_document(f, m, 0);
}

void json_write_feed(FILE *f, const struct metrics *m)
{
	put_document(f, m, 1);
}
