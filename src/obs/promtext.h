/*
 * promtext.h - reading a few gauges out of another program's Prometheus text exposition
 * (what an inference engine's GET /metrics answers), summed over their label sets.
 *
 * We scrape engines (vLLM, SGLang, TGI) for their queue and batch sizes; an engine serving
 * several models, or running several ranks, writes one sample per label set, and the engine's
 * load is their sum. The reader knows only what it needs of the format (version 0.0.4, and
 * the OpenMetrics lines it shares): '#' lines and blank lines are skipped; a sample is a
 * metric name, optional labels in braces, a value, and an optional timestamp or exemplar.
 * Labels are skipped exactly: a '}' or '"' inside a quoted label value (escaped as \" or not)
 * does not end them; they are read only for a family that asks for some (below). A value is a float
 * as Go's strconv.ParseFloat writes it: digits with an exponent, NaN, +Inf, -Inf. A sample whose
 * value is not a finite number (NaN, Inf) is left out of the sum, as if absent.
 *
 * A line that is none of these makes the whole text malformed: the answer was not metrics
 * (an error page, garbage), and nothing of it is believed. Pure: no allocation, no state.
 */
#ifndef ACCELNET_OBS_PROMTEXT_H
#define ACCELNET_OBS_PROMTEXT_H

#include <stddef.h>

#define PROMTEXT_NAME_MAX 128 /* longer metric names are read, never matched */

#define PROMTEXT_LABELS_MAX 4 /* labels one want may read */

/* A label's value as written in the text (escapes and all: promtext_unescape()); p NULL when
 * the sample has no such label. */
struct promtext_span {
	const char *p;
	size_t n;
};

/*
 * One family to look for: <name> in, <sum> of its finite samples and their count out. With
 * <nlabels> (at most PROMTEXT_LABELS_MAX) names in <labels>, it also keeps, of its sample with
 * the largest finite value (the later of equal ones), that value in <top> and each label's
 * value in <label>: vLLM's info gauges carry their facts in labels and the time they were set
 * as their value, one sample per label set ever set, so the latest is the one that holds.
 * The labels of such a family are read strictly (name="value" pairs, separated by commas):
 * anything else there makes the text malformed.
 */
struct promtext_want {
	const char *name;
	double sum;
	unsigned samples;
	const char *const *labels;
	unsigned nlabels;
	double top;
	struct promtext_span label[PROMTEXT_LABELS_MAX];
};

/*
 * Read <len> bytes of exposition text and, for each sample of a family named in <want>
 * (exactly: "vllm:num_requests_waiting" does not match "vllm:num_requests_waiting_total"),
 * add its value to that entry (sums and counts start at 0 here). Returns the number of
 * sample lines in the text (of any family), or -EBADMSG for a malformed line; the sums are
 * then not to be used.
 */
int promtext_read(const char *text, size_t len, struct promtext_want *want, size_t nwant);

/* Decode a label value <v> (\\, \" and \n, as the format escapes them) into out[0..cap),
 * NUL-terminated, cut to cap - 1 bytes. Its length. */
size_t promtext_unescape(const struct promtext_span *v, char *out, size_t cap);

#endif
