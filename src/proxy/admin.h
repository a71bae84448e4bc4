/*
 * admin.h - the admin endpoint (admin.address): GET /status (JSON: pools, backends, their
 * health and load) and GET /metrics (Prometheus text format). Served on the main thread;
 * it reads the shared runtime's atomics and never blocks a worker.
 */
#ifndef ACCELNET_PROXY_ADMIN_H
#define ACCELNET_PROXY_ADMIN_H

#include "core/loop.h"
#include "proxy/runtime.h"

struct admin;

int admin_start(struct loop *loop, const struct net_addr *addr, struct runtime *rt,
		struct admin **out);
void admin_stop(struct admin *a);

#endif
