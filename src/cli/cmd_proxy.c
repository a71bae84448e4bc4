/*
 * cmd_proxy.c - `accelnet proxy` and `accelnet check`: load a config, then run or just say
 * whether it is valid.
 */
#include "cli/cli.h"
#include "conf/conf.h"
#include "core/log.h"
#include "control/proxy.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

struct conf_args {
	const char *file;
	const char *log_level;
	int keys;
};

/* 0 to go on, 1 when --help printed the usage (exit 0), -1 on a usage error (printed). */
static int parse_args(int argc, char **argv, struct conf_args *a, const char *cmd)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"log-level", required_argument, NULL, 'l'},
	    {"keys", no_argument, NULL, 'k'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "c:l:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			a->file = optarg;
			break;
		case 'l':
			a->log_level = optarg;
			break;
		case 'k':
			a->keys = 1;
			break;
		case 'h':
			cli_usage(stdout, cmd);
			return 1;
		default: /* getopt_long said what */
			cli_usage(stderr, cmd);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "accelnet %s: unexpected argument '%s'\n", cmd, argv[optind]);
		return -1;
	}
	if (a->log_level) {
		enum log_level lvl;
		if (log_parse_level(a->log_level, &lvl) < 0) {
			fprintf(stderr,
				"accelnet %s: --log-level takes error, warn, info or debug\n", cmd);
			return -1;
		}
		log_threshold = lvl;
	}
	if (!a->file && !a->keys) {
		fprintf(stderr, "accelnet %s: -c FILE is required\n", cmd);
		return -1;
	}
	return 0;
}

int cmd_check(int argc, char **argv)
{
	struct conf_args a = {0};
	struct conf_error err;
	struct conf *conf;
	int rc = parse_args(argc, argv, &a, "check");
	if (rc)
		return rc > 0 ? 0 : 2;
	if (a.keys) {
		conf_print_keys(stdout);
		return 0;
	}
	if (conf_load_file(a.file, &conf, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 2;
	}
	if (proxy_check(conf, err.msg, sizeof(err.msg)) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		conf_free(conf);
		return 2;
	}
	printf("%s: ok (%zu listener%s, %zu pool%s, %zu route%s, %u workers)\n", a.file,
	       conf->nlistens, conf->nlistens == 1 ? "" : "s", conf->npools,
	       conf->npools == 1 ? "" : "s", conf->nroutes, conf->nroutes == 1 ? "" : "s",
	       conf->workers);
	conf_free(conf);
	return 0;
}

int cmd_proxy(int argc, char **argv)
{
	struct conf_args a = {0};
	struct conf_error err;
	struct conf *conf;
	int rc = parse_args(argc, argv, &a, "proxy");
	if (rc)
		return rc > 0 ? 0 : 2;
	if (a.keys) {
		fprintf(stderr, "accelnet proxy: --keys is for accelnet check\n");
		return 2;
	}
	if (conf_load_file(a.file, &conf, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 2;
	}
	struct proxy_hooks hooks = {.conf_path = a.file};
	int status = proxy_run(conf, &hooks);
	conf_free(conf);
	return status;
}
