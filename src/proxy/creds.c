/*
 * creds.c - building, reloading and retiring the workers' key material (see creds.h).
 */
#include "proxy/creds.h"
#include "conf/tls.h"
#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define RETIRE_CHECK_MS 100

/* A generation of tables: one per listener and one per route, NULL where none. */
struct creds_gen {
	struct net_tls_listener **tls;
	struct apikeys **keys;
};

/* What reloads replaced: listeners until the end, key tables until the workers moved on. */
static struct {
	struct net_tls_listener **old_tls;
	size_t nold_tls;
	struct apikeys **old_keys; /* waiting for every worker to pass a turn */
	size_t nold_keys;
	uint64_t *turns_at; /* each worker's turns when the newest of them was retired */
	struct worker *workers;
	unsigned nworkers;
	struct loop_timer timer;
	struct loop *loop;
} retired;

static void gen_free(const struct conf *c, struct creds_gen *g)
{
	for (size_t i = 0; g->tls && i < c->nlistens; i++)
		net_tls_listener_free(g->tls[i]);
	for (size_t i = 0; g->keys && i < c->nroutes; i++)
		apikeys_free(g->keys[i]);
	free(g->tls);
	free(g->keys);
	g->tls = NULL;
	g->keys = NULL;
}

static int gen_build(const struct conf *c, struct creds_gen *g, char *err, size_t errlen)
{
	int rc = -ENOMEM;
	g->tls = calloc(c->nlistens ? c->nlistens : 1, sizeof(*g->tls));
	g->keys = calloc(c->nroutes ? c->nroutes : 1, sizeof(*g->keys));
	if (!g->tls || !g->keys) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < c->nlistens; i++) {
		char why[300];
		if (c->listens[i].tls &&
		    (rc = conf_tls_build(c->listens[i].tls, &g->tls[i], why, sizeof(why))) < 0) {
			snprintf(err, errlen, "listen %.60s: tls: %.180s", c->listens[i].address,
				 why);
			goto fail;
		}
	}
	for (size_t i = 0; i < c->nroutes; i++) {
		const struct conf_auth *a = c->routes[i].auth;
		if (a && (rc = apikeys_load(a->api_keys_file, &g->keys[i], err, errlen)) < 0)
			goto fail;
	}
	return 0;
fail:
	gen_free(c, g);
	return rc;
}

int creds_build(struct worker_shared *sh, char *err, size_t errlen)
{
	const struct conf *c = sh->conf;
	struct creds_gen g;
	int rc = gen_build(c, &g, err, errlen);
	if (rc)
		return rc;
	sh->tls = calloc(c->nlistens ? c->nlistens : 1, sizeof(*sh->tls));
	sh->keys = calloc(c->nroutes ? c->nroutes : 1, sizeof(*sh->keys));
	if (!sh->tls || !sh->keys) {
		gen_free(c, &g);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->nlistens; i++)
		atomic_init(&sh->tls[i], g.tls[i]);
	for (size_t i = 0; i < c->nroutes; i++)
		atomic_init(&sh->keys[i], g.keys[i]);
	free(g.tls);
	free(g.keys);
	return 0;
}

static void retired_keys_free(void)
{
	for (size_t i = 0; i < retired.nold_keys; i++)
		apikeys_free(retired.old_keys[i]);
	free(retired.old_keys);
	retired.old_keys = NULL;
	retired.nold_keys = 0;
}

void creds_free(struct worker_shared *sh)
{
	const struct conf *c = sh->conf;
	for (size_t i = 0; sh->tls && i < c->nlistens; i++)
		net_tls_listener_free(atomic_load(&sh->tls[i]));
	for (size_t i = 0; sh->keys && i < c->nroutes; i++)
		apikeys_free(atomic_load(&sh->keys[i]));
	free(sh->tls);
	free(sh->keys);
	sh->tls = NULL;
	sh->keys = NULL;
	for (size_t i = 0; i < retired.nold_tls; i++)
		net_tls_listener_free(retired.old_tls[i]);
	free(retired.old_tls);
	retired.old_tls = NULL;
	retired.nold_tls = 0;
	retired_keys_free();
	free(retired.turns_at);
	retired.turns_at = NULL;
	if (retired.loop)
		loop_timer_stop(retired.loop, &retired.timer);
	retired.loop = NULL;
}

/* Has every worker finished a loop turn since the last retirement? Then nothing reads them. */
static void on_retire_timer(struct loop_timer *t)
{
	for (unsigned i = 0; i < retired.nworkers; i++)
		if (atomic_load_explicit(&retired.workers[i].turns, memory_order_acquire) <=
		    retired.turns_at[i]) {
			loop_wake(retired.workers[i].loop);
			loop_timer_set(retired.loop, t, loop_now(retired.loop) + RETIRE_CHECK_MS);
			return;
		}
	retired_keys_free();
}

static int keep(void ***list, size_t *n, void *p)
{
	if (!p)
		return 0;
	void **v = realloc(*list, (*n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	v[(*n)++] = p;
	*list = v;
	return 0;
}

void creds_reload(struct worker_shared *sh, struct worker *workers, unsigned nworkers)
{
	const struct conf *c = sh->conf;
	struct creds_gen g;
	char err[512];
	if (gen_build(c, &g, err, sizeof(err)) < 0) {
		log_error("SIGHUP: %s; the certificates and keys in use stay", err);
		return;
	}
	if (!retired.turns_at && !(retired.turns_at = calloc(nworkers, sizeof(uint64_t)))) {
		log_error("SIGHUP: out of memory; the certificates and keys in use stay");
		gen_free(c, &g);
		return;
	}
	size_t swapped = 0;
	for (size_t i = 0; i < c->nlistens; i++) {
		struct net_tls_listener *old = atomic_exchange(&sh->tls[i], g.tls[i]);
		if (keep((void ***)&retired.old_tls, &retired.nold_tls, old) < 0)
			log_warn("SIGHUP: out of memory: a replaced TLS listener is leaked");
		swapped += g.tls[i] != NULL;
	}
	for (size_t i = 0; i < c->nroutes; i++) {
		struct apikeys *old = atomic_exchange(&sh->keys[i], g.keys[i]);
		if (keep((void ***)&retired.old_keys, &retired.nold_keys, old) < 0)
			log_warn("SIGHUP: out of memory: a replaced keys table is leaked");
		swapped += g.keys[i] != NULL;
	}
	free(g.tls);
	free(g.keys);
	retired.workers = workers;
	retired.nworkers = nworkers;
	retired.loop = sh->main_loop;
	retired.timer.fn = on_retire_timer;
	for (unsigned i = 0; i < nworkers; i++) {
		retired.turns_at[i] = atomic_load_explicit(&workers[i].turns, memory_order_acquire);
		loop_wake(workers[i].loop);
	}
	loop_timer_set(retired.loop, &retired.timer, loop_now(retired.loop) + RETIRE_CHECK_MS);
	log_info("SIGHUP: %zu certificate set%s and keys file%s read again and in use", swapped,
		 swapped == 1 ? "" : "s", swapped == 1 ? "" : "s");
}

int creds_check(const struct conf *conf, char *err, size_t errlen)
{
	struct creds_gen g;
	int rc = gen_build(conf, &g, err, errlen);
	if (!rc)
		gen_free(conf, &g);
	return rc;
}
