/*
 * debugreq.c - the snapshots of /debug/requests, the slowest recent exchanges, and the
 * X-Accelnet-Timing value (see debugreq.h).
 *
 * Every record is filled on the worker that owns the exchange, into memory of that worker's
 * (its slow lists, its snapshot); the admin thread reads a snapshot only once the worker has
 * published it, and writes the document from those copies alone. The ending exchanges come
 * through its end hook (debugreq_hook, xhooks.h); it keeps no context of its own, and shows
 * the method and path the access log copied (access.h) when it did, the prefill backend of a
 * disaggregated pool (pd.h), and balance: llm's decision as llm_explain.c keeps it.
 */
#include "proxy/debugreq.h"
#include "core/clock.h"
#include "proxy/access.h"
#include "proxy/pace.h"
#include "proxy/pd.h"
#include "runtime/proxy_metric.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct debugreq_board *debugreq_board_new(unsigned nworkers)
{
	struct debugreq_board *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	size_t size = (size_t)(nworkers ? nworkers : 1) * sizeof(*b->w);
	b->w = aligned_alloc(64, (size + 63) / 64 * 64);
	if (!b->w) {
		free(b);
		return NULL;
	}
	memset(b->w, 0, size);
	b->nworkers = nworkers;
	return b;
}

void debugreq_board_free(struct debugreq_board *b)
{
	if (!b)
		return;
	free(b->w);
	free(b);
}

/* --- records, on the worker --- */

static void copy_str(char *dst, size_t cap, const char *s)
{
	size_t n = s ? strnlen(s, cap - 1) : 0;
	memcpy(dst, s ? s : "", n);
	dst[n] = 0;
}

static const char *method_name(enum http_method m)
{
	static const char *const names[] = {
	    [HTTP_OTHER] = "",		[HTTP_GET] = "GET",	[HTTP_HEAD] = "HEAD",
	    [HTTP_POST] = "POST",	[HTTP_PUT] = "PUT",	[HTTP_DELETE] = "DELETE",
	    [HTTP_OPTIONS] = "OPTIONS", [HTTP_TRACE] = "TRACE", [HTTP_PATCH] = "PATCH",
	    [HTTP_CONNECT] = "CONNECT",
	};
	return (unsigned)m < sizeof(names) / sizeof(names[0]) ? names[m] : "";
}

static const char *state_of(const struct exchange *x)
{
	if (exchange_pace(x)->buffering)
		return "reading body";
	if (x->wt.state != W_IDLE)
		return "queued";
	if (x->att->up && x->att->up->connecting)
		return "connecting";
	if (x->att->up && !x->resp_head)
		return "waiting for backend";
	if (x->resp_head)
		return x->resp.done ? "sending to client" : "relaying";
	return "starting";
}

static void fill_rec(struct debugreq_rec *r, const struct exchange *x, uint64_t now_ns)
{
	const struct worker *w = x->w;
	memcpy(r->reqid, x->names.reqid, sizeof(r->reqid));
	memcpy(r->trace_id, x->names.traceparent + 3, TRACE_ID_HEX);
	r->trace_id[TRACE_ID_HEX] = 0;
	copy_str(r->client, sizeof(r->client), x->peer.ip);
	const char *method, *path;
	int cut;
	if (access_request_line(x, &method, &path, &cut)) {
		copy_str(r->method, sizeof(r->method), method);
		copy_str(r->path, sizeof(r->path), path);
		r->path_cut = cut || strlen(path) > DEBUGREQ_PATH_MAX;
	} else {
		copy_str(r->method, sizeof(r->method), method_name(x->meth));
		copy_str(r->path, sizeof(r->path), "");
		r->path_cut = 0;
	}
	r->protocol = client_proto_names[x->protocol];
	copy_str(r->pool, sizeof(r->pool), x->pool ? x->pool->conf->name : NULL);
	copy_str(r->backend, sizeof(r->backend), x->log.backend ? x->log.backend->name : NULL);
	copy_str(r->prefill_backend, sizeof(r->prefill_backend), pd_prefill_backend(x));
	r->route = x->route ? (int)(x->route - w->conf->routes) : -1;
	r->worker = w->id;
	r->bytes_in = x->log.head_len + x->req.sent;
	r->bytes_out = x->log.status ? x->log.bytes_out : x->resp.sent;
	r->queue_us = exchange_queue_us(x, loop_now(x->w->loop));
	r->connect_us = exchange_us_between(x->log.dispatch_ns, x->log.conn_ns);
	r->ttfb_us = exchange_us_between(x->log.start_ns, x->log.ttfb_ns);
	r->total_us = exchange_us_between(x->log.start_ns, now_ns);
	llm_explain_view(x, &r->llm);
}

