/*
 * sim.c - the simulated accelerator.
 *
 * A job is one inference request. It is either waiting (on the FIFO queue) or active
 * (holding a slot, driven by its timer): first the time to first token, then one tick per
 * token. When a job ends -- done, failed, or abandoned by its client -- its slot goes to
 * the head of the queue (with LoRA adapters, to the first job whose adapter fits in the batch:
 * sim/lora.h, which also keeps each adapter's counts as its jobs queue, start and end).
 * Nothing here blocks (but the one call named below); all waiting is
 * timers on the loop. A phantom job (extra_load) has no client: when it ends it goes back to
 * the end of the queue.
 *
 * In the block model, a job's prompt blocks are hashed on arrival (into one scratch array,
 * scoped by its model and cache_salt, then copied into the job's own allocation: one
 * allocation per request, as before) and
 * matched against the cache when the job gets its slot. The cache's changes are gathered as
 * KV events and published by a timer due at once, so that the changes made by one turn's I/O
 * (and by the timers due before it) make one batch.
 *
 * With a role (sim/pd.h) a job is looked at before it is queued: a decode job without valid
 * transfer params is refused, one with valid vLLM params pulls its blocks in place of the
 * prefill, and one with an SGLang room waits on its timer (asking the prefill sim, the one
 * blocking call here: a short GET on loopback) until the room is there; a prefill job
 * answers with the params it issues, or registers its room when its timer first fires.
 */
#include "sim/sim.h"
#include "core/clock.h"
#include "core/list.h"
#include "core/log.h"
#include "core/rand.h"
#include "http/jsonview.h"
#include "http/prompt.h"
#include "http/server.h"
#include "sim/kvcache.h"
#include "sim/kvevents.h"
#include "sim/kvreplay.h"
#include "runtime/tokprompt.h"
#include "tok/tokmodel.h"
#include "sim/lora.h"
#include "sim/pd.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	int phantom;		    /* extra load from no client: queued again when it ends */
	char model[SIM_MODEL_NAME]; /* the request's "model", "" when it named none */
	uint64_t *hash;		    /* block model: the prompt's chain hashes, nhash of them */
	size_t nhash;
	uint32_t *ids; /* with a tokenizer: the ids of those blocks, block_size each; else NULL */
	int partial_block; /* the prompt text ends inside a block */
	size_t cached;	   /* whole blocks found cached at admission */
	int stream_usage;  /* stream_options.include_usage: a last chunk with the usage */
	uint64_t queued_at_ms, wait_ms;
	uint64_t service_ms; /* planned: to the first token, and (not streamed) every token */
	/* prefill/decode (sim/pd.h) */
	unsigned pd_nids; /* prefill (vllm): the block ids it answers with */
	uint32_t pd_ids[SIM_PD_IDS_MAX];
	unsigned pull_blocks; /* decode: blocks whose KV it pulls in place of a prefill */
	int pd_room_pending;  /* prefill (sglang): pd_room registered when it is done */
	uint64_t pd_room, pd_wait_until; /* decode (sglang): the room it waits for, until when */
	char pd_host[SIM_PD_HOST];
	unsigned pd_port;
	int lora;	  /* its adapter's index in sim.loras + 1; 0: the base model */
	unsigned lora_ms; /* the adapter's load, when it had to be loaded */
};

struct sim {
	struct sim_opts opts;
	struct loop *loop;
	struct hsrv *srv;
	struct list_head queue; /* waiting jobs, in arrival order */
	unsigned active, waiting, max_waiting, max_active;
	unsigned long requests, completions, failures, aborted, next_id;
	unsigned long cache_hits, cache_misses, cache_partials;
	uint64_t *cache; /* prompt prefixes, most recent first */
	unsigned ncache;
	struct kvcache *blocks; /* the block model's cache, or NULL */
	uint64_t *scratch;	/* SIM_PROMPT_BLOCKS hashes: the prompt being read */
	unsigned long blocks_hit, blocks_missed;
	struct kvevents *events; /* or NULL */
	struct tokmodel *tm;	 /* --tokenizer: blocks of block_size tokens; NULL: of bytes */
	struct tokprompt tp;
	struct sim_job *admitting; /* the job whose blocks the cache is taking in */
	struct loop_timer flush;   /* due at once while events wait */
	struct loop_io replay_io;  /* kv_events_replay: the replay socket's requests */
	struct sim_job *phantoms;  /* extra_load of them */
	unsigned long phantom_runs, unknown_model;
	time_t created; /* for /v1/models */
	uint64_t rng;
	uint64_t start_ms;
	char served_by[96];
	unsigned long pd_valid, pd_refused, pd_local, pd_issued, pd_rooms_added;
	struct sim_pd_rooms rooms; /* prefill (sglang): the rooms bootstrapped */
	char pd_host[SIM_PD_HOST]; /* its own address, for remote_host and remote_port */
	unsigned pd_port;
	struct sim_loras *loras; /* max_loras: its adapters; NULL: none */
	unsigned long base_requests;
	uint64_t prefill_until; /* prefill_stalls_decode: the prefills running end then */
	unsigned long decode_stalls, decode_stall_ms;
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
	o->block_bytes = 64;
	o->block_size = 16;
	o->prefill_us_per_block = 1000;
	o->kv_pull_us_per_block = 100;
	o->lora_load_ms = 100;
	o->kv_events_buffer = KVREPLAY_STEPS_DEFAULT;
	snprintf(o->pd_secret, sizeof(o->pd_secret), "accelnet-sim");
}

/* The model a job's answer names: the one it asked for, else the first served, else ours. */
static const char *job_model(const struct sim_job *j)
{
	const struct sim_opts *o = &j->sim->opts;
	return j->model[0] ? j->model : o->nmodels ? o->models[0] : o->name;
}

static void job_free(struct sim_job *j)
{
	if (!j->phantom)
		free(j);
}

static void sim_start_next(struct sim *s);

