/*
 * discover.h - service discovery: backends given by a DNS name (backends[].discover),
 * re-resolved on the main thread's loop with c-ares while the proxy runs.
 *
 * Each such name owns max_backends slots of its pool, made at start (runtime/runtime.c), so no
 * runtime array ever grows and no worker ever sees a backend freed. discover: a asks the
 * name's A and AAAA records, at the configured port; discover: srv asks its SRV records and
 * then each target's addresses, taking the records of the best (lowest) priority with their
 * ports and weights. An answer fills a free slot per new address, keeps the slots whose
 * address is still there, and drains the rest (no new requests; those in flight finish, and
 * idle connections to the old address are closed). The name is asked again after the
 * answer's smallest TTL held within discovery.min_ttl_ms..max_ttl_ms (an SRV answer's own
 * TTL is not given by c-ares: its targets' address TTLs are used). A failed resolution
 * (timeout, SERVFAIL, refused) keeps the last answer and is asked again after min_ttl_ms; a
 * name that does not exist or has no records empties the name's slots: an answer of none.
 */
#ifndef ACCELNET_CONTROL_DISCOVER_H
#define ACCELNET_CONTROL_DISCOVER_H

#include "core/loop.h"
#include "runtime/pool.h"

struct discover;

/* Start resolving every discovered name of <rt> (the first time at once); *out NULL when
 * there are none. 0 or -errno. */
int discover_start(struct loop *loop, struct runtime *rt, struct discover **out);
void discover_stop(struct discover *d);

#endif
