/*
 * main.c - `accelnet SUBCOMMAND ...`: dispatch, version and help.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage;
} commands[] = {
    {"proxy", cmd_proxy, "proxy -c FILE [--log-level LEVEL]   run the gateway in the foreground"},
    {"check", cmd_check,
     "check -c FILE [--keys]              validate a config (exit 0, or 2 with FILE:LINE:COL)"},
    {"demo", cmd_demo,
     "demo                                 3 simulated accelerators behind the proxy"},
    {"sim", cmd_sim,
     "sim --listen ADDR [--name NAME] [--slots N] [--latency-ms MS] [--jitter F]\n"
     "      [--tokens N] [--token-ms MS] [--fail-rate F] [--stall-ms MS --stall-every-ms MS]\n"
     "      [--prefix-cache N --cache-hit-ms MS]\n"
     "      a simulated accelerator server"},
    {"top", cmd_top,
     "top --admin HOST:PORT [--token-file FILE] [--interval-ms N] [--once]\n"
     "      live figures per pool and backend from the admin listener (q quits)"},
    {"xfer", cmd_xfer,
     "xfer serve|send|get|bcast ...         bulk transfer over many streams and links\n"
     "      (accelnet xfer --help)"},
};

static void usage(FILE *out)
{
	fprintf(out, "accelnet %s - the network layer for accelerator clusters\n\nusage:\n",
		ACCELNET_VERSION);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  accelnet %s\n", commands[i].usage);
	fprintf(out, "  accelnet version | help\n\nSee README.md and docs/config.md.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		printf("accelnet %s\n", ACCELNET_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "accelnet: unknown command '%s'\n\n", cmd);
	usage(stderr);
	return 2;
}
