/*
 * probes.c - GET /healthz and /readyz (see probes.h).
 *
 * On a data listener the answer is JSON, {"status": "ok"}, {"status": "ready"} or
 * {"status": "not ready", "reason": "..."} with 503, through the codec's reply_json (the same
 * path as GET /v1/models): fixed bytes but for the reason, which there only counts the short
 * pools (a data listener is the public side; the admin endpoint names them to those with its
 * token). Only GET is answered there, on the path exactly (its case counts, as a route's
 * does; a query does not, so /healthz?x=1 never reaches a backend's /healthz): any other
 * method on those paths, or /HEALTHZ, is routed as before.
 * The check costs one flag test per request where probes.listeners is off.
 */
#include "proxy/probes.h"
#include "core/clock.h"
#include "proxy/worker.h"

#include <stdio.h>
#include <string.h>

void probes_ready_why(const struct runtime *rt, unsigned min_up, int named, char *out,
		      size_t outlen)
{
	uint64_t now = clock_now_ms();
	size_t used = 0, short_pools = 0;
	out[0] = '\0';
	if (atomic_load_explicit(&rt->stopping, memory_order_relaxed)) {
		snprintf(out, outlen, "not ready: draining to exit");
		return;
	}
	for (size_t i = 0; i < rt->npools; i++) {
		const struct pool_rt *p = &rt->pools[i];
		unsigned up = 0;
		for (size_t j = 0; j < p->nbackends; j++)
			up += backend_usable(&p->backends[j], now) != 0;
		if (up >= min_up)
			continue;
		if (named && used < outlen) {
			int n = snprintf(out + used, outlen - used, "%spool %s has %u backend%s up",
					 short_pools ? "; " : "not ready: ", p->conf->name, up,
					 up == 1 ? "" : "s");
			used += n > 0 ? (size_t)n : 0;
		}
		short_pools++;
	}
	if (!short_pools)
		return;
	if (!named)
		snprintf(out, outlen, "not ready: %zu pool%s with fewer than %u backend%s up",
			 short_pools, short_pools == 1 ? "" : "s", min_up, min_up == 1 ? "" : "s");
	else if (used < outlen)
		snprintf(out + used, outlen - used, " (probes.min_up: %u)", min_up);
}

enum run probes_answer(struct exchange *x)
{
	const struct http_str path = x->head->path;
	const struct conf *c = x->w->conf;
	char why[160], json[224];
	if (!c->probes.listeners || x->meth != HTTP_GET)
		return RUN_AGAIN;
	/* the path as a route reads it: case counts, a query does not */
	const char *q = memchr(path.p, '?', path.len);
	size_t n = q ? (size_t)(q - path.p) : path.len;
	int ready = n == 7 && memcmp(path.p, "/readyz", 7) == 0;
	if (!ready && !(n == 8 && memcmp(path.p, "/healthz", 8) == 0))
		return RUN_AGAIN;
	if (!ready)
		return x->codec->reply_json(x, 200, "{\"status\":\"ok\"}\n", 16);
	probes_ready_why(x->w->rt, c->probes.min_up, 0, why, sizeof(why));
	if (!why[0])
		return x->codec->reply_json(x, 200, "{\"status\":\"ready\"}\n", 19);
	/* the reason is the proxy's own words: no quote or backslash to escape */
	int k = snprintf(json, sizeof(json), "{\"status\":\"not ready\",\"reason\":\"%s\"}\n",
			 why + sizeof("not ready: ") - 1);
	return x->codec->reply_json(x, 503, json, (size_t)k);
}
