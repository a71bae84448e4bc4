/*
 * shed.h - turning new client connections away as they are accepted, before a byte is read
 * or a TLS handshake begins: the limits that protect the process rather than a backend.
 *
 * Three limits, checked in this order, each cheap enough to run on every accept:
 *   - limits.max_buffer_memory: the bytes of buffers every worker has lent out (each
 *     worker's own counters, core/buf.h, read here without a lock). Past the budget the
 *     process is holding all it should; existing connections carry on (their buffers may
 *     still grow a little past it), new ones are closed, so memory never runs out under a
 *     flood of slow clients.
 *   - limits.accept_rate_per_ip: new connections per client address (an IPv6 client's /64),
 *     a GCRA shared by every worker (guard/ratelimit.h), one second's worth of burst.
 *   - limits.max_connections_per_ip: connections one address holds at once.
 * A connection turned away is closed at once without an answer (an answer would cost the
 * very read and write the limit is there to save), and counted in
 * accelnet_listener_shed_total{limit=...}.
 */
#ifndef ACCELNET_PROXY_SHED_H
#define ACCELNET_PROXY_SHED_H

#include "proxy/worker.h"

#include <stdint.h>

/*
 * May a client of address <key> (classify_client_key()) connect to <w> through <l>? 0: yes,
 * and *ip_slot is its place in the per-address count (taken; give it back when the
 * connection ends), or NULL when there is no per-address cap. Else > 0: turned away, and
 * already counted and logged (rate-limited); the caller closes it.
 */
int shed_check(struct worker *w, const struct listener *l, uint64_t key, const char *ip,
	       _Atomic uint32_t **ip_slot);

/* Bytes of buffers lent by every worker of <sh> now. */
uint64_t shed_buffer_bytes(const struct worker_shared *sh);

#endif
