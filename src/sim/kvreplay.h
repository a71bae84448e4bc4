/*
 * kvreplay.h - the simulated engine's KV-event replay socket, as vLLM's ZmqEventPublisher
 * keeps one (vllm/distributed/kv_events.py, replay_endpoint and buffer_steps of
 * --kv-events-config): the last <steps> batches it numbered, kept as sent, and a ZeroMQ
 * ROUTER bound on an endpoint of its own that answers a subscriber who lost some.
 *
 * The wire, as vLLM's: a request is a DEALER's [empty, start] (a REQ socket adds the empty
 * frame itself), the ROUTER seeing [identity, empty, start]: start the big-endian number
 * of the first batch wanted. Any other shape is ignored, unanswered. The answer is one
 * message per kept batch numbered start or later, oldest first, [identity, empty, seq
 * (8 bytes, big-endian), payload] -- the subscriber sees [empty, seq, payload] -- then the
 * end [identity, empty, ff ff ff ff ff ff ff ff (-1), empty payload]. A start older than
 * what is kept gets what is kept: the subscriber sees where it begins. As vLLM's ROUTER,
 * one whose queue to that subscriber is full (1000 messages) drops the rest silently.
 */
#ifndef ACCELNET_SIM_KVREPLAY_H
#define ACCELNET_SIM_KVREPLAY_H

#include <stddef.h>
#include <stdint.h>

#define KVREPLAY_STEPS_DEFAULT 10000 /* vLLM's buffer_steps */
#define KVREPLAY_STEPS_MAX 1000000

struct kvreplay;

/* Bind the ROUTER on <endpoint> in ZeroMQ context <ctx>, keeping <steps> batches (0: none
 * kept, every answer is the end alone). 0 or -errno, *why the reason in words. */
int kvreplay_open(void *ctx, const char *endpoint, unsigned steps, struct kvreplay **out,
		  const char **why);
void kvreplay_close(struct kvreplay *r);

/* Keep batch <seq> (its payload <data>, <len> bytes), the oldest kept going when full.
 * 0 or -ENOMEM (then it is not kept). */
int kvreplay_keep(struct kvreplay *r, uint64_t seq, const void *data, size_t len);

/* The descriptor that turns readable (edge-style, ZeroMQ's ZMQ_FD) when requests may wait,
 * and what answers them all. */
int kvreplay_fd(const struct kvreplay *r);
void kvreplay_serve(struct kvreplay *r);

const char *kvreplay_endpoint(const struct kvreplay *r);
unsigned long kvreplay_requests(const struct kvreplay *r); /* answered */

#endif
