/*
 * health.c - the checks behind health.h. Each check is a probe (control/probe.h: one HTTP GET
 * to the backend from the main loop, connect, TLS handshake under pools.tls, timers and
 * cleanup) whose answer is judged by its status line alone (a pool that takes listen[].mode:
 * tcp connections is checked by a TCP connect alone: its backends need not speak HTTP); to a
 * backend that speaks HTTP/2 the probe asks over HTTP/2, with health.protocol: grpc by gRPC's
 * health checking protocol, and gives the status it read;
 * what is here is that reading
 * and the verdict, fall and rise. A check that cannot even start because this process is
 * out of descriptors, socket buffers or memory says nothing about the backend: it is
 * skipped, not counted as failed, and the next one runs at the usual interval. A failed TLS
 * handshake is a failed check whose reason (OpenSSL's) the DOWN line gives.
 */
#include "control/health.h"
#include "core/log.h"
#include "proxy/admission.h"
#include "control/probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct check {
	struct probe probe;
	struct pool_rt *pool;
	char buf[64];
};

struct health {
	struct check *checks;
	size_t n;
};

static void check_passed(struct check *c)
{
	struct backend *be = c->probe.be;
	struct loop *loop = c->probe.loop;
	const struct conf_health *hc = &be->pool->health;
	if (c->probe.gen != atomic_load(&be->gen))
		return; /* an answer from the address the slot had before */
	be->hc_fail = 0;
	if (++be->hc_ok >= hc->rise && !atomic_load(&be->up)) {
		atomic_store(&be->down_until_ms, 0);
		backend_came_back(be, loop_now(loop));
		atomic_store(&be->up, 1);
		log_warn("backend %s (pool %s) is UP after %u good checks", be->name,
			 be->pool->name, be->hc_ok);
		/* requests queued while it was down may use its slots now */
		admission_grant(c->pool, loop_now(loop), be->id + loop_now(loop));
	}
}

static void check_failed(struct probe *p, const char *why)
{
	struct backend *be = p->be;
	if (p->gen != atomic_load(&be->gen))
		return;
	be->hc_ok = 0;
	if (++be->hc_fail >= be->pool->health.fall && atomic_load(&be->up)) {
		atomic_store(&be->up, 0);
		log_warn("backend %s (pool %s) is DOWN: %s (%u failed checks)", be->name,
			 be->pool->name, why, be->hc_fail);
	}
}

/* The check could not run for want of local resources (<err>): no verdict on the backend. */
static void check_skipped(struct probe *p, int err)
{
	log_warn_every(10000,
		       "health check of backend %s (pool %s) skipped: %s here, which is "
		       "not the backend's fault",
		       p->be->name, p->be->pool->name, strerror(-err));
}

/* Read up to the status line (over HTTP/2, the answer's status: probe_h2_status): 2xx and
 * 3xx pass, anything else fails. An L4 pool's check (no path) passed when its connect did. */
static void check_readable(struct probe *p)
{
	struct check *c = container_of(p, struct check, probe);
	if (!p->path) {
		probe_end(p);
		check_passed(c);
		return;
	}
	int status = 0;
	if (p->h2) {
		const char *no;
		int r = probe_h2_status(p, &status, &no);
		if (!r)
			return;
		if (r < 0) {
			probe_fail(p, no);
			return;
		}
		goto judge;
	}
	for (;;) {
		ssize_t n = net_conn_read(&p->nc, c->buf + p->len, sizeof(c->buf) - 1 - p->len);
		if (n == -EAGAIN)
			return;
		if (n > 0)
			p->len += (size_t)n;
		if (p->len >= 12 || n <= 0)
			break;
	}
	c->buf[p->len] = '\0';
	if (p->len >= 12 && memcmp(c->buf, "HTTP/1.", 7) == 0)
		status = atoi(c->buf + 9);
judge:
	if (status >= 200 && status < 400) {
		probe_end(p);
		check_passed(c);
		return;
	}
	char why[64];
	if (p->grpc)
		snprintf(why, sizeof(why), "grpc.health.v1 Check: not SERVING");
	else if (status)
		snprintf(why, sizeof(why), "%s answered %d", p->path, status);
	else
		snprintf(why, sizeof(why), "no HTTP status line");
	probe_fail(p, why);
}

static const struct probe_ops check_ops = {
    .readable = check_readable,
    .failed = check_failed,
    .skipped = check_skipped,
    .timed_out = "check timed out",
};

int health_start(struct loop *loop, struct runtime *rt, struct health **out)
{
	struct health *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->checks = calloc(rt->nbackends ? rt->nbackends : 1, sizeof(*h->checks));
	if (!h->checks) {
		free(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *pool = &rt->pools[i];
		const struct conf_health *hc = &pool->conf->health;
		if (!hc->enabled)
			continue;
		for (size_t j = 0; j < pool->nbackends; j++) {
			struct check *c = &h->checks[h->n++];
			c->pool = pool;
			c->probe = (struct probe){
			    .ops = &check_ops,
			    .loop = loop,
			    .be = &pool->backends[j],
			    .path = pool->conf->l4 ? NULL : hc->path, /* tcp: connect only */
			    .version = "1.1",
			    .headers = "User-Agent: accelnet-health\r\nConnection: close\r\n",
			    .interval_ms = hc->interval_ms,
			    .timeout_ms = hc->timeout_ms,
			    .h2 = pool->backends[j].conf->protocol != CONF_PROTO_HTTP1,
			    .grpc = hc->grpc != 0,
			};
			probe_start(&c->probe); /* the first check runs at once */
		}
	}
	*out = h;
	return 0;
}

void health_stop(struct health *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++)
		probe_stop(&h->checks[i].probe);
	free(h->checks);
	free(h);
}
