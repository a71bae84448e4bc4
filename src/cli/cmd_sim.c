/*
 * cmd_sim.c - `accelnet sim`: one simulated accelerator in the foreground until SIGTERM or
 * SIGINT.
 */
#include "cli/cli.h"
#include "core/log.h"
#include "core/signals.h"
#include "http/prompt.h"
#include "sim/kvevents.h"
#include "sim/kvreplay.h"
#include "sim/lora.h"
#include "sim/sim.h"
#include "tok/tokmodel.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_number(const char *opt, const char *text, double min, double max, double *out)
{
	char *end;
	double v = strtod(text, &end);
	if (!*text || *end || v < min || v > max) {
		fprintf(stderr, "accelnet sim: %s takes a number from %g to %g, not '%s'\n", opt,
			min, max, text);
		return -1;
	}
	*out = v;
	return 0;
}

/* --models a,b,c: names of printable ASCII, none of '"', '\\', ',' or a space. */
static int parse_models(const char *text, struct sim_opts *o)
{
	o->nmodels = 0;
	for (const char *p = text;; p++) {
		size_t n = strcspn(p, ",");
		int ok = n > 0 && n < SIM_MODEL_NAME && o->nmodels < SIM_MODELS;
		for (size_t i = 0; ok && i < n; i++)
			ok = p[i] > ' ' && p[i] < 0x7f && p[i] != '"' && p[i] != '\\';
		if (!ok) {
			fprintf(
			    stderr,
			    "accelnet sim: --models takes up to %d names separated by commas, each "
			    "of 1 to %d printable characters without '\"', '\\' or spaces, not "
			    "'%s'\n",
			    SIM_MODELS, SIM_MODEL_NAME - 1, text);
			return -1;
		}
		memcpy(o->models[o->nmodels], p, n);
		o->models[o->nmodels++][n] = 0;
		p += n;
		if (!*p)
			return 0;
	}
}

/* --lora a,b: adapter names as --models takes them, at most SIM_LORA_MAX. The count, or -1. */
static int parse_lora(const char *text, struct sim_opts *o)
{
	int n = 0;
	for (const char *p = text;; p++, n++) {
		size_t k = strcspn(p, ",");
		int ok = k > 0 && k < SIM_LORA_NAME && n < SIM_LORA_MAX &&
			 strlen(text) < sizeof(o->lora);
		for (size_t i = 0; ok && i < k; i++)
			ok = p[i] > ' ' && p[i] < 0x7f && p[i] != '"' && p[i] != '\\';
		if (!ok) {
			fprintf(
			    stderr,
			    "accelnet sim: --lora takes up to %d adapter names separated by "
			    "commas, each of 1 to %d printable characters without '\"', '\\' or "
			    "spaces, not '%s'\n",
			    SIM_LORA_MAX, SIM_LORA_NAME - 1, text);
			return -1;
		}
		p += k;
		if (!*p)
			break;
	}
	memcpy(o->lora, text, strlen(text) + 1);
	return n + 1;
}

/* The options that take words: --kv-events, --kv-events-replay, --kv-events-topic,
 * --kv-events-format, --models. */
static int parse_text(int ch, const char *text, struct sim_opts *o)
{
	if (ch == 'M')
		return parse_models(text, o);
	if (ch == 'F') {
		static const char *const names[] = {[KVEVENTS_MAP] = "map",
						    [KVEVENTS_ARRAY] = "array",
						    [KVEVENTS_SGLANG] = "sglang"};
		for (unsigned i = 0; i < sizeof(names) / sizeof(*names); i++)
			if (!strcmp(text, names[i])) {
				o->kv_events_format = i;
				return 0;
			}
		fprintf(stderr,
			"accelnet sim: --kv-events-format is map, array or sglang, not '%s'\n",
			text);
		return -1;
	}
	int endpoint = ch == 'K' || ch == 'r';
	char *to = ch == 'K' ? o->kv_events : ch == 'r' ? o->kv_events_replay : o->kv_events_topic;
	size_t cap = ch == 'K'	 ? sizeof(o->kv_events)
		     : ch == 'r' ? sizeof(o->kv_events_replay)
				 : sizeof(o->kv_events_topic);
	if (strlen(text) >= cap ||
	    (endpoint && strncmp(text, "tcp://", 6) && strncmp(text, "ipc://", 6))) {
		fprintf(stderr, "accelnet sim: %s takes %s of less than %zu bytes, not '%s'\n",
			ch == 'K'   ? "--kv-events"
			: ch == 'r' ? "--kv-events-replay"
				    : "--kv-events-topic",
			endpoint ? "a ZeroMQ endpoint (tcp://127.0.0.1:5557)" : "a topic", cap,
			text);
		return -1;
	}
	memcpy(to, text, strlen(text) + 1);
	return 0;
}

