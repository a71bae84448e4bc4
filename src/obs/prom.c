/*
 * prom.c - writing a registry as Prometheus text, walking the same table as /status.
 *
 * Each named metric becomes one family: "# HELP" and "# TYPE" lines, then one sample per
 * series with its labels from the metric's space (and its sub label). Counters are written
 * as integers, gauges with nine significant digits, histograms as cumulative buckets in
 * seconds with _sum and _count; a counter marked real (CPU seconds) is written like a gauge.
 * Label values are escaped (backslash, quote, newline) as the format asks. A series of a
 * space filled at run time that is not in use yet is left out (the family's HELP and TYPE
 * stay, with no samples, which Prometheus reads as nothing to scrape yet).
 */
#include "obs/prom.h"

static void put_escaped(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n') {
			fputs("\\n", f);
			continue;
		}
		fputc(*s, f);
	}
}

/* name="value",... of series <i> of <d>'s space, and its sub label <sub> when it has one. */
static void put_labels(FILE *f, const struct metrics *m, const struct metric_def *d, size_t i,
		       size_t sub)
{
	const struct metric_space *sp = &metrics_config(m)->spaces[d->space];
	for (size_t k = 0; k < sp->nlabels; k++) {
		fprintf(f, "%s%s=\"", k ? "," : "", sp->labels[k]);
		const char *v = metrics_label(m, d->space, i, k);
		put_escaped(f, v ? v : "");
		fputc('"', f);
	}
	if (d->nsub) {
		fprintf(f, "%s%s=\"", sp->nlabels ? "," : "", d->sub_label);
		put_escaped(f, d->sub_values[sub]);
		fputc('"', f);
	}
}

static int has_labels(const struct metrics *m, const struct metric_def *d)
{
	return d->nsub || metrics_config(m)->spaces[d->space].nlabels;
}

/* One histogram series: cumulative buckets, sum and count, in seconds. */
static void put_hist(FILE *f, const struct metrics *m, unsigned id, size_t i)
{
	const struct metric_def *d = &metrics_config(m)->defs[id];
	struct hist_snap h;
	unsigned long long cum = 0;
	metrics_hist(m, id, i, &h);
	for (size_t b = 0; b < HIST_BUCKETS; b++) {
		cum += h.count[b];
		fprintf(f, "%s_bucket{", d->name);
		put_labels(f, m, d, i, 0);
		if (b < HIST_BUCKETS - 1)
			fprintf(f, "%sle=\"%g\"} %llu\n", has_labels(m, d) ? "," : "",
				hist_bounds_ms[b] / 1000.0, cum);
		else
			fprintf(f, "%sle=\"+Inf\"} %llu\n", has_labels(m, d) ? "," : "", cum);
	}
	const char *sfx[2] = {"_sum", "_count"};
	for (int k = 0; k < 2; k++) {
		fprintf(f, "%s%s", d->name, sfx[k]);
		if (has_labels(m, d)) {
			fputc('{', f);
			put_labels(f, m, d, i, 0);
			fputc('}', f);
		}
		if (k == 0)
			fprintf(f, " %.6f\n", h.sum_us / 1e6);
		else
			fprintf(f, " %llu\n", cum);
	}
}

static const char *type_name(enum metric_type t)
{
	return t == METRIC_COUNTER ? "counter" : t == METRIC_GAUGE ? "gauge" : "histogram";
}

static void put_family(FILE *f, const struct metrics *m, unsigned id)
{
	const struct metric_def *d = &metrics_config(m)->defs[id];
	size_t nsub = d->nsub ? d->nsub : 1;
	size_t n = metrics_series(m, id) / nsub;
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name, type_name(d->type));
	for (size_t i = 0; i < n; i++) {
		if (!metrics_series_live(m, d->space, i))
			continue;
		if (d->type == METRIC_HISTOGRAM) {
			put_hist(f, m, id, i);
			continue;
		}
		for (size_t sub = 0; sub < nsub; sub++) {
			fputs(d->name, f);
			if (has_labels(m, d)) {
				fputc('{', f);
				put_labels(f, m, d, i, sub);
				fputc('}', f);
			}
			if (d->type == METRIC_COUNTER && !d->real)
				fprintf(f, " %llu\n",
					(unsigned long long)metrics_count(m, id, i * nsub + sub));
			else
				fprintf(f, " %.9g\n", metrics_value(m, id, i * nsub + sub));
		}
	}
}

void prom_write(FILE *f, const struct metrics *m)
{
	const struct metrics_config *cfg = metrics_config(m);
	for (unsigned id = 0; id < cfg->ndefs; id++)
		if (cfg->defs[id].name)
			put_family(f, m, id);
}