static void sim_enqueue(struct sim *s, struct sim_job *j)
{
	j->queued_at_ms = loop_now(s->loop);
	if (j->lora)
		sim_lora_queued(s->loras, j->lora - 1);
	list_push_back(&s->queue, &j->link);
	if (++s->waiting > s->max_waiting)
		s->max_waiting = s->waiting;
}

static void job_release(struct sim_job *j)
{
	struct sim *s = j->sim;
	loop_timer_stop(s->loop, &j->timer);
	if (j->active) {
		s->active--;
		j->active = 0;
		if (j->lora)
			sim_lora_done(s->loras, j->lora - 1);
	}
	if (j->phantom) {
		s->phantom_runs++;
		sim_enqueue(s, j);
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
			if (j->lora)
				sim_lora_unqueued(s->loras, j->lora - 1);
		}
	}
	job_release(j);
}

#define HEADERS_MAX 768
#define SIM_API_RESPONSES 2 /* a job's chat: 0 completions, 1 chat, 2 the Responses API */

/* The model's header line, or "" when the request named none. */
static void model_header(const char *model, char *out, size_t len)
{
	if (model[0])
		snprintf(out, len, "X-Sim-Model: %s\r\n", model);
	else
		out[0] = 0;
}

static const char *cache_word(const struct sim_job *j)
{
	const struct sim *s = j->sim;
	if (s->opts.prefix_cache)
		return j->cache_hit ? "hit" : "miss";
	if (!j->cached)
		return "miss";
	return j->cached == j->nhash ? "hit" : "partial";
}

static void job_headers(struct sim_job *j, char *out, size_t len)
{
	struct sim *s = j->sim;
	char model[SIM_MODEL_NAME + 16], blocks[96] = "", cache[40] = "";
	model_header(j->model, model, sizeof(model));
	if (s->opts.prefix_cache || s->blocks)
		snprintf(cache, sizeof(cache), "X-Prefix-Cache: %s\r\n", cache_word(j));
	if (s->blocks)
		snprintf(blocks, sizeof(blocks),
			 "X-Sim-Cached-Blocks: %zu\r\nX-Sim-Prompt-Blocks: %zu\r\n", j->cached,
			 j->nhash);
	/* X-Queue-Depth: requests waiting inside this accelerator, for balancers that read
	 * backend load signals (the proxy's pools.load_header) */
	snprintf(out, len,
		 "%sX-Sim-Wait-Ms: %llu\r\nX-Sim-Service-Ms: %llu\r\nX-Queue-Depth: %u\r\n%s%s%s",
		 s->served_by, (unsigned long long)j->wait_ms, (unsigned long long)j->service_ms,
		 s->waiting, cache, blocks, model);
}

static void job_fail(struct sim_job *j)
{
	char headers[HEADERS_MAX], body[160];
	int n = snprintf(
	    body, sizeof(body),
	    "{\"error\":{\"message\":\"simulated failure on %s\",\"type\":\"server_error\"}}",
	    j->sim->opts.name);
	if (n < 0 || (size_t)n >= sizeof(body))
		n = n < 0 ? 0 : (int)sizeof(body) - 1;
	j->sim->failures++;
	if (j->headers_sent) { /* a stream already begun (--early-headers): an error event ends it
				*/
		char ev[200];
		int m = snprintf(ev, sizeof(ev), "event: error\ndata: %.*s\n\n", n, body);
		if (hsrv_stream_write(j->conn, ev, (size_t)m) < 0)
			return; /* the client left; job_on_abort released the job */
		hsrv_on_abort(j->conn, NULL, NULL);
		hsrv_stream_end(j->conn);
		job_release(j);
		return;
	}
	job_headers(j, headers, sizeof(headers));
	hsrv_respond(j->conn, 500, "application/json", headers, body, (size_t)n);
	job_release(j);
}

