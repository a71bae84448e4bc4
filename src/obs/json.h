/*
 * json.h - the /status JSON of a metrics registry.
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
/* <s> as a JSON string, quotes included. */
void json_write_string(FILE *f, const char *s);

#endif
