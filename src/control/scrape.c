/*
 * scrape.c - the scrapers behind scrape.h. Each is a probe (control/probe.h: one HTTP GET to
 * the backend from the main loop, connect, TLS handshake under pools.tls, timers and cleanup,
 * as a health check is) with a longer read: the answer to EOF, into a buffer that grows by
 * doubling up to max_bytes and is kept for the next scrape. A scrape that cannot start for
 * want of local resources (descriptors, memory) is skipped, as a health check is: it says
 * nothing about the engine.
 */
#include "control/scrape.h"
#include "core/log.h"
#include "obs/promtext.h"
#include "control/probe.h"
#include "policy/lora.h"
#include "policy/models.h"
#include "runtime/proxy_metric.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BUF_FIRST (16u << 10) /* the buffer's first size; it doubles up to max_bytes */

struct scraper {
	struct probe probe; /* probe.len: bytes of the answer in buf */
	struct pool_rt *pool;
	const struct conf_engine_metrics *em;
	char *buf;
	size_t cap;
};

struct scrape {
	struct scraper *sc;
	size_t n;
};

/* The gauges read, and which figure each feeds. */
enum figure { F_WAITING, F_RUNNING, F_KV };

static const struct {
	const char *name;
	enum figure fig;
} gauges[] = {
    {"vllm:num_requests_waiting", F_WAITING},
    {"vllm:num_requests_running", F_RUNNING},
    {"vllm:kv_cache_usage_perc", F_KV},
    {"vllm:gpu_cache_usage_perc", F_KV},
    {"sglang:num_queue_reqs", F_WAITING},
    {"sglang:num_running_reqs", F_RUNNING},
    {"sglang:token_usage", F_KV},
    {"tgi_queue_size", F_WAITING},
    {"tgi_batch_current_size", F_RUNNING},
};
#define NGAUGES (sizeof(gauges) / sizeof(gauges[0]))
#define W_RUNNING 1	/* want[] of vllm:num_requests_running: its model_name is read */
#define W_LORA NGAUGES	/* want[] of vllm:lora_requests_info, after the gauges */
#define LORA_NAMES 4096 /* bytes of one label's adapter names read */

/* vLLM's adapters: the labels of its latest sample (the value is when it was set) */
enum { L_RUNNING, L_WAITING, L_MAX };
static const char *const lora_labels[] = {"running_lora_adapters", "waiting_lora_adapters",
					  "max_lora"};
static const char *const base_labels[] = {"model_name"};

/* The hashes of the comma-separated names of <v> added to h[*n .. LORA_REMEMBER). */
static void lora_names(const struct promtext_span *v, uint64_t *h, size_t *n)
{
	char names[LORA_NAMES];
	size_t len = promtext_unescape(v, names, sizeof(names));
	for (size_t i = 0; i < len && *n < LORA_REMEMBER;) {
		size_t k = strcspn(names + i, ",");
		size_t s = i, e = i + k;
		while (s < e && names[s] == ' ')
			s++;
		while (e > s && names[e - 1] == ' ')
			e--;
		if (e > s)
			h[(*n)++] = models_hash(names + s, e - s);
		i += k + 1;
	}
}

/*
 * What <sc>'s engine said of its LoRA adapters (<lora>) and its base model (<base>, the
 * model_name of its running gauge): folded into its backend's snapshot, which the picks read
 * (policy/lora.h). An engine that says nothing of adapters leaves a snapshot without them.
 */
static void report_lora(struct scraper *sc, const struct promtext_want *lora,
			const struct promtext_span *base)
{
	struct backend *b = sc->probe.be;
	uint64_t act[LORA_REMEMBER];
	size_t nact = 0;
	uint32_t max = 0;
	if (lora->samples && lora->label[L_MAX].p) {
		char num[16];
		promtext_unescape(&lora->label[L_MAX], num, sizeof(num));
		unsigned long v = strtoul(num, NULL, 10);
		max = v > 1000000 ? 1000000 : (uint32_t)v;
	}
	if (max) {
		lora_names(&lora->label[L_RUNNING], act, &nact);
		lora_names(&lora->label[L_WAITING], act, &nact);
	}
	char name[CONF_MODEL_MAX + 1];
	size_t blen = base->p ? promtext_unescape(base, name, sizeof(name)) : 0;
	lora_fold(&b->lora, act, nact, max, blen ? models_hash(name, blen) : 0);
	if (max && !atomic_load_explicit(&sc->pool->lora_seen, memory_order_relaxed))
		atomic_store_explicit(&sc->pool->lora_seen, 1, memory_order_relaxed);
}

static void scraper_failed(struct probe *p, const char *why)
{
	backend_count(p->be, PM_BACKEND_ENGINE_SCRAPE_FAILURES, 1);
	log_warn_every(10000, "engine metrics of backend %s (pool %s): %s", p->be->name,
		       p->be->pool->name, why);
}

static void scraper_skipped(struct probe *p, int err)
{
	log_warn_every(10000,
		       "engine metrics of backend %s (pool %s) not scraped: %s here, which is "
		       "not the backend's fault",
		       p->be->name, p->be->pool->name, strerror(-err));
}