/* A new window: the current one becomes the one before (or both go, when stale). */
static void slow_rotate(struct debugreq_worker *d, uint64_t now)
{
	if (now - d->window_ms < DEBUGREQ_WINDOW_MS)
		return;
	if (now - d->window_ms < 2 * DEBUGREQ_WINDOW_MS && d->nslow[0]) {
		memcpy(d->slow[1], d->slow[0], d->nslow[0] * sizeof(d->slow[0][0]));
		d->nslow[1] = d->nslow[0];
	} else {
		d->nslow[1] = 0;
	}
	d->nslow[0] = 0;
	d->slow_min = 0;
	d->window_ms = now;
}

void debugreq_note_end(const struct exchange *x)
{
	struct debugreq_worker *d = x->w->dbg;
	if (!d)
		return;
	uint64_t now = loop_now(x->w->loop);
	slow_rotate(d, now);
	uint64_t key = now - x->log.start_ms;
	unsigned at;
	if (d->nslow[0] < DEBUGREQ_SLOW) {
		at = d->nslow[0]++;
	} else {
		if (key <= d->slow_min)
			return; /* the usual case: not among the slowest */
		at = d->slow_min_at;
	}
	struct debugreq_rec *r = &d->slow[0][at];
	fill_rec(r, x, clock_now_ns());
	r->state = NULL;
	r->status = x->log.status ? x->log.status : x->resp_head ? x->status : 0;
	r->ended_ms = now;
	d->slow_key[at] = key;
	if (d->nslow[0] == DEBUGREQ_SLOW) {
		d->slow_min_at = 0;
		for (unsigned i = 1; i < DEBUGREQ_SLOW; i++)
			if (d->slow_key[i] < d->slow_key[d->slow_min_at])
				d->slow_min_at = i;
		d->slow_min = d->slow_key[d->slow_min_at];
	}
}

static void debugreq_end(struct exchange *x, uint64_t now_ns)
{
	(void)now_ns;
	debugreq_note_end(x);
}

const struct xhook debugreq_hook = {
    .name = "debug_requests",
    .always = 1, /* every exchange may be the one asked for */
    .end = debugreq_end,
};

void debugreq_peek(struct worker *w)
{
	struct debugreq_worker *d = w->dbg;
	if (!d)
		return;
	uint64_t want = atomic_load_explicit(&d->want, memory_order_acquire);
	if (want == atomic_load_explicit(&d->done, memory_order_relaxed))
		return;
	uint64_t now_ns = clock_now_ns(), now = loop_now(w->loop);
	d->nlive = (unsigned)w->live_exchanges.count;
	d->ninflight = 0;
	for (struct list_node *n = list_first(&w->live_exchanges);
	     n && d->ninflight < DEBUGREQ_INFLIGHT; n = list_next(&w->live_exchanges, n)) {
		const struct exchange *x = container_of(n, struct exchange, link);
		struct debugreq_rec *r = &d->inflight[d->ninflight++];
		fill_rec(r, x, now_ns);
		r->state = state_of(x);
		r->status = 0;
	}
	slow_rotate(d, now);
	d->nslowsnap = 0;
	for (unsigned k = 0; k < 2; k++)
		for (unsigned i = 0; i < d->nslow[k]; i++) {
			struct debugreq_rec *r = &d->slowsnap[d->nslowsnap++];
			*r = d->slow[k][i];
			r->ago_ms = now > r->ended_ms ? now - r->ended_ms : 0;
		}
	atomic_store_explicit(&d->done, want, memory_order_release);
}

int debugreq_timing(const struct exchange *x, int whole, char *out, size_t cap)
{
	struct {
		const char *name;
		uint32_t us;
	} part[] = {
	    {"queue", exchange_queue_us(x, loop_now(x->w->loop))},
	    {"connect", exchange_us_between(x->log.dispatch_ns, x->log.conn_ns)},
	    {"backend", exchange_us_between(x->log.conn_ns, x->log.ttfb_ns)},
	    {"ttfb", exchange_us_between(x->log.start_ns, x->log.ttfb_ns)},
	    {"total", whole ? exchange_us_between(x->log.start_ns, clock_now_ns()) : UINT32_MAX},
	};
	size_t len = 0;
	for (size_t i = 0; i < sizeof(part) / sizeof(part[0]); i++) {
		if (part[i].us == UINT32_MAX)
			continue;
		int n = snprintf(out + len, cap - len, "%s%s;dur=%u.%03u", len ? ", " : "",
				 part[i].name, part[i].us / 1000, part[i].us % 1000);
		if (n < 0 || (size_t)n >= cap - len)
			return -1;
		len += (size_t)n;
	}
	return (int)len;
}

