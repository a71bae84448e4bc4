/*
 * sim.c - the simulated accelerator.
 *
 * A job is one inference request. It is either waiting (on the FIFO queue) or active
 * (holding a slot, driven by its timer): first the time to first token, then one tick per
 * token. When a job ends -- done, failed, or abandoned by its client -- its slot goes to
 * the head of the queue. Nothing here blocks; all waiting is timers on the loop.
 */
#include "sim/sim.h"
#include "core/clock.h"
#include "core/list.h"
#include "core/log.h"
#include "core/rand.h"
#include "http/prompt.h"
#include "http/server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sim_job {
	struct sim *sim;
	struct hsrv_conn *conn;
	struct loop_timer timer;
	struct list_node link; /* on the queue while waiting */
	unsigned long id;
	unsigned tokens, sent;
	unsigned prompt_tokens;
	uint64_t prefix; /* prompt prefix hash */
	int has_prefix;
	int cache_hit; /* the prefix was cached: a short time to first token */
	int stream, chat, active, headers_sent;
	int stream_usage; /* stream_options.include_usage: a last chunk with the usage */
	uint64_t queued_at_ms, wait_ms;
	uint64_t service_ms; /* planned: to the first token, and (not streamed) every token */
};

struct sim {
	struct sim_opts opts;
	struct loop *loop;
	struct hsrv *srv;
	struct list_head queue; /* waiting jobs, in arrival order */
	unsigned active, waiting, max_waiting, max_active;
	unsigned long requests, completions, failures, aborted, next_id;
	unsigned long cache_hits, cache_misses;
	uint64_t *cache; /* prompt prefixes, most recent first */
	unsigned ncache;
	uint64_t rng;
	uint64_t start_ms;
	char served_by[96];
};

void sim_opts_default(struct sim_opts *o)
{
	const char *why;
	memset(o, 0, sizeof(*o));
	net_addr_parse("127.0.0.1:9101", &o->addr, &why);
	snprintf(o->name, sizeof(o->name), "sim");
	o->slots = 4;
	o->latency_ms = 100;
	o->jitter = 0.1;
	o->tokens = 16;
	o->token_ms = 20;
}

static void job_free(struct sim_job *j)
{
	free(j);
}

static void sim_start_next(struct sim *s);

static void job_release(struct sim_job *j)
{
	struct sim *s = j->sim;
	loop_timer_stop(s->loop, &j->timer);
	if (j->active) {
		s->active--;
		j->active = 0;
	}
	job_free(j);
	sim_start_next(s);
}

static void job_on_abort(void *arg)
{
	struct sim_job *j = arg;
	struct sim *s = j->sim;
	s->aborted++;
	if (!j->active) {
		if (list_linked(&j->link)) {
			list_del(&s->queue, &j->link);
			s->waiting--;
		}
	}
	job_release(j);
}

static void job_headers(struct sim_job *j, char *out, size_t len)
{
	/* X-Queue-Depth: requests waiting inside this accelerator, for balancers that read
	 * backend load signals (the proxy's pools.load_header) */
	snprintf(out, len,
		 "%sX-Sim-Wait-Ms: %llu\r\nX-Sim-Service-Ms: %llu\r\nX-Queue-Depth: %u\r\n%s",
		 j->sim->served_by, (unsigned long long)j->wait_ms,
		 (unsigned long long)j->service_ms, j->sim->waiting,
		 !j->sim->opts.prefix_cache ? ""
		 : j->cache_hit		    ? "X-Prefix-Cache: hit\r\n"
					    : "X-Prefix-Cache: miss\r\n");
}

static void job_fail(struct sim_job *j)
{
	char headers[384], body[160];
	int n = snprintf(
	    body, sizeof(body),
	    "{\"error\":{\"message\":\"simulated failure on %s\",\"type\":\"server_error\"}}",
	    j->sim->opts.name);
	if (n < 0 || (size_t)n >= sizeof(body))
		n = n < 0 ? 0 : (int)sizeof(body) - 1;
	j->sim->failures++;
	job_headers(j, headers, sizeof(headers));
	hsrv_respond(j->conn, 500, "application/json", headers, body, (size_t)n);
	job_release(j);
}

