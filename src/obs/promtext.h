/*
 * promtext.h - reading a few gauges out of another program's Prometheus text exposition
 * (what an inference engine's GET /metrics answers), summed over their label sets.
 *
 * We scrape engines (vLLM, SGLang, TGI) for their queue and batch sizes; an engine serving
 * several models, or running several ranks, writes one sample per label set, and the engine's
 * load is their sum. The reader knows only what it needs of the format (version 0.0.4, and
 * the OpenMetrics lines it shares): '#' lines and blank lines are skipped; a sample is a
 * metric name, optional labels in braces, a value, and an optional timestamp or exemplar.
 * Labels are skipped, never interpreted, but skipped exactly: a '}' or '"' inside a quoted
 * label value (escaped as \" or not) does not end them. A value is a float as Go's
 * strconv.ParseFloat writes it: digits with an exponent, NaN, +Inf, -Inf. A sample whose
 * value is not a finite number (NaN, Inf) is left out of the sum, as if absent.
 *
 * A line that is none of these makes the whole text malformed: the answer was not metrics
 * (an error page, garbage), and nothing of it is believed. Pure: no allocation, no state.
 */
#ifndef ACCELNET_OBS_PROMTEXT_H
#define ACCELNET_OBS_PROMTEXT_H

#include <stddef.h>

#define PROMTEXT_NAME_MAX 128 /* longer metric names are read, never matched */

/* One family to look for: <name> in, <sum> of its finite samples and their count out. */
struct promtext_want {
	const char *name;
	double sum;
	unsigned samples;
};

/*
 * Read <len> bytes of exposition text and, for each sample of a family named in <want>
 * (exactly: "vllm:num_requests_waiting" does not match "vllm:num_requests_waiting_total"),
 * add its value to that entry (sums and counts start at 0 here). Returns the number of
 * sample lines in the text (of any family), or -EBADMSG for a malformed line; the sums are
 * then not to be used.
 */
int promtext_read(const char *text, size_t len, struct promtext_want *want, size_t nwant);

#endif
