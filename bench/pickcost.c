/*
 * pickcost.c - what one scheduling decision of balance: llm costs, in the proxy's own code.
 *
 * A decision is everything the proxy does for one request between having its body and
 * knowing its backend: the body read once by the strict view that validates it (json_view_read:
 * every request pays it before anything reads the body), the prompt read from it as block
 * hashes (http_prompt_blocks), each backend's longest cached prefix from its prefix index and its
 * fitted costs (llm_candidate), the policy's pick (lb_llm), and counting it on the chosen
 * backend with its prompt recorded in that backend's index (llm_picked) -- plus what its answer
 * costs later: the fit's sample (llm_answered). It runs them on a fleet of <backends> whose
 * indexes hold what a busy fleet's would: 64 system prompts, each at home on one or two backends,
 * plus the conversations built on them. Requests are OpenAI chat bodies of about <kib> KiB
 * (a system prompt and a conversation), keys in varied orders, each copied into one read
 * buffer before it is timed, as recv() leaves it in the proxy. For scale it also times
 * prefix-affinity's key (http_prompt_key on 256 bytes) and a least-connections pick.
 *
 * The prompt's blocks are scoped by the body's model and cache_salt as the proxy scopes them
 * (llm_scope_blocks, counted in ns_prompt_blocks). With --lora the pool's engines serve LoRA
 * adapters (each backend's snapshot: two of max_lora 4 running, the request's model, "m",
 * loaded on half of them), and each decision restricts the candidates to the adapter's best
 * tier first (lora_prefer, counted in ns_match_and_pick), as pool_pick does.
 *
 * With --explain it also reads each decision back as the proxy does for a pool whose decisions
 * it records (lb_ops.explain: /debug/requests, llm.explain, accelnet_llm_predict_*), timed on
 * its own ("ns_explain"), outside the decision's figures.
 *
 * With --queued N the pool is under load: N requests in its queue, a few of them counted on
 * each backend (lb_candidate.waiting), so the pick weighs what a prefill costs the queue.
 *
 * usage: pickcost [--backends 16] [--kib 16] [--block-bytes 256] [--requests 200000] [--explain]
 *                 [--queued N] [--lora]
 * Prints ns per decision and per phase; one thread, so figures are per core.
 */