static int token_event(struct sim_job *j, char *out, size_t len)
{
	const char *name = j->sim->opts.name;
	unsigned long long sent = (unsigned long long)clock_now_ns();
	if (j->chat)
		return snprintf(
		    out, len,
		    "data: {\"id\":\"chatcmpl-%lu\",\"object\":\"chat.completion.chunk\","
		    "\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":"
		    "\"tok%u \"},\"finish_reason\":null}],\"sent_ns\":%llu}\n\n",
		    j->id, name, j->sent, sent);
	return snprintf(
	    out, len,
	    "data: {\"id\":\"cmpl-%lu\",\"object\":\"text_completion\",\"model\":\"%s\","
	    "\"choices\":[{\"index\":0,\"text\":\"tok%u \",\"finish_reason\":null}],"
	    "\"sent_ns\":%llu}\n\n",
	    j->id, name, j->sent, sent);
}

/* When the accelerator is frozen at <now>, the time the freeze ends; else 0. */
static uint64_t sim_stall_end(const struct sim *s, uint64_t now)
{
	uint64_t every = s->opts.stall_every_ms, stall = s->opts.stall_ms;
	if (!every || !stall)
		return 0;
	uint64_t phase = (now - s->start_ms) % every;
	return phase >= every - stall ? now + (every - phase) : 0;
}

static void job_finish_whole(struct sim_job *j)
{
	struct sim *s = j->sim;
	char headers[384];
	size_t cap = 512 + (size_t)j->tokens * 12, used = 0;
	char *body = malloc(cap);
	if (!body) {
		job_fail(j);
		return;
	}
	if (j->chat)
		used += (size_t)snprintf(body, cap,
					 "{\"id\":\"chatcmpl-%lu\",\"object\":\"chat.completion\","
					 "\"model\":\"%s\",\"choices\":[{\"index\":0,\"message\":"
					 "{\"role\":\"assistant\",\"content\":\"",
					 j->id, s->opts.name);
	else
		used += (size_t)snprintf(body, cap,
					 "{\"id\":\"cmpl-%lu\",\"object\":\"text_completion\","
					 "\"model\":\"%s\",\"choices\":[{\"index\":0,\"text\":\"",
					 j->id, s->opts.name);
	for (unsigned i = 0; i < j->tokens; i++)
		used += (size_t)snprintf(body + used, cap - used, "tok%u ", i);
	used += (size_t)snprintf(
	    body + used, cap - used,
	    "\"%s,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":%u,"
	    "\"completion_tokens\":%u,\"total_tokens\":%u}}\n",
	    j->chat ? "}" : "", j->prompt_tokens, j->tokens, j->prompt_tokens + j->tokens);
	s->completions++;
	job_headers(j, headers, sizeof(headers));
	hsrv_respond(j->conn, 200, "application/json", headers, body, used);
	free(body);
	job_release(j);
}

/* The job's timer: first token due, or the next token of a stream. */
static void job_on_timer(struct loop_timer *t)
{
	struct sim_job *j = container_of(t, struct sim_job, timer);
	struct sim *s = j->sim;
	char ev[512], headers[384];
	uint64_t frozen_until = sim_stall_end(s, loop_now(s->loop));
	if (frozen_until) {
		loop_timer_set(s->loop, &j->timer, frozen_until);
		return;
	}

	if (!j->stream) {
		job_finish_whole(j);
		return;
	}
	if (!j->headers_sent) {
		job_headers(j, headers, sizeof(headers));
		strcat(headers, "Cache-Control: no-cache\r\n");
		j->headers_sent = 1;
		if (hsrv_stream_begin(j->conn, 200, "text/event-stream", headers) < 0)
			return; /* the client left; job_on_abort released the job */
	}
	if (j->sent < j->tokens) {
		int n = token_event(j, ev, sizeof(ev));
		j->sent++;
		if (hsrv_stream_write(j->conn, ev, (size_t)n) < 0)
			return; /* the client left; job_on_abort released the job */
	}
	if (j->sent < j->tokens) {
		loop_timer_set(s->loop, &j->timer, loop_now(s->loop) + s->opts.token_ms);
		return;
	}
	if (j->stream_usage) {
		int n =
		    snprintf(ev, sizeof(ev),
			     "data: {\"id\":\"%s-%lu\",\"object\":\"%s\",\"model\":\"%s\","
			     "\"choices\":[],\"usage\":{\"prompt_tokens\":%u,"
			     "\"completion_tokens\":%u,\"total_tokens\":%u}}\n\n",
			     j->chat ? "chatcmpl" : "cmpl", j->id,
			     j->chat ? "chat.completion.chunk" : "text_completion", s->opts.name,
			     j->prompt_tokens, j->tokens, j->prompt_tokens + j->tokens);
		if (hsrv_stream_write(j->conn, ev, (size_t)n) < 0)
			return;
	}
	if (hsrv_stream_write(j->conn, "data: [DONE]\n\n", 14) < 0)
		return;
	s->completions++;
	hsrv_on_abort(j->conn, NULL, NULL);
	hsrv_stream_end(j->conn);
	job_release(j);
}

