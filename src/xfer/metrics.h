/*
 * metrics.h - the receiving daemon's counters in the metrics registry, and --metrics.
 *
 * Each metric of `xfer serve` is declared once, in metrics.c's table for the registry of
 * obs/metrics.h, which writes the Prometheus text; the shared HTTP/1 server (http/server.h)
 * answers GET /metrics with it on a thread of its own, running its own event loop, so an idle
 * or slow scraper holds up nothing but itself.
 */
#ifndef ACCELNET_XFER_METRICS_H
#define ACCELNET_XFER_METRICS_H

#include <stddef.h>

struct xfer_server;
struct xfer_metrics;

/* Listen on <addr> ("HOST:PORT") and serve s's metrics until *stop turns non-zero: 0 with
 * *out, or -errno with the reason in <err>. xfer_metrics_stop() waits for the thread and
 * frees everything. */
int xfer_metrics_start(struct xfer_server *s, const char *addr, volatile int *stop,
		       struct xfer_metrics **out, char *err, size_t errlen);
void xfer_metrics_stop(struct xfer_metrics *xm);

#endif
