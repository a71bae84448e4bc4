/*
 * cmd_demo.c - `accelnet demo`: three simulated accelerators of different speeds on
 * 127.0.0.1:9101-9103 behind the proxy on 127.0.0.1:8080, admin on 127.0.0.1:8399. The
 * simulators run on the proxy's main loop; the proxy config is the embedded YAML below,
 * loaded by the same code as any file.
 */
#include "cli/cli.h"
#include "conf/conf.h"
#include "core/log.h"
#include "control/proxy.h"
#include "sim/sim.h"

#include <stdio.h>
#include <string.h>

static const char demo_yaml[] = "workers: 2\n"
				"listen:\n"
				"  - address: 127.0.0.1:8080\n"
				"admin:\n"
				"  address: 127.0.0.1:8399\n"
				"timeouts: {shutdown_ms: 3000}\n"
				"pools:\n"
				"  - name: accelerators\n"
				"    balance: round-robin\n"
				"    backends:\n"
				"      - {address: 127.0.0.1:9101}\n"
				"      - {address: 127.0.0.1:9102}\n"
				"      - {address: 127.0.0.1:9103}\n"
				"    health: {path: /health, interval_ms: 1000, fall: 2, rise: 2}\n"
				"routes:\n"
				"  - name: llm\n"
				"    match: {path_prefix: /}\n"
				"    pool: accelerators\n"
				"    api: openai\n";

static const struct {
	const char *name, *addr;
	unsigned slots, latency_ms, token_ms;
} demo_sims[] = {
    {"accel-fast", "127.0.0.1:9101", 8, 40, 10},
    {"accel-medium", "127.0.0.1:9102", 4, 120, 25},
    {"accel-slow", "127.0.0.1:9103", 2, 300, 60},
};

#define NSIMS (sizeof(demo_sims) / sizeof(demo_sims[0]))

struct demo {
	struct sim *sims[NSIMS];
};

static int demo_start(struct loop *loop, void *arg)
{
	struct demo *d = arg;
	for (size_t i = 0; i < NSIMS; i++) {
		struct sim_opts o;
		const char *why;
		sim_opts_default(&o);
		snprintf(o.name, sizeof(o.name), "%s", demo_sims[i].name);
		net_addr_parse(demo_sims[i].addr, &o.addr, &why);
		o.slots = demo_sims[i].slots;
		o.latency_ms = demo_sims[i].latency_ms;
		o.token_ms = demo_sims[i].token_ms;
		int rc = sim_start(loop, &o, &d->sims[i]);
		if (rc < 0) {
			log_error("demo: cannot start %s on %s: %s", o.name, demo_sims[i].addr,
				  strerror(-rc));
			return rc;
		}
		log_info("demo: %s on %s (%u slots, %u ms to first token, a token every %u ms)",
			 o.name, demo_sims[i].addr, o.slots, o.latency_ms, o.token_ms);
	}
	return 0;
}

static void demo_ready(void *arg)
{
	(void)arg;
	printf(
	    "\naccelnet demo is up: 3 simulated accelerators behind the proxy.\n\n"
	    "Try:\n"
	    "  curl -s localhost:8080/v1/completions -d '{\"prompt\":\"hi\"}'\n"
	    "  curl -si localhost:8080/v1/completions -d '{\"prompt\":\"hi\"}' | grep X-Served-By"
	    "   (repeat: it moves)\n"
	    "  curl -sN localhost:8080/v1/chat/completions -d '{\"stream\":true,\"messages\":[]}'"
	    "   (tokens stream)\n"
	    "  curl -s localhost:8399/status        (backends, health, load)\n"
	    "  curl -s localhost:8399/metrics       (Prometheus)\n"
	    "  http://127.0.0.1:8399/dashboard      (live charts, in a browser)\n"
	    "\nCtrl-C stops everything.\n\n");
	fflush(stdout);
}

static void demo_stop(void *arg)
{
	struct demo *d = arg;
	for (size_t i = 0; i < NSIMS; i++)
		sim_stop(d->sims[i]);
}

int cmd_demo(int argc, char **argv)
{
	struct conf *conf;
	struct conf_error err;
	struct demo d = {0};
	if (argc == 2 && cli_is_help(argv[1])) {
		cli_usage(stdout, "demo");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "accelnet demo: takes no arguments, not '%s'\n", argv[1]);
		cli_usage(stderr, "demo");
		return 2;
	}
	if (conf_load_string("<demo>", demo_yaml, sizeof(demo_yaml) - 1, &conf, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	struct proxy_hooks hooks = {demo_start, demo_ready, demo_stop, &d, NULL};
	int status = proxy_run(conf, &hooks);
	conf_free(conf);
	return status;
}
