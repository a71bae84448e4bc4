/*
 * creds.c - building, reloading and retiring the workers' key material, and watching the
 * files of listeners with reload_s (see creds.h).
 */
#include "control/creds.h"
#include "conf/tls.h"
#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RETIRE_CHECK_MS 100

/* A generation of tables: one per listener and one per route, NULL where none. */
struct creds_gen {
	struct net_tls_listener **tls;
	struct auth_tables **auth;
};

/* What reload_s replaced in one generation (one sh): listeners until the end, key tables
 * until its workers moved on. */
struct creds_retired {
	struct net_tls_listener **old_tls;
	size_t nold_tls;
	struct auth_tables **old_auth; /* waiting for every worker to pass a turn */
	size_t nold_auth;
	uint64_t *turns_at; /* each worker's turns when the newest of them was retired */
	struct worker *workers;
	unsigned nworkers;
	struct loop_timer timer;
	struct loop *loop;
};

/* listen[].tls.reload_s: each watched listener's files as last seen. */
static struct {
	struct worker_shared *sh;
	struct worker *workers;
	unsigned nworkers;
	uint64_t *stamps; /* per listener; 0 where not watched */
	unsigned every_s; /* the shortest reload_s */
	struct loop_timer timer;
} watch;

/* The stamps of the last creds_build, taken before its files were read, for the watch of its
 * generation to start from: a file replaced while the proxy starts is then seen as changed
 * (stamped at creds_watch, after the read, the change was missed until the next one). */
static struct {
	const struct worker_shared *sh;
	uint64_t *stamps;
} built;

static uint64_t stamp_listener(const struct conf_tls *t);

static void stamp_built(const struct worker_shared *sh)
{
	const struct conf *c = sh->conf;
	free(built.stamps);
	built.sh = sh;
	if (!(built.stamps = calloc(c->nlistens ? c->nlistens : 1, sizeof(*built.stamps))))
		return; /* creds_watch stamps the files itself */
	for (size_t i = 0; i < c->nlistens; i++)
		if (c->listens[i].tls && c->listens[i].tls->reload_s)
			built.stamps[i] = stamp_listener(c->listens[i].tls);
}

static void gen_free(const struct conf *c, struct creds_gen *g)
{
	for (size_t i = 0; g->tls && i < c->nlistens; i++)
		net_tls_listener_free(g->tls[i]);
	for (size_t i = 0; g->auth && i < c->nroutes; i++)
		auth_tables_free(g->auth[i]);
	free(g->tls);
	free(g->auth);
	g->tls = NULL;
	g->auth = NULL;
}

