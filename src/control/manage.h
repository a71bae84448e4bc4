/*
 * manage.h - the changes the admin API (control/adminapi.h) and the state file
 * (control/statefile.h) make to a running proxy's backends: add and remove backends, drain,
 * disable and enable them, change their weight and concurrency cap, and put the whole
 * proxy in maintenance.
 *
 * Every call is made on the main thread (the admin endpoint's), validates what it is given,
 * changes the runtime's atomics (struct backend), which workers read on their next pick,
 * logs who changed what from what to what, and returns 0 or -errno with <err> filled:
 * -ENOENT (no such pool or backend), -EINVAL (a bad value), -EEXIST (already there),
 * -ENOSPC (no free slot), -EPERM (a backend DNS discovery manages), -EALREADY (already
 * removed), -EOPNOTSUPP (the pool's balancer fixes its weights at load).
 *
 * Adding fills one of the pool's spare slots (pools[].spare_backends) as discovery fills
 * its own (discover.c): only a slot not present with nothing in flight is rewritten.
 * Removing takes the backend out (present 0: no new picks, in-flight requests finish); a
 * spare slot is free again once its last request ends, a config backend stays, removed,
 * until added again. A new backend is named by a numeric address (IPv4:PORT or [IPv6]:PORT):
 * the main thread never waits on a resolver.
 */
#ifndef ACCELNET_CONTROL_MANAGE_H
#define ACCELNET_CONTROL_MANAGE_H

#include "net/addr.h"
#include "runtime/pool.h"

#include <stddef.h>
#include <stdint.h>

/* What the admin API changed of a config backend (struct backend api_set): the state file
 * keeps these, and the config's word holds for the rest. */
enum {
	MANAGE_SET_WEIGHT = 1,
	MANAGE_SET_CAP = 2,
	MANAGE_SET_STATE = 4,
	MANAGE_SET_REMOVED = 8,
};

#define MANAGE_WEIGHT_MAX 1000	      /* as backends[].weight */
#define MANAGE_CAP_MAX 1000000	      /* as backends[].max_concurrency */
#define MANAGE_CAP_DEFAULT UINT32_MAX /* manage_add: the default cap */
#define MANAGE_RETRY_MAX 86400	      /* maintenance's Retry-After, seconds */
#define MANAGE_RETRY_DEFAULT 30u      /* ... when not given */

/*
 * Parse <text> as a numeric backend address, "IPv4:PORT" or "[IPv6]:PORT", into <out>, and
 * its canonical form into canon[0..canon_len). 0, or -EINVAL with <why> (a static string).
 */
int manage_parse_address(const char *text, struct net_addr *out, char *canon, size_t canon_len,
			 const char **why);

/* The pool called <name>, or NULL. */
struct pool_rt *manage_pool(struct runtime *rt, const char *name);
/*
 * The backend of <p> at <address>: one whose name (its config address, or an added one's
 * canonical address) is <address>, or, when <address> is numeric, whose address it is. Empty
 * spare slots are not found; removed ones are. NULL when none.
 */
struct backend *manage_find(struct pool_rt *p, const char *address);
/* The address /status shows for <b>. */
const char *manage_address(const struct backend *b);
/* enum backend_admin of <name> ("enabled", "draining", "disabled"), or -1. */
int manage_state_of(const char *name);

/*
 * May <address> (numeric, as manage_add takes it) be added as a backend by <conf>'s proxy?
 * Not when it is the proxy's own: one of its listeners or its admin endpoint (a listener on
 * a wildcard address is reached at its port on a loopback, wildcard or local interface
 * address), nor one outside admin.backend_networks when the config lists them. 0, or -EINVAL
 * with <err> saying why. Without that list any other address is accepted: who may use the
 * admin API may point the proxy at any host it can reach.
 */
int manage_check_address(const struct conf *conf, const char *address, char *err, size_t errlen);

/*
 * Add the backend at <address> to <p> with <weight> (1..1000; 0: the default) and <cap>
 * (max_concurrency, 0: none; MANAGE_CAP_DEFAULT: the default). A removed backend with that
 * address comes back (a config backend's defaults are its config's); else a free spare slot
 * takes it (defaults: weight 1, no cap). *out: the backend. <who> says who asked, for the log.
 */
int manage_add(struct pool_rt *p, const char *address, unsigned weight, unsigned cap,
	       const char *who, struct backend **out, char *err, size_t errlen);
/* Take <b> out of <p>: no new requests; those in flight finish. */
int manage_remove(struct pool_rt *p, struct backend *b, const char *who, char *err, size_t errlen);
/* Drain, disable or enable <b> (enum backend_admin <st>). */
int manage_set_state(struct pool_rt *p, struct backend *b, int st, const char *who, char *err,
		     size_t errlen);
int manage_set_weight(struct pool_rt *p, struct backend *b, unsigned weight, const char *who,
		      char *err, size_t errlen);
/* A larger cap (or none) wakes queued requests at once; a smaller one lets those in flight
 * finish and takes no new ones until they are under it. */
int manage_set_cap(struct pool_rt *p, struct backend *b, unsigned cap, const char *who, char *err,
		   size_t errlen);
/* Maintenance on (<retry_s> > 0: new requests get 503 with that Retry-After) or off (0). */
int manage_set_maintenance(struct runtime *rt, unsigned retry_s, const char *who, char *err,
			   size_t errlen);

#endif
