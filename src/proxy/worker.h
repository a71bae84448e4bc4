/*
 * worker.h - the life of a worker thread, as proxy.c drives it.
 */
#ifndef ACCELNET_PROXY_WORKER_H
#define ACCELNET_PROXY_WORKER_H

#include "proxy/proxy-t.h"

#include <stddef.h>

/*
 * Set up <w>: loop, buffers, and its own listening sockets; it holds at most <max_sessions>
 * client connections at once. 0 or -errno with <err> filled.
 */
int worker_init(struct worker *w, struct proxy *px, unsigned id, unsigned max_sessions,
		char *err, size_t errlen);
int worker_start(struct worker *w);
/* Ask <w> (from another thread) to stop accepting and finish what it has. */
void worker_request_drain(struct worker *w);
/* After the thread has ended (or never started): free everything. */
void worker_destroy(struct worker *w);

#endif
