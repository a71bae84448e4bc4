/*
 * sim.h - the simulated accelerator server (`accelnet sim`).
 *
 * It behaves like an inference server on one accelerator: at most <slots> requests are in
 * service at once and the rest wait inside it in arrival order, so its latency grows with
 * its own queue. A completion takes latency_ms (+- jitter) to the first token, then one
 * token every token_ms; with "stream": true the tokens arrive as Server-Sent Events. A
 * request can fail at random (fail_rate) with a 500. With stall_every_ms, the accelerator
 * freezes for stall_ms at the end of every such period (a GC pause, a thermal throttle, a
 * neighbour's burst): nothing it serves progresses meanwhile. Each streamed event carries
 * "sent_ns", the sender's CLOCK_MONOTONIC, so a client on the same machine can measure what
 * a proxy adds per token. With prefix_cache entries, it keeps the prompt prefixes (the first
 * 256 bytes of "prompt" or "messages") it served last, like an inference server's KV prefix
 * cache: a request whose prefix is there gets its first token after cache_hit_ms instead of
 * latency_ms. Every response carries
 * X-Served-By: NAME. GET /health is 200 while it runs; GET /sim/stats reports its counters
 * as JSON; every other path answers 200 with a one-line description.
 */
#ifndef ACCELNET_SIM_SIM_H
#define ACCELNET_SIM_SIM_H

#include "core/loop.h"
#include "net/addr.h"

struct sim_opts {
	struct net_addr addr;
	char name[64];
	unsigned slots;
	unsigned latency_ms;
	double jitter; /* 0..1: latency varies by up to this fraction either way */
	unsigned tokens;
	unsigned token_ms;
	double fail_rate;		   /* 0..1 */
	unsigned stall_ms, stall_every_ms; /* freeze for stall_ms at the end of every period */
	unsigned prefix_cache;		   /* prompt prefixes remembered; 0: none */
	unsigned cache_hit_ms;		   /* time to first token when the prefix is cached */
};

struct sim;

void sim_opts_default(struct sim_opts *o);
/* Start serving on <loop>. 0 or -errno (e.g. -EADDRINUSE). */
int sim_start(struct loop *loop, const struct sim_opts *o, struct sim **out);
int sim_port(const struct sim *s);
void sim_stop(struct sim *s);

#endif
