/*
 * health.h - active health checks, run on the main thread's loop.
 *
 * For every backend of a pool with a health: block, a probe connects every interval_ms,
 * sends GET <path>, and reads the status line: 2xx and 3xx are success; a refused or timed
 * out connection, a closed connection or any other status is failure. <fall> failures in a
 * row take an up backend out of rotation, <rise> successes in a row bring it back (and end
 * any passive mark). Transitions are logged.
 */
#ifndef ACCELNET_CONTROL_HEALTH_H
#define ACCELNET_CONTROL_HEALTH_H

#include "core/loop.h"
#include "runtime/pool.h"

struct health;

int health_start(struct loop *loop, struct runtime *rt, struct health **out);
void health_stop(struct health *h);

#endif
