/*
 * json.h - the /status JSON of a metrics registry, and the dashboard's feed.
 */
#ifndef ACCELNET_OBS_JSON_H
#define ACCELNET_OBS_JSON_H

#include "obs/metrics.h"

#include <stdio.h>

/*
 * {"SPACE":[{...},...],...} followed by a newline: one array per root space, one object per
 * series holding its metrics that have a /status key (in table order), then the arrays of
 * the spaces under it.
 */
void json_write_status(FILE *f, const struct metrics *m);
/*
 * The dashboard's feed: the /status document with "bounds_ms" (the finite bucket bounds) first
 * and, in every histogram, "sum_ms" and "buckets" (counts per bucket, the last one +Inf).
 */
void json_write_feed(FILE *f, const struct metrics *m);
/* <s> as a JSON string, quotes included. */
void json_write_string(FILE *f, const char *s);

#endif
