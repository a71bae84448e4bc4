/*
 * accesslog.h - the access log: one line per request, written off the worker threads.
 *
 * Each worker owns one ring (struct alog_ring): a bounded single-producer, single-consumer
 * queue of fixed-size records. The worker claims a slot, fills it from its exchange (no
 * allocation, no lock) and commits it; when the ring is full the record is dropped and
 * counted on that ring (written by its worker only, so no atomic is shared by every
 * worker). One writer thread drains every ring, formats the records (JSON lines or the
 * combined format) into one buffer and writes it with one write(2) per batch, or one
 * syslog datagram per line. A slow disk fills the rings, never stalls a request.
 *
 * The writer looks at the rings every few milliseconds when they were empty: the workers
 * never wake it, which would cost them a system call per request.
 */
#ifndef ACCELNET_OBS_ACCESSLOG_H
#define ACCELNET_OBS_ACCESSLOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum alog_format { ALOG_JSON, ALOG_COMBINED };

#define ALOG_RING_SLOTS 1024 /* a power of two */
#define ALOG_PATH_MAX 255    /* longer request targets are cut (the line says so: "...") */
#define ALOG_UA_MAX 127

/* One request, as the log line shows it. Strings are NUL-terminated, cut to fit. */
struct alog_rec {
	uint64_t time_us; /* the exchange ended (Unix time) */
	uint64_t bytes_in, bytes_out;
	uint32_t queue_us, connect_us, ttfb_us, total_us; /* UINT32_MAX: did not happen */
	uint32_t tokens, gap_us;			  /* streamed events, their mean gap */
	uint32_t upstream_us; /* first dispatch to the end, when a backend answered */
	uint64_t prompt_tokens, completion_tokens; /* with has_usage */
	uint64_t cost_micros;			   /* with has_cost: at prices:, micro-units */
	int status;				   /* 0: the connection was cut */
	int route;				   /* index into routes, -1: none */
	uint8_t path_cut, target_cut, has_usage, has_cost;
	char route_name[64];		/* routes[].name, or its index; "" with route -1 */
	char model[128];		/* the body's "model" when read; "" */
	char cache[16];			/* what the cache did (Cache-Status); "" */
	char target[ALOG_PATH_MAX + 1]; /* the target forwarded when routes.rewrite changed it */
	char reqid[65];
	char trace_id[33]; /* the W3C trace id, "" for a request refused before it was read */
	char span_id[17];  /* the proxy's span: the parent-id the backend saw */
	char client[48];
	char tenant[65];
	char method[16];
	char protocol[12]; /* HTTP/1.0, HTTP/1.1, HTTP/2; "" for a refused request line */
	char pool[48];
	char backend[72];
	char prefill_backend[72]; /* pools.disaggregation: where it was prefilled; "" */
	char path[ALOG_PATH_MAX + 1];
	char ua[ALOG_UA_MAX + 1];
	/* why a feature cut the response off (a literal: it outlives the exchange), or NULL */
	const char *cut;
};

struct alog_ring {
	_Alignas(64) atomic_uint_fast32_t head; /* next slot to fill: the worker's */
	uint64_t dropped_local;			/* the worker's: records it could not push */
	atomic_uint_fast64_t dropped;		/* ... published for readers */
	_Alignas(64) atomic_uint_fast32_t tail; /* next slot to read: the writer's */
	_Alignas(64) struct alog_rec slot[ALOG_RING_SLOTS];
};

/* Producer side: a free slot to fill, or NULL (full: counted as dropped). */
struct alog_rec *alog_ring_claim(struct alog_ring *r);
/* ... and make the filled slot visible to the writer. */
void alog_ring_commit(struct alog_ring *r);
/* Consumer side: the oldest record, in its slot, or NULL when empty; ... */
const struct alog_rec *alog_ring_peek(struct alog_ring *r);
/* ... and its slot given back once read. */
void alog_ring_release(struct alog_ring *r);
/* Both: copy the oldest record into <out>; 1, or 0 when empty. */
int alog_ring_take(struct alog_ring *r, struct alog_rec *out);

/* One line for <r> (newline included) into out[0..cap); its length, or 0 when it does not
 * fit. Strings are escaped: no byte of a request can end or break the line. */
size_t alog_format_line(const struct alog_rec *r, enum alog_format f, char *out, size_t cap);

struct accesslog;

/*
 * Open the log at <path> (a file opened O_APPEND and created 0640, "stderr" or "syslog":
 * datagrams to the unix socket <syslog_socket>, NULL for /dev/log) with one ring per
 * producer (<nrings>) and start the writer thread. 0 or -errno, with <err> filled.
 */
int accesslog_open(struct accesslog **out, const char *path, const char *syslog_socket,
		   enum alog_format f, unsigned nrings, char *err, size_t errlen);
/* Ring <i>, for producer <i> only. */
struct alog_ring *accesslog_ring(struct accesslog *l, unsigned i);
/* Rotation (SIGUSR1): the writer opens the file path (or the syslog socket) again before its
 * next batch. */
void accesslog_reopen(struct accesslog *l);
/* Lines dropped so far: records no ring had room for, and lines a write failed to put out. */
uint64_t accesslog_dropped(const struct accesslog *l);
/* Write what the rings hold, stop the writer and free everything. NULL is fine. */
void accesslog_close(struct accesslog *l);

#endif
