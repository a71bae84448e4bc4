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
		{NULL, 0, NULL, 0},
	};
	struct sim_opts o;
	const char *listen = NULL, *why;
	double v;
	int ch;
	sim_opts_default(&o);
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'L':
			listen = optarg;
			break;
		case 'n':
			snprintf(o.name, sizeof(o.name), "%s", optarg);
			break;
		case 's':
			if (parse_number("--slots", optarg, 1, 100000, &v) < 0)
				return 2;
			o.slots = (unsigned)v;
			break;
		case 'l':
			if (parse_number("--latency-ms", optarg, 0, 3600000, &v) < 0)
				return 2;
			o.latency_ms = (unsigned)v;
			break;
		case 'j':
			if (parse_number("--jitter", optarg, 0, 1, &v) < 0)
				return 2;
			o.jitter = v;
			break;
		case 't':
			if (parse_number("--tokens", optarg, 1, 4096, &v) < 0)
				return 2;
			o.tokens = (unsigned)v;
			break;
		case 'T':
			if (parse_number("--token-ms", optarg, 0, 60000, &v) < 0)
				return 2;
			o.token_ms = (unsigned)v;
			break;
		case 'f':
			if (parse_number("--fail-rate", optarg, 0, 1, &v) < 0)
				return 2;
			o.fail_rate = v;
			break;
		case 'S':
			if (parse_number("--stall-ms", optarg, 0, 3600000, &v) < 0)
				return 2;
			o.stall_ms = (unsigned)v;
			break;
		case 'E':
			if (parse_number("--stall-every-ms", optarg, 0, 86400000, &v) < 0)
				return 2;
			o.stall_every_ms = (unsigned)v;
			break;
		default:
			return 2;
		}
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
		 "%u tokens every %u ms, jitter %.2f, fail rate %.2f, stall %u ms every %u ms",
		 o.name, listen, o.slots, o.latency_ms, o.tokens, o.token_ms, o.jitter, o.fail_rate,
		 o.stall_ms, o.stall_every_ms);
	loop_run(loop);
	sim_stop(sim);
	loop_destroy(loop);
	return 0;
}
