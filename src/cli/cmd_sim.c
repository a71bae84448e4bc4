/*
 * cmd_sim.c - `accelnet sim`: one simulated accelerator in the foreground until SIGTERM or
 * SIGINT.
 */
#include "cli/cli.h"
#include "core/log.h"
#include "core/signals.h"
#include "sim/sim.h"

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
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct sim_opts o;
	const char *listen = NULL, *why;
	int ch;
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
		if (ch == 'n') {
			snprintf(o.name, sizeof(o.name), "%s", optarg);
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
		log_error("cannot listen on %s: %s", listen, strerror(-rc));
		loop_destroy(loop);
		return 1;
	}
	signals_watch(loop, sim_on_signal, loop);
	log_info("simulated accelerator '%s' on %s: %u slots, %u ms to first token, "
		 "%u tokens every %u ms, jitter %.2f, fail rate %.2f, stall %u ms every %u ms, "
		 "prefix cache %u (%u ms on a hit)",
		 o.name, listen, o.slots, o.latency_ms, o.tokens, o.token_ms, o.jitter, o.fail_rate,
		 o.stall_ms, o.stall_every_ms, o.prefix_cache, o.cache_hit_ms);
	loop_run(loop);
	sim_stop(sim);
	loop_destroy(loop);
	return 0;
}