static int gen_build(const struct conf *c, struct creds_gen *g, char *err, size_t errlen)
{
	int rc = -ENOMEM;
	g->tls = calloc(c->nlistens ? c->nlistens : 1, sizeof(*g->tls));
	g->auth = calloc(c->nroutes ? c->nroutes : 1, sizeof(*g->auth));
	if (!g->tls || !g->auth) {
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
		if (a && (a->api_keys_file || a->jwt || a->basic) &&
		    (rc = auth_tables_load(a, &g->auth[i], err, errlen)) < 0)
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
	stamp_built(sh);
	int rc = gen_build(c, &g, err, errlen);
	if (rc)
		return rc;
	sh->tls = calloc(c->nlistens ? c->nlistens : 1, sizeof(*sh->tls));
	sh->auth = calloc(c->nroutes ? c->nroutes : 1, sizeof(*sh->auth));
	if (!sh->tls || !sh->auth) {
		gen_free(c, &g);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->nlistens; i++)
		atomic_init(&sh->tls[i], g.tls[i]);
	for (size_t i = 0; i < c->nroutes; i++)
		atomic_init(&sh->auth[i], g.auth[i]);
	free(g.tls);
	free(g.auth);
	return 0;
}

static void retired_auth_free(struct creds_retired *r)
{
	for (size_t i = 0; i < r->nold_auth; i++)
		auth_tables_free(r->old_auth[i]);
	free(r->old_auth);
	r->old_auth = NULL;
	r->nold_auth = 0;
}

void creds_free(struct worker_shared *sh)
{
	const struct conf *c = sh->conf;
	for (size_t i = 0; sh->tls && i < c->nlistens; i++)
		net_tls_listener_free(atomic_load(&sh->tls[i]));
	for (size_t i = 0; sh->auth && i < c->nroutes; i++)
		auth_tables_free(atomic_load(&sh->auth[i]));
	free(sh->tls);
	free(sh->auth);
	sh->tls = NULL;
	sh->auth = NULL;
	if (watch.sh == sh) {
		loop_timer_stop(sh->main_loop, &watch.timer);
		free(watch.stamps);
		watch.stamps = NULL;
		watch.sh = NULL;
	}
	struct creds_retired *r = sh->retired;
	sh->retired = NULL;
	if (!r)
		return;
	for (size_t i = 0; i < r->nold_tls; i++)
		net_tls_listener_free(r->old_tls[i]);
	free(r->old_tls);
	retired_auth_free(r);
	free(r->turns_at);
	if (r->loop)
		loop_timer_stop(r->loop, &r->timer);
	free(r);
}

/* Has every worker finished a loop turn since the last retirement? Then nothing reads them. */
static void on_retire_timer(struct loop_timer *t)
{
	struct creds_retired *r = container_of(t, struct creds_retired, timer);
	for (unsigned i = 0; i < r->nworkers; i++)
		if (atomic_load_explicit(&r->workers[i].turns, memory_order_acquire) <=
		    r->turns_at[i]) {
			loop_wake(r->workers[i].loop);
			loop_timer_set(r->loop, t, loop_now(r->loop) + RETIRE_CHECK_MS);
			return;
		}
	retired_auth_free(r);
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

void creds_reload(struct worker_shared *sh, struct worker *workers, unsigned nworkers,
		  const char *why)
{
	const struct conf *c = sh->conf;
	struct creds_gen g;
	char err[512];
	if (gen_build(c, &g, err, sizeof(err)) < 0) {
		log_error("%s: %s; the certificates and keys in use stay", why, err);
		return;
	}
	struct creds_retired *r = sh->retired ? sh->retired : (sh->retired = calloc(1, sizeof(*r)));
	if (r && !r->turns_at)
		r->turns_at = calloc(nworkers, sizeof(uint64_t));
	if (!r || !r->turns_at) {
		log_error("%s: out of memory; the certificates and keys in use stay", why);
		gen_free(c, &g);
		return;
	}
	size_t swapped = 0;
	for (size_t i = 0; i < c->nlistens; i++) {
		struct net_tls_listener *old = atomic_exchange(&sh->tls[i], g.tls[i]);
		if (keep((void ***)&r->old_tls, &r->nold_tls, old) < 0)
			log_warn("%s: out of memory: a replaced TLS listener is leaked", why);
		swapped += g.tls[i] != NULL;
	}
	for (size_t i = 0; i < c->nroutes; i++) {
		struct auth_tables *old = atomic_exchange(&sh->auth[i], g.auth[i]);
		if (keep((void ***)&r->old_auth, &r->nold_auth, old) < 0)
			log_warn("%s: out of memory: a replaced auth table is leaked", why);
		swapped += g.auth[i] != NULL;
	}
	free(g.tls);
	free(g.auth);
	r->workers = workers; /* sh's own: a generation's workers never change */
	r->nworkers = nworkers;
	r->loop = sh->main_loop;
	r->timer.fn = on_retire_timer;
	for (unsigned i = 0; i < nworkers; i++) {
		r->turns_at[i] = atomic_load_explicit(&workers[i].turns, memory_order_acquire);
		loop_wake(workers[i].loop);
	}
	loop_timer_set(r->loop, &r->timer, loop_now(r->loop) + RETIRE_CHECK_MS);
	log_info("%s: %zu certificate set%s and auth file set%s read again and in use", why,
		 swapped, swapped == 1 ? "" : "s", swapped == 1 ? "" : "s");
}

/* FNV-1a over <n> bytes, continuing from <h>. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t stamp_file(uint64_t h, const char *path)
{
	struct stat st;
	if (!path)
		return h;
	h = fnv(h, path, strlen(path));
	if (stat(path, &st) < 0)
		return fnv(h, "missing", 7);
	h = fnv(h, &st.st_ino, sizeof(st.st_ino));
	h = fnv(h, &st.st_size, sizeof(st.st_size));
	h = fnv(h, &st.st_mtim, sizeof(st.st_mtim));
	return fnv(h, &st.st_ctim, sizeof(st.st_ctim));
}

/* What the files of listener <t> look like now: identity, size and times of each. */
static uint64_t stamp_listener(const struct conf_tls *t)
{
	uint64_t h = 0xcbf29ce484222325ull;
	h = stamp_file(h, t->first.cert);
	h = stamp_file(h, t->first.key);
	h = stamp_file(h, t->first.ocsp_file);
	for (size_t i = 0; i < t->nmore; i++) {
		h = stamp_file(h, t->more[i].cert);
		h = stamp_file(h, t->more[i].key);
		h = stamp_file(h, t->more[i].ocsp_file);
	}
	h = stamp_file(h, t->client_ca);
	return stamp_file(h, t->client_crl);
}

/* Every reload_s: has a watched listener's file changed? Then reload, as SIGHUP does. A
 * failed reload (a file caught half-written) is tried again when the files change again. */
static void on_watch_timer(struct loop_timer *t)
{
	const struct conf *c = watch.sh->conf;
	int changed = 0;
	for (size_t i = 0; i < c->nlistens; i++) {
		const struct conf_tls *tls = c->listens[i].tls;
		if (!tls || !tls->reload_s)
			continue;
		uint64_t now = stamp_listener(tls);
		changed |= now != watch.stamps[i];
		watch.stamps[i] = now;
	}
	if (changed)
		creds_reload(watch.sh, watch.workers, watch.nworkers, "reload_s (a file changed)");
	loop_timer_set(watch.sh->main_loop, t,
		       loop_now(watch.sh->main_loop) + (uint64_t)watch.every_s * 1000);
}

int creds_watch(struct worker_shared *sh, struct worker *workers, unsigned nworkers)
{
	const struct conf *c = sh->conf;
	unsigned every = 0;
	for (size_t i = 0; i < c->nlistens; i++) {
		const struct conf_tls *t = c->listens[i].tls;
		if (t && t->reload_s && (!every || t->reload_s < every))
			every = t->reload_s;
	}
	if (watch.sh) { /* a reload's generation takes over the watch */
		loop_timer_stop(watch.sh->main_loop, &watch.timer);
		free(watch.stamps);
		watch.stamps = NULL;
		watch.sh = NULL;
	}
	if (!every)
		return 0;
	if (built.sh == sh && built.stamps) { /* as the files were when they were read */
		watch.stamps = built.stamps;
		built.stamps = NULL;
	} else {
		if (!(watch.stamps = calloc(c->nlistens, sizeof(*watch.stamps))))
			return -ENOMEM;
		for (size_t i = 0; i < c->nlistens; i++)
			if (c->listens[i].tls && c->listens[i].tls->reload_s)
				watch.stamps[i] = stamp_listener(c->listens[i].tls);
	}
	watch.sh = sh;
	watch.workers = workers;
	watch.nworkers = nworkers;
	watch.every_s = every;
	watch.timer.fn = on_watch_timer;
	loop_timer_set(sh->main_loop, &watch.timer,
		       loop_now(sh->main_loop) + (uint64_t)every * 1000);
	return 0;
}

int creds_check(const struct conf *conf, char *err, size_t errlen)
{
	struct creds_gen g;
	int rc = gen_build(conf, &g, err, errlen);
	if (!rc)
		gen_free(conf, &g);
	return rc;
}
