/*
 * admin.c - /status and /metrics, written with open_memstream into one response body.
 */
#include "proxy/admin.h"
#include "core/clock.h"
#include "http/server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

struct admin {
	struct hsrv *srv;
	struct runtime *rt;
};

static const char *const class_names[6] = {"aborted", "1xx", "2xx", "3xx", "4xx", "5xx"};

#define LOAD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

static void write_status(FILE *f, struct runtime *rt)
{
	uint64_t now = clock_now_ms();
	fprintf(f, "{\"pools\":[");
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		fprintf(f,
			"%s{\"name\":\"%s\",\"balance\":\"%s\",\"unavailable\":%llu,"
			"\"queue\":{\"length\":%u,\"enqueued\":%llu,\"granted\":%llu,"
			"\"timeouts\":%llu,\"overflows\":%llu},\"backends\":[",
			i ? "," : "", p->conf->name, p->conf->balance->name, LOAD(p->unavailable),
			pool_queue_len(&p->queue), LOAD(p->queue.enqueued), LOAD(p->queue.granted),
			LOAD(p->queue.timeouts), LOAD(p->queue.overflows));
		for (size_t j = 0; j < p->nbackends; j++) {
			struct backend *b = &p->backends[j];
			fprintf(f,
				"%s{\"address\":\"%s\",\"weight\":%u,\"up\":%s,\"eligible\":%s,"
				"\"inflight\":%llu,\"requests\":%llu,\"connect_failures\":%llu,"
				"\"retries\":%llu,\"responses\":{",
				j ? "," : "", b->name, b->conf->weight,
				atomic_load(&b->up) ? "true" : "false",
				backend_eligible(b, now) ? "true" : "false", LOAD(b->inflight),
				LOAD(b->requests), LOAD(b->connect_failures), LOAD(b->retries));
			for (int k = 0; k < 6; k++)
				fprintf(f, "%s\"%s\":%llu", k ? "," : "", class_names[k],
					LOAD(b->responses[k]));
			fprintf(f, "}}");
		}
		fprintf(f, "]}");
	}
	fprintf(f, "]}\n");
}

static void write_metrics(FILE *f, struct runtime *rt)
{
	static const struct {
		const char *name, *type, *help;
	} m[] = {
		{"accelnet_backend_up", "gauge", "1 if active health checks find the backend up"},
		{"accelnet_backend_inflight", "gauge", "requests in flight to the backend"},
		{"accelnet_backend_requests_total", "counter", "requests sent to the backend"},
		{"accelnet_backend_connect_failures_total", "counter", "failed connects"},
		{"accelnet_backend_retries_total", "counter", "requests retried elsewhere"},
		{"accelnet_backend_responses_total", "counter", "responses by status class"},
	};
	for (size_t k = 0; k < sizeof(m) / sizeof(m[0]); k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help, m[k].name,
			m[k].type);
		for (size_t i = 0; i < rt->npools; i++) {
			struct pool_rt *p = &rt->pools[i];
			for (size_t j = 0; j < p->nbackends; j++) {
				struct backend *b = &p->backends[j];
				unsigned long long v[] = {
					(unsigned long long)atomic_load(&b->up), LOAD(b->inflight),
					LOAD(b->requests), LOAD(b->connect_failures), LOAD(b->retries)};
				if (k < 5) {
					fprintf(f, "%s{pool=\"%s\",backend=\"%s\"} %llu\n", m[k].name,
						p->conf->name, b->name, v[k]);
					continue;
				}
				for (int c = 0; c < 6; c++)
					fprintf(f, "%s{pool=\"%s\",backend=\"%s\",class=\"%s\"} %llu\n",
						m[k].name, p->conf->name, b->name, class_names[c],
						LOAD(b->responses[c]));
			}
		}
	}
	fprintf(f, "# HELP accelnet_pool_unavailable_total requests turned away with no backend to serve them\n"
		   "# TYPE accelnet_pool_unavailable_total counter\n");
	for (size_t i = 0; i < rt->npools; i++)
		fprintf(f, "accelnet_pool_unavailable_total{pool=\"%s\"} %llu\n",
			rt->pools[i].conf->name, LOAD(rt->pools[i].unavailable));
	fprintf(f, "# HELP accelnet_pool_queue_length requests waiting for a backend slot\n"
		   "# TYPE accelnet_pool_queue_length gauge\n");
	for (size_t i = 0; i < rt->npools; i++)
		fprintf(f, "accelnet_pool_queue_length{pool=\"%s\"} %u\n", rt->pools[i].conf->name,
			pool_queue_len(&rt->pools[i].queue));
	static const char *const qnames[] = {"enqueued", "granted", "timeouts", "overflows"};
	for (int k = 0; k < 4; k++) {
		fprintf(f, "# HELP accelnet_pool_queue_%s_total queue %s\n"
			   "# TYPE accelnet_pool_queue_%s_total counter\n",
			qnames[k], qnames[k], qnames[k]);
		for (size_t i = 0; i < rt->npools; i++) {
			struct pool_queue *q = &rt->pools[i].queue;
			atomic_uint_fast64_t *v[] = {&q->enqueued, &q->granted, &q->timeouts,
						     &q->overflows};
			fprintf(f, "accelnet_pool_queue_%s_total{pool=\"%s\"} %llu\n", qnames[k],
				rt->pools[i].conf->name, LOAD(*v[k]));
		}
	}
}

static void admin_on_request(void *arg, struct hsrv_conn *c, const struct http_head *req,
			     const char *body, size_t body_len)
{
	struct admin *a = arg;
	char *text = NULL;
	size_t len = 0;
	(void)body;
	(void)body_len;
	int status = http_str_eq(req->path, "/status")	  ? 1
		     : http_str_eq(req->path, "/metrics") ? 2
							  : 0;
	if (!status || (req->meth != HTTP_GET && req->meth != HTTP_HEAD)) {
		static const char msg[] = "not found: try /status or /metrics\n";
		hsrv_respond(c, 404, "text/plain", "", msg, sizeof(msg) - 1);
		return;
	}
	FILE *f = open_memstream(&text, &len);
	if (!f) {
		hsrv_respond(c, 500, "text/plain", "", "out of memory\n", 14);
		return;
	}
	if (status == 1)
		write_status(f, a->rt);
	else
		write_metrics(f, a->rt);
	fclose(f);
	hsrv_respond(c, 200, status == 1 ? "application/json" : "text/plain; version=0.0.4", "",
		     text, len);
	free(text);
}

int admin_start(struct loop *loop, const struct net_addr *addr, struct runtime *rt,
		struct admin **out)
{
	struct admin *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->rt = rt;
	int err = hsrv_start(loop, addr, admin_on_request, a, &a->srv);
	if (err) {
		free(a);
		return err;
	}
	*out = a;
	return 0;
}

void admin_stop(struct admin *a)
{
	if (!a)
		return;
	hsrv_stop(a->srv);
	free(a);
}