/* The whole answer is in buf: read the figures out of it and report them. */
static void scraper_done(struct scraper *sc)
{
	struct probe *p = &sc->probe;
	const char *buf = sc->buf;
	size_t len = p->len;
	char why[96];
	int status = 0;
	if (len >= 12 && memcmp(buf, "HTTP/1.", 7) == 0 && buf[8] == ' ')
		status = atoi(buf + 9);
	const char *end = memmem(buf, len, "\r\n\r\n", 4);
	if (status != 200 || !end) {
		snprintf(why, sizeof(why), "%s answered %s%d", p->path,
			 status ? "" : "no HTTP status: ", status);
		probe_fail(p, why);
		return;
	}
	size_t head = (size_t)(end - buf) + 4;
	/* HTTP/1.0 asked for: a chunked answer would be a broken server; refuse, not misread */
	for (const char *h = buf + 1; h + 18 <= end; h++)
		if (h[-1] == '\n' && strncasecmp(h, "transfer-encoding:", 18) == 0) {
			probe_fail(p, "a chunked answer to an HTTP/1.0 request");
			return;
		}
	struct promtext_want want[NGAUGES + 1];
	for (size_t i = 0; i < NGAUGES; i++)
		want[i] = (struct promtext_want){.name = gauges[i].name};
	want[W_RUNNING].labels = base_labels;
	want[W_RUNNING].nlabels = 1;
	want[W_LORA] = (struct promtext_want){
	    .name = "vllm:lora_requests_info", .labels = lora_labels, .nlabels = 3};
	if (promtext_read(buf + head, len - head, want, NGAUGES + 1) < 0) {
		probe_fail(p, "the answer is not Prometheus text");
		return;
	}
	double fig[3] = {0, 0, 0};
	unsigned found[3] = {0, 0, 0};
	for (size_t i = 0; i < NGAUGES; i++) {
		fig[gauges[i].fig] += want[i].sum;
		found[gauges[i].fig] += want[i].samples;
	}
	if (!found[F_WAITING] && !found[F_RUNNING]) {
		probe_fail(p, "none of the vLLM, SGLang or TGI queue gauges in the answer");
		return;
	}
	probe_end(p);
	report_lora(sc, &want[W_LORA], &want[W_RUNNING].label[0]);
	backend_report_engine(p->be, loop_now(p->loop), fig[F_RUNNING] > 0 ? fig[F_RUNNING] : 0,
			      fig[F_WAITING] > 0 ? fig[F_WAITING] : 0,
			      found[F_KV] ? fig[F_KV] / found[F_KV] : -1);
	backend_count(p->be, PM_BACKEND_ENGINE_SCRAPES, 1);
}

/* Room for more of the answer: 0, 1 when it would pass max_bytes, -ENOMEM. */
static int scraper_room(struct scraper *sc)
{
	if (sc->probe.len < sc->cap)
		return 0;
	if (sc->cap > sc->em->max_bytes)
		return 1;
	size_t cap = sc->cap ? 2 * sc->cap : BUF_FIRST;
	if (cap > sc->em->max_bytes + 1)
		cap = (size_t)sc->em->max_bytes + 1; /* one byte past: "too large" shows */
	char *nb = realloc(sc->buf, cap);
	if (!nb)
		return -ENOMEM;
	sc->buf = nb;
	sc->cap = cap;
	return 0;
}

/* Read the answer to EOF (HTTP/1.0), within max_bytes. */
static void scraper_readable(struct probe *p)
{
	struct scraper *sc = container_of(p, struct scraper, probe);
	for (;;) {
		int room = scraper_room(sc);
		if (room < 0) {
			probe_skip(p, room);
			return;
		}
		if (room > 0) {
			char why[80];
			snprintf(why, sizeof(why), "the answer is longer than max_bytes (%llu)",
				 (unsigned long long)sc->em->max_bytes);
			probe_fail(p, why);
			return;
		}
		ssize_t n = net_conn_read(&p->nc, sc->buf + p->len, sc->cap - p->len);
		if (n == -EAGAIN)
			return;
		if (n < 0) {
			probe_fail(p, "the connection failed while reading");
			return;
		}
		if (n == 0)
			break;
		p->len += (size_t)n;
	}
	scraper_done(sc);
}

static const struct probe_ops scraper_ops = {
    .readable = scraper_readable,
    .failed = scraper_failed,
    .skipped = scraper_skipped,
    .timed_out = "no whole answer within timeout_ms",
};

int scrape_start(struct loop *loop, struct runtime *rt, struct scrape **out)
{
	struct scrape *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->sc = calloc(rt->nbackends ? rt->nbackends : 1, sizeof(*s->sc));
	if (!s->sc) {
		free(s);
		return -ENOMEM;
	}
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *pool = &rt->pools[i];
		const struct conf_engine_metrics *em = &pool->conf->engine_metrics;
		if (!em->enabled)
			continue;
		for (size_t j = 0; j < pool->nbackends; j++) {
			struct scraper *sc = &s->sc[s->n++];
			sc->em = em;
			sc->pool = pool;
			sc->probe = (struct probe){
			    .ops = &scraper_ops,
			    .loop = loop,
			    .be = &pool->backends[j],
			    .path = em->path,
			    .version = "1.0", /* the answer ends when the engine closes */
			    .headers = "User-Agent: accelnet-scrape\r\n"
				       "Accept: text/plain;version=0.0.4\r\n",
			    .interval_ms = em->interval_ms,
			    .timeout_ms = em->timeout_ms,
			};
			probe_start(&sc->probe); /* the first scrape runs at once */
		}
	}
	*out = s;
	return 0;
}

void scrape_stop(struct scrape *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		probe_stop(&s->sc[i].probe);
		free(s->sc[i].buf);
	}
	free(s->sc);
	free(s);
}
