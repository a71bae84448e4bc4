/*
 * probes.c - GET /healthz and /readyz (see probes.h).
 *
 * On a data listener the answer is JSON, {"status": "ok"}, {"status": "ready"} or
 * {"status": "not ready", "reason": "..."} with 503, through the codec's reply_json (the same
 * path as GET /v1/models): fixed bytes but for the reason, which there only counts the short
 * pools and the failing tokenizers (a data listener is the public side; the admin endpoint
 * names them to those with its token), and a degraded tokenizer is not told there. Only GET is
 * answered there, on the path exactly (its case counts, as a route's does; a query does not, so
 * /healthz?x=1 never reaches a backend's /healthz): any other method on those paths, or /HEALTHZ,
 * is routed as before. The check costs one flag test per request where probes.listeners is off.
 */
#include "proxy/probes.h"
#include "core/clock.h"
#include "proxy/worker.h"
#include "runtime/tokhealth.h"
#include "tok/tokmodel.h"

#include <stdio.h>
#include <string.h>

/* The models whose tokenizer is failing (tokhealth.h), after what out[0..used) says already
 * (<any>: something). */
static void tokenizers_failing(const struct runtime *rt, int named, int any, char *out,
			       size_t outlen, size_t used)
{
	size_t failing = 0;
	for (size_t i = 0; i < rt->conf->ntokmodels; i++) {
		const struct tokhealth *h = &rt->tokhealth[i];
		if (tokhealth_state(h) != TOKHEALTH_FAILING)
			continue;
		if (named && used < outlen) {
			int n = snprintf(
			    out + used, outlen - used,
			    "%smodel %s's tokenizer is failing (%llu of %llu prompts in the last "
			    "%u s "
			    "could not be encoded)",
			    any || failing ? "; " : "not ready: ", rt->conf->tokmodels[i].name,
			    (unsigned long long)atomic_load_explicit(&h->win_failed,
								     memory_order_relaxed),
			    (unsigned long long)atomic_load_explicit(&h->win_tried,
								     memory_order_relaxed),
			    TOKHEALTH_WINDOW * TOKHEALTH_TICK_MS / 1000);
			used += n > 0 ? (size_t)n : 0;
		}
		failing++;
	}
	if (failing && !named && used < outlen)
		snprintf(out + used, outlen - used, "%s%zu model%s tokenizer failing",
			 any ? "; " : "not ready: ", failing, failing == 1 ? "'s" : "s'");
}

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
	if (short_pools && !named) {
		int n = snprintf(
		    out, outlen, "not ready: %zu pool%s with fewer than %u backend%s up",
		    short_pools, short_pools == 1 ? "" : "s", min_up, min_up == 1 ? "" : "s");
		used = n > 0 ? (size_t)n : 0;
	} else if (short_pools && used < outlen) {
		int n = snprintf(out + used, outlen - used, " (probes.min_up: %u)", min_up);
		used += n > 0 ? (size_t)n : 0;
	}
	tokenizers_failing(rt, named, short_pools != 0, out, outlen, used);
}

void probes_degraded(const struct runtime *rt, int named, char *out, size_t outlen)
{
	size_t used = 0, degraded = 0;
	out[0] = '\0';
	for (size_t i = 0; i < rt->conf->ntokmodels; i++) {
		if (tokhealth_state(&rt->tokhealth[i]) != TOKHEALTH_DEGRADED)
			continue;
		const struct conf_tokmodel *m = &rt->conf->tokmodels[i];
		if (named && used < outlen) {
			int n = snprintf(
			    out + used, outlen - used,
			    "degraded: model %s's chats are keyed on text (%s)\n", m->name,
			    m->tm->chat_skipped[0] ? "its chat template is not one accelnet "
						     "knows"
						   : "it has no chat template");
			used += n > 0 ? (size_t)n : 0;
		}
		degraded++;
	}
	if (degraded && !named)
		snprintf(out, outlen, "degraded: %zu model%s chats keyed on text\n", degraded,
			 degraded == 1 ? "'s" : "s'");
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