/* --- the document, on the admin thread --- */

void debugreq_ask(struct debugreq_board *b)
{
	for (unsigned i = 0; i < b->nworkers; i++) {
		struct debugreq_worker *d = &b->w[i];
		atomic_store_explicit(&d->want,
				      atomic_load_explicit(&d->want, memory_order_relaxed) + 1,
				      memory_order_release);
		if (d->loop)
			loop_wake(d->loop);
	}
}

static int worker_answered(const struct debugreq_worker *d)
{
	return atomic_load_explicit(&d->done, memory_order_acquire) ==
	       atomic_load_explicit(&d->want, memory_order_relaxed);
}

int debugreq_answered(const struct debugreq_board *b)
{
	for (unsigned i = 0; i < b->nworkers; i++)
		if (!worker_answered(&b->w[i]))
			return 0;
	return 1;
}

/* <s> as a JSON string: ", \ and every byte below 0x20 or from 0x7f escaped (ASCII out). */
static void put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c < 0x20 || *c >= 0x7f)
			fprintf(f, "\\u%04x", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

static void put_str_field(FILE *f, const char *key, const char *v)
{
	fprintf(f, ",\"%s\":", key);
	if (*v)
		put_string(f, v);
	else
		fputs("null", f);
}

static void put_ms_field(FILE *f, const char *key, uint32_t us)
{
	if (us == UINT32_MAX)
		fprintf(f, ",\"%s\":null", key);
	else
		fprintf(f, ",\"%s\":%u.%03u", key, us / 1000, us % 1000);
}

static void put_ms(FILE *f, const char *key, uint32_t us)
{
	fprintf(f, "\"%s\":%u.%03u", key, us / 1000, us % 1000);
}

/* balance: llm's decision (llm_explain.h): the estimates first, what happened after. */
static void put_llm(FILE *f, const struct llm_explain_view *v)
{
	fprintf(f, ",\"llm\":{\"reason\":\"%s\",\"pick\":", lb_why_name(v->why));
	if (v->picked)
		put_string(f, v->cand[0].name);
	else
		fputs("null", f);
	fprintf(f,
		",\"waited_for_affinity\":%s,\"queued_ms\":%u,\"prompt_blocks\":%u,"
		"\"candidates_up\":%u,\"candidates\":[",
		v->waited ? "true" : "false", v->waited_ms, v->blocks, v->nseen);
	for (unsigned k = 0; k < v->ncand; k++) {
		const struct lb_estimate *e = &v->cand[k].e;
		fputs(k ? ",{\"backend\":" : "{\"backend\":", f);
		put_string(f, v->cand[k].name);
		fprintf(f, ",\"busy\":%s,\"inflight\":%u,\"slots\":%u,\"hit_blocks\":%u,",
			e->busy ? "true" : "false", e->inflight, e->slots, e->hit_blocks);
		put_ms(f, "wait_ms", e->wait_us);
		fputc(',', f);
		put_ms(f, "base_ms", e->base_us);
		fputc(',', f);
		put_ms(f, "per_block_ms", e->block_us);
		fputc(',', f);
		put_ms(f, "ttft_ms", e->expect_us);
		fputc('}', f);
	}
	fputs("],\"answered_by\":", f);
	if (v->answered[0])
		put_string(f, v->answered);
	else
		fputs("null", f);
	if (v->picked) {
		fputc(',', f);
		put_ms(f, "predicted_ttft_ms", v->cand[0].e.expect_us);
		fprintf(f, ",\"predicted_hit_blocks\":%u", v->cand[0].e.hit_blocks);
	} else {
		fputs(",\"predicted_ttft_ms\":null,\"predicted_hit_blocks\":null", f);
	}
	if (v->has_measured) {
		fputc(',', f);
		put_ms(f, "measured_ttft_ms", v->measured_us);
	} else {
		fputs(",\"measured_ttft_ms\":null", f);
	}
	if (v->has_reported)
		fprintf(f, ",\"reported_cached_tokens\":%" PRIu64 ",\"reported_hit_blocks\":%u}",
			v->cached_tokens, v->reported_blocks);
	else
		fputs(",\"reported_cached_tokens\":null,\"reported_hit_blocks\":null}", f);
}

static void put_rec(FILE *f, const struct debugreq_rec *r)
{
	fprintf(f, "{\"worker\":%u", r->worker);
	put_str_field(f, "request_id", r->reqid);
	put_str_field(f, "trace_id", r->trace_id);
	if (r->state) {
		put_str_field(f, "state", r->state);
		put_ms_field(f, "age_ms", r->total_us);
	} else {
		fprintf(f, ",\"status\":%d,\"ended_ms_ago\":%" PRIu64, r->status, r->ago_ms);
		put_ms_field(f, "total_ms", r->total_us);
	}
	put_str_field(f, "client", r->client);
	put_str_field(f, "method", r->method);
	put_str_field(f, "protocol", r->protocol);
	if (r->path[0]) {
		fputs(",\"path\":", f);
		char cut[DEBUGREQ_PATH_MAX + 4];
		snprintf(cut, sizeof(cut), "%s%s", r->path, r->path_cut ? "..." : "");
		put_string(f, cut);
	} else {
		fputs(",\"path\":null", f);
	}
	if (r->route < 0)
		fputs(",\"route\":null", f);
	else
		fprintf(f, ",\"route\":%d", r->route);
	put_str_field(f, "pool", r->pool);
	put_str_field(f, "backend", r->backend);
	if (r->prefill_backend[0])
		put_str_field(f, "prefill_backend", r->prefill_backend);
	fprintf(f, ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64, r->bytes_in, r->bytes_out);
	put_ms_field(f, "queue_ms", r->queue_us);
	put_ms_field(f, "connect_ms", r->connect_us);
	put_ms_field(f, "ttfb_ms", r->ttfb_us);
	if (r->llm.has)
		put_llm(f, &r->llm);
	fputc('}', f);
}

static int by_age(const void *a, const void *b)
{
	const struct debugreq_rec *x = *(const struct debugreq_rec *const *)a;
	const struct debugreq_rec *y = *(const struct debugreq_rec *const *)b;
	return (x->total_us < y->total_us) - (x->total_us > y->total_us); /* longest first */
}

int debugreq_write(const struct debugreq_board *b, FILE *f)
{
	size_t cap =
	    (size_t)b->nworkers * 2 * DEBUGREQ_SLOW + (size_t)b->nworkers * DEBUGREQ_INFLIGHT;
	const struct debugreq_rec **list = malloc((cap ? cap : 1) * sizeof(*list));
	unsigned char *answered = calloc(b->nworkers ? b->nworkers : 1, 1);
	if (!list || !answered) {
		free(list);
		free(answered);
		return -ENOMEM;
	}
	size_t nin = 0, nslow = 0;
	uint64_t live = 0;
	fputs("{\"silent_workers\":[", f);
	int first = 1;
	for (unsigned i = 0; i < b->nworkers; i++) {
		const struct debugreq_worker *d = &b->w[i];
		if (!(answered[i] = (unsigned char)worker_answered(d))) {
			fprintf(f, "%s%u", first ? "" : ",", i);
			first = 0;
			continue;
		}
		live += d->nlive;
		for (unsigned k = 0; k < d->ninflight; k++)
			list[nin++] = &d->inflight[k];
	}
	qsort(list, nin, sizeof(*list), by_age);
	fprintf(f, "],\"in_flight_count\":%" PRIu64 ",\"in_flight\":[", live);
	for (size_t k = 0; k < nin && k < DEBUGREQ_SHOW_INFLIGHT; k++) {
		fputs(k ? "," : "", f);
		put_rec(f, list[k]);
	}
	for (unsigned i = 0; i < b->nworkers; i++) {
		const struct debugreq_worker *d = &b->w[i];
		if (!answered[i])
			continue;
		for (unsigned k = 0; k < d->nslowsnap; k++)
			list[nslow++] = &d->slowsnap[k];
	}
	qsort(list, nslow, sizeof(*list), by_age);
	fprintf(f, "],\"slowest_window_s\":%u,\"slowest\":[", 2 * DEBUGREQ_WINDOW_MS / 1000);
	for (size_t k = 0; k < nslow && k < DEBUGREQ_SHOW_SLOW; k++) {
		fputs(k ? "," : "", f);
		put_rec(f, list[k]);
	}
	fputs("]}\n", f);
	free(list);
	free(answered);
	return 0;
}
