/*
 * adminapi.h - the runtime admin API: JSON calls under /api/ on the admin endpoint
 * (apipath.h lists them; docs/operations.md, "Runtime admin API", documents each with curl).
 *
 * admin.c checks the token (and refuses browsers without one) before it hands a request
 * here; this file reads the call's JSON body, makes the change through manage.h, writes
 * admin.state_file (statefile.h) and answers JSON: the backend as it is now, or
 * {"error": "..."} with a 4xx that says what was wrong (404 unknown pool or backend, 400 a
 * bad body or value, 409 a change that conflicts with the backend's state, 413 a body over
 * the endpoint's limit). Everything runs on the main thread.
 */
#ifndef ACCELNET_CONTROL_ADMINAPI_H
#define ACCELNET_CONTROL_ADMINAPI_H

#include "cache/purge.h"
#include "http/server.h"
#include "runtime/pool.h"

#include <stddef.h>

/* The proxy's reload: 0, or -errno with err (-EINVAL: the new config is refused, err says
 * FILE:LINE:COL: ...). */
typedef int (*adminapi_reload_fn)(void *arg, char *err, size_t errlen);

struct adminapi {
	struct runtime *rt;
	const char *state_file; /* admin.state_file, or NULL */
	const char *tag_field;	/* cache.tag_header: what a purge by tag reads */
	adminapi_reload_fn reload;
	void *reload_arg;
	struct cache_purge purge; /* the purge being answered (too large for the stack) */
};

/* Answer the request <req> (its path starts "/api/") with body[0..body_len). */
void adminapi_serve(struct adminapi *api, struct hsrv_conn *c, const struct http_head *req,
		    const char *body, size_t body_len);

#endif