static void sim_on_signal(int signo, void *arg)
{
	(void)signo;
	loop_stop(arg);
}

int cmd_sim(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"listen", required_argument, NULL, 'L'},
	    {"name", required_argument, NULL, 'n'},
	    {"slots", required_argument, NULL, 's'},
	    {"latency-ms", required_argument, NULL, 'l'},
	    {"jitter", required_argument, NULL, 'j'},
	    {"tokens", required_argument, NULL, 't'},
	    {"token-ms", required_argument, NULL, 'T'},
	    {"fail-rate", required_argument, NULL, 'f'},
	    {"stall-ms", required_argument, NULL, 'S'},
	    {"stall-every-ms", required_argument, NULL, 'E'},
	    {"prefix-cache", required_argument, NULL, 'P'},
	    {"cache-hit-ms", required_argument, NULL, 'H'},
	    {"cache-blocks", required_argument, NULL, 'C'},
	    {"block-bytes", required_argument, NULL, 'B'},
	    {"prefill-us-per-block", required_argument, NULL, 'U'},
	    {"kv-events", required_argument, NULL, 'K'},
	    {"kv-events-topic", required_argument, NULL, 'O'},
	    {"kv-events-format", required_argument, NULL, 'F'},
	    {"kv-events-skip", required_argument, NULL, 'k'},
	    {"kv-events-delay-ms", required_argument, NULL, 'y'},
	    {"kv-events-replay", required_argument, NULL, 'r'},
	    {"kv-events-buffer", required_argument, NULL, 'G'},
	    {"tokenizer", required_argument, NULL, 'z'},
	    {"block-size", required_argument, NULL, 'b'},
	    {"models", required_argument, NULL, 'M'},
	    {"extra-load", required_argument, NULL, 'X'},
	    {"early-headers", no_argument, NULL, 'e'},
	    {"role", required_argument, NULL, 'R'},
	    {"pd-secret", required_argument, NULL, 'W'},
	    {"kv-pull-us-per-block", required_argument, NULL, 'Q'},
	    {"pd-allow-local", required_argument, NULL, 'A'},
	    {"lora", required_argument, NULL, 'a'},
	    {"max-loras", required_argument, NULL, 'm'},
	    {"lora-load-ms", required_argument, NULL, 'D'},
	    {"prefill-stalls-decode", required_argument, NULL, 'I'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct sim_opts o;
	const char *listen = NULL, *why;
	int ch, nlora = 0;
	sim_opts_default(&o);
	/* the numeric options: where each goes and what it may be */
	const struct {
		int ch;
		const char *name;
		double min, max;
		unsigned *u; /* one of these two */
		double *d;
	} nums[] = {
	    {'s', "--slots", 1, 100000, &o.slots, NULL},
	    {'l', "--latency-ms", 0, 3600000, &o.latency_ms, NULL},
	    {'j', "--jitter", 0, 1, NULL, &o.jitter},
	    {'t', "--tokens", 1, 1000000, &o.tokens, NULL},
	    {'T', "--token-ms", 0, 60000, &o.token_ms, NULL},
	    {'f', "--fail-rate", 0, 1, NULL, &o.fail_rate},
	    {'S', "--stall-ms", 0, 3600000, &o.stall_ms, NULL},
	    {'E', "--stall-every-ms", 0, 86400000, &o.stall_every_ms, NULL},
	    {'P', "--prefix-cache", 0, 1000000, &o.prefix_cache, NULL},
	    {'H', "--cache-hit-ms", 0, 3600000, &o.cache_hit_ms, NULL},
	    {'C', "--cache-blocks", 0, 4194304, &o.cache_blocks, NULL},
	    {'B', "--block-bytes", HTTP_PROMPT_BLOCK_MIN, HTTP_PROMPT_BLOCK_MAX, &o.block_bytes,
	     NULL},
	    {'k', "--kv-events-skip", 0, 4294967295.0, &o.kv_events_skip, NULL},
	    {'y', "--kv-events-delay-ms", 0, 60000, &o.kv_events_delay_ms, NULL},
	    {'G', "--kv-events-buffer", 0, KVREPLAY_STEPS_MAX, &o.kv_events_buffer, NULL},
	    {'b', "--block-size", 1, TOKMODEL_BLOCK_MAX, &o.block_size, NULL},
	    {'U', "--prefill-us-per-block", 0, 60000000, &o.prefill_us_per_block, NULL},
	    {'X', "--extra-load", 0, SIM_EXTRA_LOAD_MAX, &o.extra_load, NULL},
	    {'Q', "--kv-pull-us-per-block", 0, 60000000, &o.kv_pull_us_per_block, NULL},
	    {'A', "--pd-allow-local", 0, 1, &o.pd_allow_local, NULL},
	    {'m', "--max-loras", 0, SIM_LORA_MAX, &o.max_loras, NULL},
	    {'D', "--lora-load-ms", 0, 3600000, &o.lora_load_ms, NULL},
	    {'I', "--prefill-stalls-decode", 0, 1, &o.prefill_stalls_decode, NULL},
	};
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (ch == 'h') {
			cli_usage(stdout, "sim");
			return 0;
		}
		if (ch == 'L') {
			listen = optarg;
			continue;
		}
		if (ch == 'e') {
			o.early_headers = 1;
			continue;
		}
		if (ch == 'n') {
			snprintf(o.name, sizeof(o.name), "%s", optarg);
			continue;
		}
		if (ch == 'R') {
			if (strcmp(optarg, "prefill") != 0 && strcmp(optarg, "decode") != 0) {
				fprintf(stderr,
					"accelnet sim: --role: expected prefill or decode\n");
				return 2;
			}
			o.role = optarg[0] == 'p' ? SIM_ROLE_PREFILL : SIM_ROLE_DECODE;
			continue;
		}
		if (ch == 'z') {
			if (strlen(optarg) >= sizeof(o.tokenizer)) {
				fprintf(stderr,
					"accelnet sim: --tokenizer: a path under 512 bytes\n");
				return 2;
			}
			snprintf(o.tokenizer, sizeof(o.tokenizer), "%s", optarg);
			continue;
		}
		if (ch == 'W') {
			if (strlen(optarg) >= sizeof(o.pd_secret)) {
				fprintf(stderr, "accelnet sim: --pd-secret: at most 127 bytes\n");
				return 2;
			}
			snprintf(o.pd_secret, sizeof(o.pd_secret), "%s", optarg);
			continue;
		}
		if (ch == 'a') {
			if ((nlora = parse_lora(optarg, &o)) < 0)
				return 2;
			continue;
		}
		if (ch == 'K' || ch == 'r' || ch == 'O' || ch == 'F' || ch == 'M') {
			if (parse_text(ch, optarg, &o) < 0)
				return 2;
			continue;
		}
		size_t k = 0;
		while (k < sizeof(nums) / sizeof(nums[0]) && nums[k].ch != ch)
			k++;
		double v;
		if (k == sizeof(nums) / sizeof(nums[0])) { /* getopt_long said what */
			cli_usage(stderr, "sim");
			return 2;
		}
		if (parse_number(nums[k].name, optarg, nums[k].min, nums[k].max, &v) < 0)
			return 2;
		if (nums[k].u)
			*nums[k].u = (unsigned)v;
		else
			*nums[k].d = v;
	}
	if (o.stall_ms && o.stall_ms >= o.stall_every_ms) {
		fprintf(stderr, "accelnet sim: --stall-ms must be shorter than --stall-every-ms\n");
		return 2;
	}
	if (o.prefix_cache && o.cache_blocks) {
		fprintf(stderr, "accelnet sim: --prefix-cache and --cache-blocks are two models of "
				"the prefix cache: pick one\n");
		return 2;
	}
	if (o.kv_events[0] && !o.cache_blocks) {
		fprintf(stderr, "accelnet sim: --kv-events publishes the block cache's changes: it "
				"needs --cache-blocks N\n");
		return 2;
	}
	if (o.kv_events_replay[0] && !o.kv_events[0]) {
		fprintf(stderr, "accelnet sim: --kv-events-replay replays the batches --kv-events "
				"publishes: it needs --kv-events ENDPOINT\n");
		return 2;
	}
	if (o.tokenizer[0] && !o.cache_blocks) {
		fprintf(stderr, "accelnet sim: --tokenizer cuts prompts into the block cache's "
				"blocks: it needs --cache-blocks N\n");
		return 2;
	}
	if (nlora && !o.max_loras)
		o.max_loras = (unsigned)nlora; /* as many slots as adapters loaded */
	if ((unsigned)nlora > o.max_loras) {
		fprintf(stderr,
			"accelnet sim: --lora names %d adapters, more than --max-loras %u\n", nlora,
			o.max_loras);
		return 2;
	}
	if (!listen) {
		fprintf(stderr, "accelnet sim: --listen ADDR is required, e.g. 127.0.0.1:9101\n");
		return 2;
	}
	if (net_addr_parse(listen, &o.addr, &why) < 0) {
		fprintf(stderr, "accelnet sim: bad --listen '%s': %s\n", listen, why);
		return 2;
	}

	struct loop *loop;
	struct sim *sim;
	int rc;
	signals_block();
	log_set_thread_tag(o.name);
	if ((rc = loop_create(&loop)) < 0) {
		log_error("cannot create loop: %s", strerror(-rc));
		return 1;
	}
	if ((rc = sim_start(loop, &o, &sim)) < 0) {
		log_error("cannot start on %s: %s", listen, strerror(-rc));
		loop_destroy(loop);
		return 1;
	}
	signals_watch(loop, sim_on_signal, loop);
	log_info("simulated accelerator '%s' on %s: %u slots, %u ms to first token, "
		 "%u tokens every %u ms, jitter %.2f, fail rate %.2f, stall %u ms every %u ms, "
		 "prefix cache %u (%u ms on a hit), block cache %u blocks of %u bytes (%u us per "
		 "uncached block), extra load %u",
		 o.name, listen, o.slots, o.latency_ms, o.tokens, o.token_ms, o.jitter, o.fail_rate,
		 o.stall_ms, o.stall_every_ms, o.prefix_cache, o.cache_hit_ms, o.cache_blocks,
		 o.block_bytes, o.prefill_us_per_block, o.extra_load);
	if (sim_kv_events_endpoint(sim)[0])
		log_info("KV events on %s (topic '%s', events as %ss)", sim_kv_events_endpoint(sim),
			 o.kv_events_topic,
			 o.kv_events_format == KVEVENTS_SGLANG	? "SGLang's array"
			 : o.kv_events_format == KVEVENTS_ARRAY ? "array"
								: "map");
	if (sim_kv_events_replay_endpoint(sim)[0])
		log_info("KV event replays on %s (the last %u batches)",
			 sim_kv_events_replay_endpoint(sim), o.kv_events_buffer);
	loop_run(loop);
	sim_stop(sim);
	loop_destroy(loop);
	return 0;
}
