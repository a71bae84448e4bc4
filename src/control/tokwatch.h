/*
 * tokwatch.h - the tick that judges each model's tokenizer (runtime/tokhealth.h): once a
 * second, on the main thread's loop beside the health checks, it sums each model's prompts
 * tried and failed from the registry's per-worker counters (accelnet_model_prompts_total:
 * tokens and encode_failed) and steps its tokhealth, which GET /readyz, /status and
 * /metrics read. A model turning failing, and back, is logged. Never on the request path.
 */
#ifndef ACCELNET_CONTROL_TOKWATCH_H
#define ACCELNET_CONTROL_TOKWATCH_H

#include "core/loop.h"
#include "runtime/pool.h"

struct tokwatch;

/* Start ticking for <rt>'s models (none: *out is still set, with nothing to do). 0 or
 * -ENOMEM. */
int tokwatch_start(struct loop *loop, struct runtime *rt, struct tokwatch **out);
void tokwatch_stop(struct tokwatch *t);

#endif
