/*
 * prom.h - the Prometheus text format (version 0.0.4) of a metrics registry.
 */
#ifndef ACCELNET_OBS_PROM_H
#define ACCELNET_OBS_PROM_H

#include "obs/metrics.h"

#include <stdio.h>

/* Every named metric of <m>, in table order: HELP, TYPE, then one line per series. */
void prom_write(FILE *f, const struct metrics *m);

#endif
