/*
 * runtime.h - building the runtime of one generation of the config (struct runtime,
 * runtime/pool.h): its pools and their backends' slots, their queues, TLS contexts,
 * prefix indexes and model sets, the response cache, and the registry of its metrics
 * (runtime/proxy_metric.h); and taking it down again.
 */
#ifndef ACCELNET_RUNTIME_RUNTIME_H
#define ACCELNET_RUNTIME_RUNTIME_H

struct conf;
struct runtime;

/* 0 or -errno (-ENOMEM, or a pool's TLS context that cannot be built: logged). */

int runtime_create(const struct conf *conf, struct runtime **out);
void runtime_destroy(struct runtime *rt);

#endif