static int token_event(struct sim_job *j, char *out, size_t len)
{
	unsigned long long sent = (unsigned long long)clock_now_ns();
	if (j->chat)
		return snprintf(
		    out, len,
		    "data: {\"id\":\"chatcmpl-%lu\",\"object\":\"chat.completion.chunk\","
		    "\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":"
		    "\"tok%u \"},\"finish_reason\":null}],\"sent_ns\":%llu}\n\n",
		    j->id, job_model(j), j->sent, sent);
	return snprintf(
	    out, len,
	    "data: {\"id\":\"cmpl-%lu\",\"object\":\"text_completion\",\"model\":\"%s\","
	    "\"choices\":[{\"index\":0,\"text\":\"tok%u \",\"finish_reason\":null}],"
	    "\"sent_ns\":%llu}\n\n",
	    j->id, job_model(j), j->sent, sent);
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

/* The whole answer of a Responses API job (/v1/responses) into body[0..cap): its id names
 * this sim, so the ids of several sims behind one proxy never meet. How many bytes. */
static size_t responses_body(struct sim_job *j, char *body, size_t cap)
{
	size_t used = (size_t)snprintf(
	    body, cap,
	    "{\"id\":\"resp_%s_%lu\",\"object\":\"response\",\"status\":\"completed\","
	    "\"model\":\"%s\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\","
	    "\"content\":[{\"type\":\"output_text\",\"text\":\"",
	    j->sim->opts.name, j->id, job_model(j));
	for (unsigned i = 0; i < j->tokens; i++)
		used += (size_t)snprintf(body + used, cap - used, "tok%u ", i);
	used += (size_t)snprintf(body + used, cap - used,
				 "\"}]}],\"usage\":{\"input_tokens\":%u,\"output_tokens\":%u,"
				 "\"total_tokens\":%u}}\n",
				 j->prompt_tokens, j->tokens, j->prompt_tokens + j->tokens);
	return used;
}

/* The prompt tokens its prefill found cached (sim.h, Tokens): its whole cached blocks. */
static unsigned cached_tokens(const struct sim_job *j)
{
	uint64_t t = j->ids ? (uint64_t)j->cached * j->sim->opts.block_size
			    : (uint64_t)j->cached * j->sim->opts.block_bytes / SIM_BYTES_PER_TOKEN;
	return t < j->prompt_tokens ? (unsigned)t : j->prompt_tokens;
}

static void job_finish_whole(struct sim_job *j)
{
	struct sim *s = j->sim;
	char headers[HEADERS_MAX];
	size_t cap = 512 + SIM_MODEL_NAME + (size_t)j->tokens * 12, used = 0;
	char params[256 + SIM_PD_HOST + SIM_PD_IDS_MAX * 11] = "";
	if (j->pd_nids && sim_pd_params(params, sizeof(params), s->opts.name, s->pd_host,
					s->pd_port, j->pd_ids, j->pd_nids))
		s->pd_issued++;
	cap += strlen(params);
	char *body = malloc(cap);
	if (!body) {
		job_fail(j);
		return;
	}
	if (j->chat == SIM_API_RESPONSES) {
		used = responses_body(j, body, cap);
		goto respond;
	}
	if (j->chat)
		used += (size_t)snprintf(body, cap,
					 "{\"id\":\"chatcmpl-%lu\",\"object\":\"chat.completion\","
					 "\"model\":\"%s\",\"choices\":[{\"index\":0,\"message\":"
					 "{\"role\":\"assistant\",\"content\":\"",
					 j->id, job_model(j));
	else
		used += (size_t)snprintf(body, cap,
					 "{\"id\":\"cmpl-%lu\",\"object\":\"text_completion\","
					 "\"model\":\"%s\",\"choices\":[{\"index\":0,\"text\":\"",
					 j->id, job_model(j));
	for (unsigned i = 0; i < j->tokens; i++)
		used += (size_t)snprintf(body + used, cap - used, "tok%u ", i);
	used +=
	    (size_t)snprintf(body + used, cap - used,
			     "\"%s,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":%u,"
			     "\"completion_tokens\":%u,\"total_tokens\":%u,"
			     "\"prompt_tokens_details\":{\"cached_tokens\":%u}}%s}\n",
			     j->chat ? "}" : "", j->prompt_tokens, j->tokens,
			     j->prompt_tokens + j->tokens, cached_tokens(j), params);
respond:
	s->completions++;
	job_headers(j, headers, sizeof(headers));
	hsrv_respond(j->conn, 200, "application/json", headers, body, used);
	free(body);
	job_release(j);
}

/* The job's timer: first token due, or the next token of a stream. */
/* The stream's head: 0, or -1 when the client has left (job_on_abort released the job). */
static int job_stream_begin(struct sim_job *j)
{
	char headers[HEADERS_MAX];
	job_headers(j, headers, sizeof(headers));
	strcat(headers, "Cache-Control: no-cache\r\n");
	j->headers_sent = 1;
	return hsrv_stream_begin(j->conn, 200, "text/event-stream", headers);
}

static void job_on_timer(struct loop_timer *t)
{
	struct sim_job *j = container_of(t, struct sim_job, timer);
	struct sim *s = j->sim;
	char ev[512 + SIM_MODEL_NAME];
	uint64_t frozen_until = sim_stall_end(s, loop_now(s->loop));
	if (frozen_until) {
		loop_timer_set(s->loop, &j->timer, frozen_until);
		return;
	}
	if (j->phantom) {
		job_release(j);
		return;
	}
	if (j->stream && j->sent && s->prefill_until > loop_now(s->loop)) {
		/* a prefill holds the accelerator: this stream's next token waits for it */
		s->decode_stalls++;
		s->decode_stall_ms += s->prefill_until - loop_now(s->loop);
		loop_timer_set(s->loop, &j->timer, s->prefill_until);
		return;
	}
	if (j->pd_room_pending) { /* its prefill is done: the decode may pull the room */
		sim_pd_room_add(&s->rooms, j->pd_room);
		s->pd_rooms_added++;
		j->pd_room_pending = 0;
	}

	if (!j->stream) {
		job_finish_whole(j);
		return;
	}
	if (!j->headers_sent && job_stream_begin(j) < 0)
		return; /* the client left; job_on_abort released the job */
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
		int n = snprintf(ev, sizeof(ev),
				 "data: {\"id\":\"%s-%lu\",\"object\":\"%s\",\"model\":\"%s\","
				 "\"choices\":[],\"usage\":{\"prompt_tokens\":%u,"
				 "\"completion_tokens\":%u,\"total_tokens\":%u,"
				 "\"prompt_tokens_details\":{\"cached_tokens\":%u}}}\n\n",
				 j->chat ? "chatcmpl" : "cmpl", j->id,
				 j->chat ? "chat.completion.chunk" : "text_completion",
				 job_model(j), j->prompt_tokens, j->tokens,
				 j->prompt_tokens + j->tokens, cached_tokens(j));
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

static void on_replay_io(struct loop_io *io, unsigned events)
{
	(void)events;
	kvevents_replay_serve(container_of(io, struct sim, replay_io)->events);
}

static void on_flush(struct loop_timer *t)
{
	struct sim *s = container_of(t, struct sim, flush);
	kvevents_flush(s->events);
}

/* Events wait for the end of the turn (a timer due now fires after this turn's I/O), or
 * kv_events_delay_ms more. */
static void events_gathered(struct sim *s)
{
	if (!loop_timer_armed(&s->flush))
		loop_timer_set(s->loop, &s->flush, loop_now(s->loop) + s->opts.kv_events_delay_ms);
}

static void on_blocks_removed(void *arg, const uint64_t *hash, size_t n)
{
	struct sim *s = arg;
	kvevents_removed(s->events, hash, n);
	events_gathered(s);
}

static void on_blocks_stored(void *arg, const uint64_t *hash, size_t n, const uint64_t *parent)
{
	struct sim *s = arg;
	const struct sim_job *j = s->admitting;
	const uint32_t *ids =
	    j && j->ids ? j->ids + (size_t)(hash - j->hash) * s->opts.block_size : NULL;
	kvevents_stored(s->events, hash, n, parent, ids);
	events_gathered(s);
}

/*
 * The block model's prefill: match the job's blocks, admit them, and return the time to its
 * first token before jitter, in ms.
 */
static double blocks_prefill_ms(struct sim *s, struct sim_job *j)
{
	struct kvcache_sink sink = {on_blocks_removed, on_blocks_stored, s};
	j->cached = kvcache_match(s->blocks, j->hash, j->nhash);
	s->admitting = j;
	kvcache_admit(s->blocks, j->hash, j->nhash, j->cached, s->events ? &sink : NULL);
	s->admitting = NULL;
	size_t uncached = j->nhash - j->cached + (j->partial_block ? 1 : 0);
	s->blocks_hit += j->cached;
	s->blocks_missed += uncached;
	if (!j->cached)
		s->cache_misses++;
	else if (j->cached == j->nhash)
		s->cache_hits++;
	else
		s->cache_partials++;
	return s->opts.latency_ms + (double)s->opts.prefill_us_per_block * (double)uncached / 1000;
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
	double first;
	if (j->pull_blocks) { /* decode: the KV is pulled, not computed */
		first = (double)s->opts.kv_pull_us_per_block * j->pull_blocks / 1000;
	} else if (s->blocks && !j->phantom) {
		first = blocks_prefill_ms(s, j);
	} else {
		j->cache_hit = prefix_cached(s, j);
		first = j->cache_hit ? s->opts.cache_hit_ms : s->opts.latency_ms;
	}
	if (j->lora && (j->lora_ms = sim_lora_start(s->loras, j->lora - 1)))
		first += j->lora_ms; /* the adapter was loaded for it */
	uint64_t delay = (uint64_t)(first * (f < 0 ? 0 : f));
	j->timer.fn = job_on_timer;
	if (j->phantom) { /* never fails; takes at least a millisecond, never spins */
		delay += (uint64_t)j->tokens * s->opts.token_ms;
		loop_timer_set(s->loop, &j->timer, now + (delay ? delay : 1));
		return;
	}
	if (s->opts.fail_rate > 0 && rand_unit(&s->rng) < s->opts.fail_rate) {
		job_fail(j);
		return;
	}
	if (s->opts.prefill_stalls_decode && !j->pull_blocks && now + delay > s->prefill_until)
		s->prefill_until = now + delay; /* the streams decoding here wait for it */
	if (!j->stream)
		delay += (uint64_t)j->tokens * s->opts.token_ms;
	j->service_ms = delay;
	loop_timer_set(s->loop, &j->timer, now + delay);
}

/* The first waiting job that may start now: the head, or with adapters the first whose
 * adapter fits in the batch (sim/lora.h). */
static struct sim_job *next_job(struct sim *s)
{
	for (struct list_node *n = list_first(&s->queue); n; n = list_next(&s->queue, n)) {
		struct sim_job *j = container_of(n, struct sim_job, link);
		if (!j->lora || sim_lora_fits(s->loras, j->lora - 1))
			return j;
	}
	return NULL;
}

static void sim_start_next(struct sim *s)
{
	struct sim_job *j;
	while (s->active < s->opts.slots && (j = next_job(s))) {
		list_del(&s->queue, &j->link);
		s->waiting--;
		job_begin(j);
	}
}

/*
 * Where the value of "key" starts in a JSON object, found without a full parser (the
 * simulator only needs a few fields of well-formed client bodies); NULL if the key is
 * absent. *rest is set to the bytes left from there.
 */
static const char *json_value(const char *body, size_t len, const char *key, size_t *rest)
{
	size_t klen = strlen(key);
	for (size_t i = 0; i + klen + 2 <= len; i++) {
		if (body[i] != '"' || memcmp(body + i + 1, key, klen) != 0 ||
		    body[i + 1 + klen] != '"' || (i > 0 && body[i - 1] == '\\'))
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

/*
 * The body's top-level "model" (its strict view: as the proxy reads it) into out[0..cap), with
 * control bytes, '"' and '\\' as '?' so that it can go into a header and into JSON as it is;
 * "" when the body names none (or a name of cap bytes or more).
 */
static void request_model(const struct json_view *v, const char *body, char *out, size_t cap)
{
	size_t n;
	if (json_view_model(v, body, out, cap, &n) != 1) {
		out[0] = 0;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)out[i];
		if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\')
			out[i] = '?';
	}
}

static int model_base(const struct sim *s, const char *model)
{
	if (!model[0])
		return 1;
	if (!s->opts.nmodels)
		return !strcmp(model, s->opts.name);
	for (unsigned i = 0; i < s->opts.nmodels; i++)
		if (!strcmp(s->opts.models[i], model))
			return 1;
	return 0;
}

static int model_served(const struct sim *s, const char *model)
{
	if (!s->opts.nmodels || !model[0])
		return 1;
	for (unsigned i = 0; i < s->opts.nmodels; i++)
		if (!strcmp(s->opts.models[i], model))
			return 1;
	return 0;
}

/* vLLM's answer to a model it does not serve. */
static void answer_no_model(struct sim *s, struct hsrv_conn *c, const char *model)
{
	char headers[HEADERS_MAX], line[SIM_MODEL_NAME + 16], body[SIM_MODEL_NAME + 160];
	model_header(model, line, sizeof(line));
	snprintf(headers, sizeof(headers), "%s%s", s->served_by, line);
	int n = snprintf(body, sizeof(body),
			 "{\"error\":{\"message\":\"The model `%s` does not exist.\","
			 "\"type\":\"NotFoundError\",\"param\":null,\"code\":404}}",
			 model);
	if (n < 0 || (size_t)n >= sizeof(body))
		n = n < 0 ? 0 : (int)sizeof(body) - 1;
	hsrv_respond(c, 404, "application/json", headers, body, (size_t)n);
}

/* GET /v1/models: the models served (our name when any goes), in OpenAI's list format. */
static void answer_models(struct sim *s, struct hsrv_conn *c)
{
	char body[SIM_MODELS * (2 * SIM_MODEL_NAME + 128) + 64];
	size_t used = 0, nmodels = s->opts.nmodels ? s->opts.nmodels : 1;
	used += (size_t)snprintf(body, sizeof(body), "{\"object\":\"list\",\"data\":[");
	for (size_t i = 0; i < nmodels; i++) {
		const char *m = s->opts.nmodels ? s->opts.models[i] : s->opts.name;
		used +=
		    (size_t)snprintf(body + used, sizeof(body) - used,
				     "%s{\"id\":\"%s\",\"object\":\"model\",\"created\":%lld,"
				     "\"owned_by\":\"accelnet\",\"root\":\"%s\",\"parent\":null}",
				     i ? "," : "", m, (long long)s->created, m);
	}
	used += (size_t)snprintf(body + used, sizeof(body) - used, "]}\n");
	hsrv_respond(c, 200, "application/json", s->served_by, body, used);
}

/* GET /metrics: vLLM's gauges that a balancer reads, in Prometheus text format. */
static void answer_metrics(struct sim *s, struct hsrv_conn *c)
{
	double usage = s->blocks
			   ? (double)kvcache_used(s->blocks) / (double)kvcache_capacity(s->blocks)
		       : s->opts.prefix_cache ? (double)s->ncache / s->opts.prefix_cache
					      : 0;
	const struct {
		const char *name, *help;
		double value;
	} gauges[] = {
	    {"vllm:num_requests_running", "Number of requests in model execution batches.",
	     s->active},
	    {"vllm:num_requests_waiting", "Number of requests waiting to be processed.",
	     s->waiting},
	    {"vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage},
	    {"vllm:gpu_cache_usage_perc",
	     "GPU KV-cache usage. 1 means 100 percent usage (the older name).", usage},
	};
	const char *model = s->opts.nmodels ? s->opts.models[0] : s->opts.name;
	char text[2048 + SIM_LORA_HISTORY * (2 * SIM_LORA_LIST + 128)];
	size_t used = 0;
	for (size_t i = 0; i < sizeof(gauges) / sizeof(gauges[0]) && used < sizeof(text); i++)
		used += (size_t)snprintf(text + used, sizeof(text) - used,
					 "# HELP %s %s\n# TYPE %s gauge\n"
					 "%s{model_name=\"%s\",engine=\"0\"} %g\n",
					 gauges[i].name, gauges[i].help, gauges[i].name,
					 gauges[i].name, model, gauges[i].value);
	if (s->loras && used < sizeof(text)) {
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		used += sim_lora_metrics(s->loras, (double)now.tv_sec + now.tv_nsec / 1e9,
					 text + used, sizeof(text) - used);
	}
	if (used >= sizeof(text))
		used = sizeof(text) - 1;
	hsrv_respond(c, 200, "text/plain; version=0.0.4", s->served_by, text, used);
}

static void answer_stats(struct sim *s, struct hsrv_conn *c)
{
	char text[1536 + SIM_LORA_MAX * (SIM_LORA_NAME + 128)];
	int n = snprintf(
	    text, sizeof(text),
	    "{\"name\":\"%s\",\"connections\":%lu,\"requests\":%lu,"
	    "\"completions\":%lu,\"failures\":%lu,\"aborted\":%lu,\"active\":%u,"
	    "\"waiting\":%u,\"max_waiting\":%u,\"max_active\":%u,\"slots\":%u,"
	    "\"stalled\":%s,\"cache_hits\":%lu,\"cache_misses\":%lu,\"cache_partials\":%lu,"
	    "\"blocks_hit\":%lu,\"blocks_missed\":%lu,\"cache_blocks\":%u,"
	    "\"cache_blocks_used\":%zu,\"kv_events_endpoint\":\"%s\",\"kv_events_batches\":%lu,"
	    "\"kv_events_dropped\":%lu,\"kv_events_next_seq\":%llu,\"kv_events_replays\":%lu,"
	    "\"unknown_model\":%lu,\"extra_"
	    "load\":%u,"
	    "\"phantom_runs\":%lu,\"role\":\"%s\",\"pd_valid\":%lu,\"pd_refused\":%lu,"
	    "\"pd_local\":%lu,\"pd_issued\":%lu,\"pd_rooms\":%lu,\"decode_stalls\":%lu,"
	    "\"decode_stall_ms\":%lu,\"base_requests\":%lu",
	    s->opts.name, hsrv_connections(s->srv), s->requests, s->completions, s->failures,
	    s->aborted, s->active, s->waiting, s->max_waiting, s->max_active, s->opts.slots,
	    sim_stall_end(s, loop_now(s->loop)) ? "true" : "false", s->cache_hits, s->cache_misses,
	    s->cache_partials, s->blocks_hit, s->blocks_missed, s->opts.cache_blocks,
	    s->blocks ? kvcache_used(s->blocks) : 0, sim_kv_events_endpoint(s),
	    s->events ? kvevents_batches(s->events) : 0,
	    s->events ? kvevents_dropped(s->events) : 0,
	    s->events ? (unsigned long long)kvevents_next_seq(s->events) : 0ull,
	    s->events ? kvevents_replays(s->events) : 0, s->unknown_model, s->opts.extra_load,
	    s->phantom_runs,
	    s->opts.role == SIM_ROLE_PREFILL  ? "prefill"
	    : s->opts.role == SIM_ROLE_DECODE ? "decode"
					      : "both",
	    s->pd_valid, s->pd_refused, s->pd_local, s->pd_issued, s->pd_rooms_added,
	    s->decode_stalls, s->decode_stall_ms, s->base_requests);
	if (n < 0 || (size_t)n >= sizeof(text) - 3)
		n = n < 0 ? 0 : (int)sizeof(text) - 3;
	if (s->loras) /* (the table fits: SIM_LORA_MAX entries of bounded names) */
		n += (int)sim_lora_stats(s->loras, text + n, sizeof(text) - 3 - (size_t)n);
	n += snprintf(text + n, sizeof(text) - (size_t)n, "}\n");
	hsrv_respond(c, 200, "application/json", s->served_by, text, (size_t)n);
}

/* A decode sim refuses a request without valid transfer params: vLLM's 400. */
static void job_refuse(struct sim_job *j, const char *why)
{
	char headers[HEADERS_MAX], body[320];
	int n =
	    snprintf(body, sizeof(body),
		     "{\"error\":{\"message\":\"%s\",\"type\":\"BadRequestError\",\"param\":null,"
		     "\"code\":400}}",
		     why);
	if (n < 0 || (size_t)n >= sizeof(body))
		n = n < 0 ? 0 : (int)sizeof(body) - 1;
	j->sim->pd_refused++;
	job_headers(j, headers, sizeof(headers));
	hsrv_on_abort(j->conn, NULL, NULL);
	hsrv_respond(j->conn, 400, "application/json", headers, body, (size_t)n);
	job_release(j);
}

#define PD_ROOM_POLL_MS 5
#define PD_ROOM_WAIT_MS 10000

/* A decode (sglang) waits for its room: asked again until the prefill sim has it. */
static void job_on_room(struct loop_timer *t)
{
	struct sim_job *j = container_of(t, struct sim_job, timer);
	struct sim *s = j->sim;
	uint64_t now = loop_now(s->loop);
	int r = sim_pd_room_ask(j->pd_host, j->pd_port, j->pd_room);
	if (r == 1) {
		s->pd_valid++;
		sim_enqueue(s, j);
		sim_start_next(s);
	} else if (r == 0 && now < j->pd_wait_until)
		loop_timer_set(s->loop, &j->timer, now + PD_ROOM_POLL_MS);
	else
		job_refuse(
		    j, r < 0 ? "bootstrap: the prefill server could not be asked"
			     : "bootstrap: the room was never bootstrapped by a prefill server");
}

/*
 * What the job's role makes of its transfer params (sim/pd.h): 1 it goes on the queue, 0 it
 * waits for its room (job_on_room), -1 refused (*why).
 */
static int pd_take(struct sim *s, struct sim_job *j, const struct json_view *v, const char *body,
		   size_t len, const char **why)
{
	struct sim_pd_req r;
	sim_pd_read(body, len, &r);
	const char *prompt = v->prompt.e ? body + v->prompt.s : body;
	size_t plen = v->prompt.e ? v->prompt.e - v->prompt.s : len;
	if (s->opts.role == SIM_ROLE_PREFILL) {
		if (r.remote_decode)
			j->pd_nids = sim_pd_ids(s->opts.pd_secret, prompt, plen,
						s->opts.block_bytes, j->pd_ids);
		j->pd_room = r.room;
		j->pd_room_pending = r.has_room;
		return 1;
	}
	uint32_t want[SIM_PD_IDS_MAX];
	unsigned n = sim_pd_ids(s->opts.pd_secret, prompt, plen, s->opts.block_bytes, want);
	if (r.has_ids) {
		if (r.ids_bad || r.nids != n || memcmp(want, r.ids, n * sizeof(*want)) != 0) {
			*why =
			    "kv_transfer_params: remote_block_ids were not issued for this prompt";
			return -1;
		}
		s->pd_valid++;
		j->pull_blocks = n;
		return 1;
	}
	if (r.has_room) {
		j->pull_blocks = n;
		j->pd_room = r.room;
		memcpy(j->pd_host, r.host, sizeof(j->pd_host));
		j->pd_port = r.port;
		j->pd_wait_until = loop_now(s->loop) + PD_ROOM_WAIT_MS;
		j->timer.fn = job_on_room;
		loop_timer_set(s->loop, &j->timer, loop_now(s->loop));
		return 0;
	}
	if (s->opts.pd_allow_local) {
		s->pd_local++;
		return 1;
	}
	*why = "no kv_transfer_params and no bootstrap_room: this decode instance does not prefill";
	return -1;
}

/* The engine's chain hashes of the whole blocks of ids[0..n) into s->scratch: how many. Not
 * accelnet's own chain (tok/tokmodel.h): a seed of its own, as vLLM's hashes are its own, so
 * that a subscriber must match blocks by the token ids the events carry. */
static size_t sim_token_blocks(struct sim *s, const uint32_t *ids, size_t n, uint64_t scope)
{
	size_t bs = s->opts.block_size, k = 0;
	for (uint64_t prev = SIM_ENGINE_SEED ^ scope; k < SIM_PROMPT_BLOCKS && (k + 1) * bs <= n;
	     k++)
		prev = s->scratch[k] =
		    tokmodel_block_hash(prev, ids + k * bs, bs) ^ SIM_ENGINE_SEED;
	return k;
}

/* POST /reset_prefix_cache (vLLM's): every block dropped, AllBlocksCleared published. */
static void answer_reset(struct sim *s, struct hsrv_conn *c)
{
	if (s->blocks)
		kvcache_clear(s->blocks);
	if (s->events) {
		kvevents_cleared(s->events);
		events_gathered(s);
	}
	hsrv_respond(c, 200, "text/plain", s->served_by, "ok\n", 3);
}

/* A completion request: a job on the queue, or a 404 for a model not served. */
static void take_completion(struct sim *s, struct hsrv_conn *c, int chat, const char *body,
			    size_t body_len)
{
	char model[SIM_MODEL_NAME];
	struct json_view view;
	const char *why;
	(void)json_view_read(&view, body, body_len, &why); /* not JSON: names nothing */
	request_model(&view, body, model, sizeof(model));
	int lora = 0; /* with adapters, a model but the base one is an adapter (sim/lora.h) */
	if (s->loras && !model_base(s, model) && (lora = sim_lora_get(s->loras, model) + 1) <= 0) {
		s->unknown_model++; /* no room in the adapter table */
		answer_no_model(s, c, model);
		return;
	}
	if (!lora && !model_served(s, model)) {
		s->unknown_model++;
		answer_no_model(s, c, model);
		return;
	}
	if (!lora)
		s->base_requests++;
	/* the prefix caches key a prompt by its model and cache_salt (http_prompt_scope) */
	uint64_t scope = http_prompt_scope(view.model.e ? body + view.model.s : NULL,
					   view.model.e - view.model.s,
					   view.cache_salt.e ? body + view.cache_salt.s : NULL,
					   view.cache_salt.e - view.cache_salt.s);
	long nblocks = 0;
	size_t text = 0, ntok = 0;
	const uint32_t *ids = NULL;
	int cut;
	if (s->tm && s->blocks &&
	    tokprompt_ids(&s->tp, s->tm, body, body_len, &view, 0, &ids, &ntok, &cut) == 0) {
		nblocks = (long)sim_token_blocks(s, ids, ntok, scope);
	} else if (s->blocks) {
		ids = NULL;
		nblocks = http_prompt_blocks(body, body_len, s->opts.block_bytes, s->scratch,
					     SIM_PROMPT_BLOCKS, &text);
		if (nblocks < 0)
			nblocks = 0, text = 0;
		http_prompt_scope_blocks(s->scratch, (size_t)nblocks, scope);
	}
	size_t keep = ids ? (size_t)nblocks * s->opts.block_size : 0; /* the blocks' token ids */
	struct sim_job *j =
	    calloc(1, sizeof(*j) + (size_t)nblocks * sizeof(*j->hash) + keep * sizeof(*ids));
	if (!j) {
		hsrv_respond(c, 503, "text/plain", s->served_by, "out of memory\n", 14);
		return;
	}
	j->sim = s;
	j->conn = c;
	j->id = ++s->next_id;
	j->chat = chat;
	memcpy(j->model, model, sizeof(model));
	j->hash = (uint64_t *)(j + 1);
	j->nhash = (size_t)nblocks;
	if (nblocks)
		memcpy(j->hash, s->scratch, (size_t)nblocks * sizeof(*j->hash));
	j->partial_block = text > (size_t)nblocks * s->opts.block_bytes;
	if (ids) {
		j->ids = (uint32_t *)(j->hash + nblocks);
		memcpy(j->ids, ids, keep * sizeof(*ids));
		j->partial_block = ntok > keep;
	}
	j->stream = view.stream && chat != SIM_API_RESPONSES; /* (a response: answered whole) */
	long max_tokens = json_number(body, body_len, "max_tokens");
	if (max_tokens < 0)
		max_tokens = json_number(body, body_len, "max_completion_tokens");
	size_t rest;
	const char *u = json_value(body, body_len, "include_usage", &rest);
	j->stream_usage = j->stream && u && rest >= 4 && memcmp(u, "true", 4) == 0;
	j->tokens =
	    max_tokens > 0 ? (unsigned)(max_tokens < 4096 ? max_tokens : 4096) : s->opts.tokens;
	j->prompt_tokens = ids ? (unsigned)ntok : (unsigned)(body_len / SIM_BYTES_PER_TOKEN);
	j->has_prefix = http_prompt_key(body, body_len, 1, 256, &j->prefix) == 1;
	j->prefix ^= scope;
	j->lora = lora;
	hsrv_on_abort(c, job_on_abort, j);
	if (s->opts.role != SIM_ROLE_BOTH) {
		const char *refusal = "";
		int r = pd_take(s, j, &view, body, body_len, &refusal);
		if (r < 0)
			job_refuse(j, refusal);
		if (r <= 0)
			return;
	}
	if (j->stream && s->opts.early_headers && job_stream_begin(j) < 0)
		return; /* the client left; job_on_abort released the job */
	sim_enqueue(s, j);
	sim_start_next(s);
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
	if (http_str_eq(req->path, "/v1/responses") && req->meth == HTTP_POST) {
		take_completion(s, c, SIM_API_RESPONSES, body, body_len);
		return;
	}
	/* a GET gets a completion too (of --tokens): for tools that send only GET, such as
	 * slowhttptest's slow-read mode */
	if ((completions || chat) && (req->meth == HTTP_POST || req->meth == HTTP_GET)) {
		take_completion(s, c, chat, body, body_len);
		return;
	}
	if (http_str_eq(req->path, "/health")) {
		hsrv_respond(c, 200, "text/plain", s->served_by, "ok\n", 3);
		return;
	}
	if (req->path.len > 11 && memcmp(req->path.p, "/bootstrap/", 11) == 0) {
		uint64_t room = strtoull(req->path.p + 11, NULL, 10); /* the path ends in a space */
		int has = sim_pd_room_has(&s->rooms, room);
		hsrv_respond(c, has ? 200 : 404, "text/plain", s->served_by, has ? "ok\n" : "no\n",
			     3);
		return;
	}
	if (http_str_eq(req->path, "/reset_prefix_cache") && req->meth == HTTP_POST) {
		answer_reset(s, c);
		return;
	}
	if (http_str_eq(req->path, "/sim/stats")) {
		answer_stats(s, c);
		return;
	}
	if (http_str_eq(req->path, "/metrics")) {
		answer_metrics(s, c);
		return;
	}
	if (http_str_eq(req->path, "/v1/models") && req->meth == HTTP_GET) {
		answer_models(s, c);
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

static void sim_free(struct sim *s)
{
	if (s->phantoms)
		for (unsigned i = 0; i < s->opts.extra_load; i++)
			loop_timer_stop(s->loop, &s->phantoms[i].timer);
	loop_timer_stop(s->loop, &s->flush);
	if (s->replay_io.fd >= 0)
		loop_io_del(s->loop, &s->replay_io);
	kvevents_close(s->events);
	kvcache_destroy(s->blocks);
	tokprompt_free(&s->tp);
	tokmodel_free(s->tm);
	free(s->tm);
	free(s->phantoms);
	free(s->loras);
	free(s->scratch);
	free(s->cache);
	free(s);
}

/* The block model's cache and KV events publisher. 0 or -errno. */
static int sim_start_blocks(struct sim *s)
{
	const struct sim_opts *o = &s->opts;
	const char *why;
	int err;
	if (o->block_bytes < HTTP_PROMPT_BLOCK_MIN || o->block_bytes > HTTP_PROMPT_BLOCK_MAX)
		return -EINVAL;
	if (o->tokenizer[0]) {
		char msg[768];
		if (!o->block_size || o->block_size > TOKMODEL_BLOCK_MAX)
			return -EINVAL;
		if (!(s->tm = calloc(1, sizeof(*s->tm))))
			return -ENOMEM;
		if ((err = tokmodel_load(o->tokenizer, NULL, NULL, o->block_size, s->tm, msg,
					 sizeof(msg))) < 0) {
			free(s->tm);
			s->tm = NULL;
			log_error("--tokenizer: %s", msg);
			return err;
		}
	}
	if ((err = kvcache_create(o->cache_blocks, SIM_PROMPT_BLOCKS, &s->blocks)) < 0)
		return err;
	if (!(s->scratch = calloc(SIM_PROMPT_BLOCKS, sizeof(*s->scratch))))
		return -ENOMEM;
	if (!o->kv_events[0])
		return 0;
	err =
	    kvevents_open(o->kv_events, o->kv_events_topic, s->tm ? o->block_size : o->block_bytes,
			  (enum kvevents_format)o->kv_events_format, &s->events, &why);
	if (err < 0) {
		log_error("cannot publish KV events on %s: %s", o->kv_events, why);
		return err;
	}
	kvevents_skip(s->events, o->kv_events_skip);
	if (o->kv_events_replay[0]) {
		err = kvevents_replay(s->events, o->kv_events_replay, o->kv_events_buffer, &why);
		if (err < 0) {
			log_error("cannot answer KV event replays on %s: %s", o->kv_events_replay,
				  why);
			return err;
		}
		s->replay_io.fd = kvevents_replay_fd(s->events);
		if ((err = loop_io_add(s->loop, &s->replay_io)) < 0) {
			s->replay_io.fd = -1;
			return err;
		}
	}
	s->flush.fn = on_flush;
	kvevents_cleared(s->events); /* the first batch: a fresh cache, as after a restart */
	events_gathered(s);
	return 0;
}

int sim_start(struct loop *loop, const struct sim_opts *o, struct sim **out)
{
	int err = -ENOMEM;
	if ((o->prefix_cache && o->cache_blocks) || (o->kv_events[0] && !o->cache_blocks) ||
	    o->extra_load > SIM_EXTRA_LOAD_MAX)
		return -EINVAL;
	struct sim *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	list_init(&s->queue);
	s->opts = *o;
	s->replay_io = (struct loop_io){.fd = -1, .fn = on_replay_io};
	if (!s->opts.slots)
		s->opts.slots = 1;
	s->loop = loop;
	s->rng = clock_now_ns() ^ (uint64_t)(uintptr_t)s;
	s->start_ms = loop_now(loop);
	s->created = time(NULL);
	if (o->prefix_cache && !(s->cache = calloc(o->prefix_cache, sizeof(*s->cache))))
		goto fail;
	if (o->cache_blocks && (err = sim_start_blocks(s)) < 0)
		goto fail;
	if (o->max_loras) {
		err = -ENOMEM;
		if (!(s->loras = malloc(sizeof(*s->loras))))
			goto fail;
		if ((err = sim_lora_init(s->loras, o->lora, o->max_loras, o->lora_load_ms)) < 0)
			goto fail;
	}
	err = -ENOMEM;
	if (o->extra_load && !(s->phantoms = calloc(o->extra_load, sizeof(*s->phantoms))))
		goto fail;
	for (unsigned i = 0; i < o->extra_load; i++) {
		struct sim_job *j = &s->phantoms[i];
		j->sim = s;
		j->phantom = 1;
		j->tokens = o->tokens;
		sim_enqueue(s, j);
	}
	snprintf(s->served_by, sizeof(s->served_by), "X-Served-By: %s\r\n", o->name);
	if ((err = hsrv_start(loop, &o->addr, &sim_limits, sim_on_request, s, &s->srv)) < 0)
		goto fail;
	char self[96];
	net_addr_format((const struct sockaddr *)&o->addr.ss, self, sizeof(self));
	char *colon = strrchr(self, ':');
	if (colon) { /* remote_host and remote_port: where it listens */
		*colon = 0;
		snprintf(s->pd_host, sizeof(s->pd_host), "%.63s", self[0] == '[' ? self + 1 : self);
		s->pd_host[strcspn(s->pd_host, "]")] = 0;
	}
	s->pd_port = (unsigned)hsrv_port(s->srv);
	sim_start_next(s); /* the phantoms take their slots */
	*out = s;
	return 0;
fail:
	sim_free(s);
	return err;
}

int sim_port(const struct sim *s)
{
	return hsrv_port(s->srv);
}

const char *sim_kv_events_endpoint(const struct sim *s)
{
	return s->events ? kvevents_endpoint(s->events) : "";
}

const char *sim_kv_events_replay_endpoint(const struct sim *s)
{
	return s->events ? kvevents_replay_endpoint(s->events) : "";
}

void sim_stop(struct sim *s)
{
	if (!s)
		return;
	hsrv_stop(s->srv); /* aborts every job still held by a connection */
	sim_free(s);
}