/* Is the job's prompt prefix in the cache? It is there afterwards, most recent first. */
static int prefix_cached(struct sim *s, const struct sim_job *j)
{
	if (!s->opts.prefix_cache || !j->has_prefix)
		return 0;
	unsigned i = 0;
	while (i < s->ncache && s->cache[i] != j->prefix)
		i++;
	int hit = i < s->ncache;
	if (!hit && s->ncache < s->opts.prefix_cache)
		s->ncache++;
	if (i == s->ncache)
		i--; /* a miss on a full cache: the least recent one goes */
	memmove(s->cache + 1, s->cache, i * sizeof(*s->cache));
	s->cache[0] = j->prefix;
	if (hit)
		s->cache_hits++;
	else
		s->cache_misses++;
	return hit;
}

static void job_begin(struct sim_job *j)
{
	struct sim *s = j->sim;
	uint64_t now = loop_now(s->loop);
	j->active = 1;
	if (++s->active > s->max_active)
		s->max_active = s->active;
	j->wait_ms = now - j->queued_at_ms;
	double f = 1.0 + s->opts.jitter * (2.0 * rand_unit(&s->rng) - 1.0);
	j->cache_hit = prefix_cached(s, j);
	unsigned first = j->cache_hit ? s->opts.cache_hit_ms : s->opts.latency_ms;
	uint64_t delay = (uint64_t)((double)first * (f < 0 ? 0 : f));
	if (s->opts.fail_rate > 0 && rand_unit(&s->rng) < s->opts.fail_rate) {
		job_fail(j);
		return;
	}
	if (!j->stream)
		delay += (uint64_t)j->tokens * s->opts.token_ms;
	j->service_ms = delay;
	j->timer.fn = job_on_timer;
	loop_timer_set(s->loop, &j->timer, now + delay);
}

static void sim_start_next(struct sim *s)
{
	struct list_node *n;
	while (s->active < s->opts.slots && (n = list_pop_front(&s->queue))) {
		s->waiting--;
		job_begin(container_of(n, struct sim_job, link));
	}
}

/*
 * Where the value of "key" starts in a JSON object, found without a full parser (the
 * simulator only needs "max_tokens" from well-formed client bodies); NULL if the key is
 * absent. *rest is set to the bytes left from there.
 */
static const char *json_value(const char *body, size_t len, const char *key, size_t *rest)
{
	size_t klen = strlen(key);
	for (size_t i = 0; i + klen + 2 <= len; i++) {
		if (body[i] != '"' || memcmp(body + i + 1, key, klen) != 0 ||
		    body[i + 1 + klen] != '"')
			continue;
		size_t k = i + klen + 2;
		while (k < len && (body[k] == ' ' || body[k] == ':' || body[k] == '\t'))
			k++;
		*rest = len - k;
		return body + k;
	}
	return NULL;
}

static long json_number(const char *body, size_t len, const char *key)
{
	size_t rest;
	const char *v = json_value(body, len, key, &rest);
	long n = 0;
	size_t k = 0;
	while (v && k < rest && v[k] >= '0' && v[k] <= '9' && n < 1000000)
		n = n * 10 + (v[k++] - '0');
	return k ? n : -1;
}

