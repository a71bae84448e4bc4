/*
 * apipath.h - which admin API call a request names: its method and path under /api/
 * (control/adminapi.h serves them; docs/operations.md, "Runtime admin API", lists them).
 *
 *   GET    /api/backends                                  every pool's backends
 *   POST   /api/pools/POOL/backends                       add one (JSON body)
 *   PATCH  /api/pools/POOL/backends/ADDRESS               weight, max_concurrency, state
 *   DELETE /api/pools/POOL/backends/ADDRESS               remove (drains first)
 *   POST   /api/pools/POOL/backends/ADDRESS/ACTION        drain, enable, disable, remove
 *   GET    /api/maintenance, POST /api/maintenance        read, or turn on or off
 *   POST   /api/cache/purge                               purge (JSON body)
 *   POST   /api/reload                                    reload the config
 *
 * POOL and ADDRESS are path segments, percent-decoded ("[::1]:80" may come as
 * %5B%3A%3A1%5D%3A80); a query string is ignored. Pure: no allocation, no I/O; the fuzzer
 * drives it (tests/fuzz/fuzz_apipath.c).
 */
#ifndef ACCELNET_CONTROL_APIPATH_H
#define ACCELNET_CONTROL_APIPATH_H

#include "http/parse.h"

#include <stddef.h>

#define APIPATH_SEGMENT_MAX 128 /* bytes of a decoded POOL or ADDRESS, NUL included */

enum apipath_call {
	APIPATH_BACKENDS,	 /* GET /api/backends */
	APIPATH_ADD,		 /* POST .../backends */
	APIPATH_CHANGE,		 /* PATCH .../backends/ADDRESS */
	APIPATH_REMOVE,		 /* DELETE .../backends/ADDRESS, or POST .../remove */
	APIPATH_DRAIN,		 /* POST .../ADDRESS/drain */
	APIPATH_ENABLE,		 /* POST .../ADDRESS/enable */
	APIPATH_DISABLE,	 /* POST .../ADDRESS/disable */
	APIPATH_MAINTENANCE_GET, /* GET /api/maintenance */
	APIPATH_MAINTENANCE_SET, /* POST or PUT /api/maintenance */
	APIPATH_PURGE,		 /* POST /api/cache/purge */
	APIPATH_RELOAD,		 /* POST /api/reload */
};

struct apipath {
	enum apipath_call call;
	char pool[APIPATH_SEGMENT_MAX];	   /* "" when the call names none */
	char backend[APIPATH_SEGMENT_MAX]; /* "" when the call names none */
	const char *allow;		   /* on 405: the methods the path takes */
};

/*
 * Which call <meth> <path>[0..len) (starting "/api/") is: 0 with <out> filled, 404 (no such
 * path), 405 (the path, another method: out->allow set) or 400 (a segment too long, badly
 * percent-encoded, or decoding to a control character or '/'), with <why> a static string.
 */
int apipath_parse(enum http_method meth, const char *path, size_t len, struct apipath *out,
		  const char **why);

#endif
