/*
 * cli.h - one entry point per subcommand; main.c dispatches on argv[1].
 * Each returns the process exit status: 0 success, 1 runtime failure, 2 usage or config error.
 * Each answers --help and -h with its usage on stdout and exit 0, starting nothing, and an
 * unknown option with a message and its usage on stderr and exit 2.
 */
#ifndef ACCELNET_CLI_CLI_H
#define ACCELNET_CLI_CLI_H

#include <stdio.h>

int cmd_proxy(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_xfer(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_ctl(int argc, char **argv);
/* `accelnet reload [OPTIONS]`: `accelnet ctl [OPTIONS] reload`. */
int cmd_reload(int argc, char **argv);

/* "usage: accelnet CMD ..." from main.c's table of subcommands (all but xfer's). */
void cli_usage(FILE *out, const char *cmd);
/* Whether <arg> asks for help: --help or -h. */
int cli_is_help(const char *arg);

#define ACCELNET_VERSION "0.1.0"

#endif
