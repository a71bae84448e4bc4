/*
 * cli.h - one entry point per subcommand; main.c dispatches on argv[1].
 * Each returns the process exit status: 0 success, 1 runtime failure, 2 usage or config error.
 */
#ifndef ACCELNET_CLI_CLI_H
#define ACCELNET_CLI_CLI_H

int cmd_proxy(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_xfer(int argc, char **argv);
int cmd_top(int argc, char **argv);

#define ACCELNET_VERSION "0.1.0"

#endif