#include "http/jsonview.h"
#include "http/prompt.h"
#include "policy/lb.h"
#include "policy/lora.h"
#include "policy/models.h"
#include "runtime/llm.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BODIES 256
#define SYSTEMS 64

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A body: system prompt <sys> of about <bytes>, then <turns> turns, fields in order <order>. */
static char *make_body(unsigned sys, size_t bytes, unsigned turns, unsigned order)
{
	size_t cap = bytes + 4096;
	char *b = malloc(cap), *sp = malloc(bytes + 1);
	if (!b || !sp)
		exit(1);
	size_t n = 0;
	while (n < bytes) {
		int k = snprintf(sp + n, bytes + 1 - n, "System %u rule %zu: answer with care. ",
				 sys, n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	sp[bytes] = 0;
	size_t o = 0;
	o += (size_t)snprintf(b + o, cap - o, "{%s\"messages\":[{%s\"content\":\"%s\"%s}",
			      order & 1 ? "\"stream\":true,\"model\":\"m\"," : "",
			      order & 2 ? "\"role\":\"system\"," : "", sp,
			      order & 2 ? "" : ",\"role\":\"system\"");
	for (unsigned t = 0; t < turns; t++)
		o += (size_t)snprintf(b + o, cap - o,
				      ",{\"role\":\"user\",\"content\":\"question %u of %u\"},"
				      "{\"role\":\"assistant\",\"content\":\"answer %u\"}",
				      t, order, t);
	o += (size_t)snprintf(b + o, cap - o, "]%s}",
			      order & 1 ? "" : ",\"model\":\"m\",\"max_tokens\":64");
	free(sp);
	return b;
}

int main(int argc, char **argv)
{
	unsigned nb = 16, kib = 16, block = 256, requests = 200000, explain = 0, queued = 0,
		 lora = 0;
	static const struct option opts[] = {{"backends", required_argument, NULL, 'b'},
					     {"kib", required_argument, NULL, 'k'},
					     {"block-bytes", required_argument, NULL, 's'},
					     {"requests", required_argument, NULL, 'n'},
					     {"explain", no_argument, NULL, 'e'},
					     {"queued", required_argument, NULL, 'q'},
					     {"lora", no_argument, NULL, 'l'},
					     {NULL, 0, NULL, 0}};
	int ch;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		unsigned v = optarg ? (unsigned)strtoul(optarg, NULL, 10) : 0;
		if (ch == 'b')
			nb = v;
		else if (ch == 'k')
			kib = v;
		else if (ch == 's')
			block = v;
		else if (ch == 'n')
			requests = v;
		else if (ch == 'e')
			explain = 1;
		else if (ch == 'q')
			queued = v;
		else if (ch == 'l')
			lora = 1;
		else
			return 2;
	}
	if (!nb || nb > LB_MAX_BACKENDS || !kib || !requests)
		return 2;
	struct lb_state st = {.block_bytes = block, .cache_blocks = 65536, .max_wait_ms = 2000};
	struct llm_fit *pool;
	struct llm_backend **be = calloc(nb, sizeof(*be));
	if (!be || llm_fit_new(&pool) < 0)
		return 1;
	for (unsigned i = 0; i < nb; i++)
		if (llm_backend_new(&st, pool, &be[i]) < 0)
			return 1;
	char *body[BODIES];
	size_t len[BODIES];
	for (unsigned i = 0; i < BODIES; i++) {
		body[i] = make_body(i % SYSTEMS, (size_t)kib * 1024 - 1024, 1 + i % 5, i);
		len[i] = strlen(body[i]);
	}
	uint64_t *h = malloc(LLM_MAX_BLOCKS * sizeof(*h));
	/* --lora: each engine runs two adapters of its four slots; "m" on half of them */
	uint64_t model = models_hash("m", 1);
	struct lora_snap snaps[LB_MAX_BACKENDS];
	const struct lora_snap *snap[LB_MAX_BACKENDS];
	for (unsigned i = 0; i < nb; i++) {
		uint64_t act[2] = {i % 2 ? model : 1000 + i, 2000 + i};
		memset(&snaps[i], 0, sizeof(snaps[i]));
		lora_fold(&snaps[i], act, 2, 4, models_hash("base", 4));
		snap[i] = &snaps[i];
	}
	struct lb_candidate cand[LB_MAX_BACKENDS];
	/* warm: every body served once, on the backend its system prompt calls home */
	for (unsigned i = 0; i < BODIES; i++) {
		struct json_view wv;
		const char *bad;
		long n = http_prompt_blocks(body[i], len[i], block, h, LLM_MAX_BLOCKS, NULL);
		if (json_view_read(&wv, body[i], len[i], &bad) < 0)
			return 1;
		llm_scope_blocks(h, (uint32_t)n, &wv, body[i]);
		llm_answered(be[(i % SYSTEMS) % nb], h, (uint32_t)n, (uint32_t)n, 100000, 0);
	}
	uint64_t t_view = 0, t_hash = 0, t_pick = 0, t_note = 0, t_explain = 0, sink = 0,
		 blocks = 0;
	struct lb_explain ex = {0};
	struct json_view view;
	const char *why;
	char *in = malloc((size_t)kib * 1024 + 4096); /* the connection's read buffer */
	if (!in)
		return 1;
	for (unsigned r = 0; r < requests; r++) {
		unsigned i = r % BODIES;
		/* the body as the proxy has it: just read from the socket into its buffer (recv's
		 * copy, not timed: it happens for every proxy alike) */
		memcpy(in, body[i], len[i]);
		uint64_t tv = now_ns();
		if (json_view_read(&view, in, len[i], &why) < 0)
			return 1;
		uint64_t t0 = now_ns();
		long n = http_prompt_blocks(in, len[i], block, h, LLM_MAX_BLOCKS, NULL);
		llm_scope_blocks(h, n > 0 ? (uint32_t)n : 0, &view, in);
		uint64_t t1 = now_ns();
		for (unsigned b = 0; b < nb; b++) {
			cand[b] = (struct lb_candidate){.weight = 1,
							.slots = 4,
							.inflight = (r + b) % 4,
							.eligible = 1,
							.id = b * 0x9e3779b97f4a7c15u};
			llm_candidate(be[b], h, (uint32_t)n, &cand[b]);
			if (queued) /* (a loaded pool: every other backend at its cap) */
				cand[b] = (struct lb_candidate){.weight = 1,
								.slots = 4,
								.inflight = 4 - (b & 1),
								.eligible = b & 1,
								.busy = !(b & 1),
								.hit_blocks = cand[b].hit_blocks,
								.base_us = cand[b].base_us,
								.block_us = cand[b].block_us,
								.service_us = cand[b].service_us,
								.id = b * 0x9e3779b97f4a7c15u,
								.waiting = (r + b) % 3};
		}
		if (lora)
			lora_prefer(snap, model, cand, nb);
		struct lb_draw d = {.rnd = r * 0x9e3779b97f4a7c15u,
				    .key = n > 0 ? h[0] : 0, /* (as pool_pick names the prompt) */
				    .has_key = n > 0,
				    .blocks = (uint32_t)n,
				    .queued = queued};
		int idx = lb_llm.pick(&st, cand, nb, &d);
		uint64_t t2 = now_ns();
		if (explain) { /* what the proxy adds for a decision it shows: read back once */
			lb_llm.explain(&st, cand, nb, &d, idx, &ex);
			uint64_t te = now_ns();
			t_explain += te - t2;
			sink += ex.ncand;
			t2 = te;
		}
		if (idx >= 0) { /* counted and recorded in the index, then its answer's sample */
			uint32_t hit = cand[idx].hit_blocks;
			llm_done(be[idx], llm_picked(be[idx], h, (uint32_t)n, hit, NULL));
			llm_answered(be[idx], h, (uint32_t)n, (uint32_t)n - hit,
				     20000 + 1000 * (n - hit), 1);
		}
		uint64_t t3 = now_ns();
		t_view += t0 - tv;
		t_hash += t1 - t0;
		t_pick += t2 - t1;
		t_note += t3 - t2; /* (after the read-back: it is timed on its own) */
		blocks += (uint64_t)n;
		sink += (uint64_t)idx;
	}
	/* for scale: prefix-affinity's key, and a plain least-connections pick */
	uint64_t t4 = now_ns(), key = 0;
	uint64_t t_key = 0;
	for (unsigned r = 0; r < requests; r++) {
		memcpy(in, body[r % BODIES], len[r % BODIES]);
		uint64_t t = now_ns();
		http_prompt_key(in, len[r % BODIES], 1, 256, &key);
		t_key += now_ns() - t;
		sink += key;
	}
	uint64_t t5 = now_ns();
	for (unsigned r = 0; r < requests; r++) {
		struct lb_draw d = {.rnd = r};
		sink += (uint64_t)lb_least_connections.pick(&st, cand, nb, &d);
	}
	uint64_t t6 = now_ns();
	double per = requests;
	char explained[48] = "";
	if (explain) /* the read-back, not in ns_per_decision: the pick's cost is unchanged */
		snprintf(explained, sizeof(explained), " \"ns_explain\": %.0f,", t_explain / per);
	printf("{\"backends\": %u, \"lora\": %s, \"body_bytes\": %zu, \"block_bytes\": %u, "
	       "\"blocks\": %.1f,\n"
	       " \"ns_per_decision\": %.0f, \"ns_view\": %.0f, \"ns_prompt_blocks\": %.0f,"
	       " \"ns_match_and_pick\": %.0f,"
	       " \"ns_record\": %.0f,%s\n \"ns_prefix_affinity_key\": %.0f,"
	       " \"ns_least_connections_pick\": %.0f, \"sink\": %llu}\n",
	       nb, lora ? "true" : "false", len[0], block, blocks / per,
	       (t_view + t_hash + t_pick + t_note) / per, t_view / per, t_hash / per, t_pick / per,
	       t_note / per, explained, t_key / per, (t6 - t5) / per,
	       (unsigned long long)(sink & 1));
	for (unsigned i = 0; i < nb; i++)
		llm_backend_free(be[i]);
	for (unsigned i = 0; i < BODIES; i++)
		free(body[i]);
	free(be);
	free(pool);
	free(h);
	free(in);
	(void)t4;
	return 0;
}