static void sim_on_request(void *arg, struct hsrv_conn *c, const struct http_head *req,
			   const char *body, size_t body_len)
{
	struct sim *s = arg;
	char text[512];
	int n;
	s->requests++;

	int completions = http_str_eq(req->path, "/v1/completions");
	int chat = http_str_eq(req->path, "/v1/chat/completions");
	/* a GET gets a completion too (of --tokens): for tools that send only GET, such as
	 * slowhttptest's slow-read mode */
	if ((completions || chat) && (req->meth == HTTP_POST || req->meth == HTTP_GET)) {
		struct sim_job *j = calloc(1, sizeof(*j));
		if (!j) {
			hsrv_respond(c, 503, "text/plain", s->served_by, "out of memory\n", 14);
			return;
		}
		j->sim = s;
		j->conn = c;
		j->id = ++s->next_id;
		j->chat = chat;
		j->stream = http_wants_stream(body, body_len);
		long max_tokens = json_number(body, body_len, "max_tokens");
		if (max_tokens < 0)
			max_tokens = json_number(body, body_len, "max_completion_tokens");
		size_t rest;
		const char *u = json_value(body, body_len, "include_usage", &rest);
		j->stream_usage = j->stream && u && rest >= 4 && memcmp(u, "true", 4) == 0;
		j->tokens = max_tokens > 0 ? (unsigned)(max_tokens < 4096 ? max_tokens : 4096)
					   : s->opts.tokens;
		j->prompt_tokens = (unsigned)(body_len / 4);
		j->has_prefix = http_prompt_key(body, body_len, 1, 256, &j->prefix) == 1;
		j->queued_at_ms = loop_now(s->loop);
		hsrv_on_abort(c, job_on_abort, j);
		list_push_back(&s->queue, &j->link);
		s->waiting++;
		if (s->waiting > s->max_waiting)
			s->max_waiting = s->waiting;
		sim_start_next(s);
		return;
	}
	if (http_str_eq(req->path, "/health")) {
		hsrv_respond(c, 200, "text/plain", s->served_by, "ok\n", 3);
		return;
	}
	if (http_str_eq(req->path, "/sim/stats")) {
		n = snprintf(text, sizeof(text),
			     "{\"name\":\"%s\",\"connections\":%lu,\"requests\":%lu,"
			     "\"completions\":%lu,\"failures\":%lu,\"aborted\":%lu,\"active\":%u,"
			     "\"waiting\":%u,\"max_waiting\":%u,\"max_active\":%u,\"slots\":%u,"
			     "\"stalled\":%s,\"cache_hits\":%lu,\"cache_misses\":%lu}\n",
			     s->opts.name, hsrv_connections(s->srv), s->requests, s->completions,
			     s->failures, s->aborted, s->active, s->waiting, s->max_waiting,
			     s->max_active, s->opts.slots,
			     sim_stall_end(s, loop_now(s->loop)) ? "true" : "false", s->cache_hits,
			     s->cache_misses);
		if (n < 0 || (size_t)n >= sizeof(text))
			n = n < 0 ? 0 : (int)sizeof(text) - 1;
		hsrv_respond(c, 200, "application/json", s->served_by, text, (size_t)n);
		return;
	}
	n = snprintf(text, sizeof(text), "%s: %.*s %.*s (%zu body bytes)\n", s->opts.name,
		     (int)req->method.len, req->method.p, (int)req->path.len, req->path.p,
		     body_len);
	if (n < 0 || (size_t)n >= sizeof(text)) /* a long path is cut, never read past */
		n = n < 0 ? 0 : (int)sizeof(text) - 1;
	hsrv_respond(c, 200, "text/plain", s->served_by, text, (size_t)n);
}

/*
 * Tests and benchmarks open many connections at once, and a proxy in front decides when its
 * idle ones go: the sim never closes an idle connection under it.
 */
static const struct hsrv_limits sim_limits = {
    .max_conns = 100000,
    .header_ms = 60000,
    .idle_ms = 0,
    .max_body = 1u << 20,
};

int sim_start(struct loop *loop, const struct sim_opts *o, struct sim **out)
{
	struct sim *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	list_init(&s->queue);
	s->opts = *o;
	if (!s->opts.slots)
		s->opts.slots = 1;
	s->loop = loop;
	s->rng = clock_now_ns() ^ (uint64_t)(uintptr_t)s;
	s->start_ms = loop_now(loop);
	if (o->prefix_cache && !(s->cache = calloc(o->prefix_cache, sizeof(*s->cache)))) {
		free(s);
		return -ENOMEM;
	}
	snprintf(s->served_by, sizeof(s->served_by), "X-Served-By: %s\r\n", o->name);
	int err = hsrv_start(loop, &o->addr, &sim_limits, sim_on_request, s, &s->srv);
	if (err) {
		free(s->cache);
		free(s);
		return err;
	}
	*out = s;
	return 0;
}

int sim_port(const struct sim *s)
{
	return hsrv_port(s->srv);
}

void sim_stop(struct sim *s)
{
	if (!s)
		return;
	hsrv_stop(s->srv); /* aborts every job still held by a connection */
	free(s->cache);
	free(s);
}
