/*
 * main.c - `accelnet SUBCOMMAND ...`: dispatch, version and help. The usage text of every
 * subcommand but xfer lives in the table below, once: `accelnet help` lists them all and each
 * subcommand's --help prints its own entry through cli_usage(). xfer builds its longer usage
 * from its flag tables (cmd_xfer.c); its entry here only points there.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage;
} commands[] = {
    {"proxy", cmd_proxy,
     "proxy -c FILE [--log-level LEVEL]   run the gateway in the foreground\n"
     "      (-c is --config, -l is --log-level; LEVEL: error, warn, info or debug)"},
    {"check", cmd_check,
     "check -c FILE [--log-level LEVEL] | --keys\n"
     "      validate a config (exit 0, or 2 with FILE:LINE:COL), or list every key"},
    {"demo", cmd_demo,
     "demo                                 3 simulated accelerators behind the proxy"},
    {"sim", cmd_sim,
     "sim --listen ADDR [--name NAME] [--slots N] [--latency-ms MS] [--jitter F]\n"
     "      [--tokens N] [--token-ms MS] [--fail-rate F] [--stall-ms MS --stall-every-ms MS]\n"
     "      [--prefix-cache N --cache-hit-ms MS | --cache-blocks N [--block-bytes B]\n"
     "      [--prefill-us-per-block US] [--kv-events tcp://HOST:PORT [--kv-events-topic T]\n"
     "      [--kv-events-format map|array|sglang] [--kv-events-skip SEQ]\n"
     "      [--kv-events-delay-ms MS]\n"
     "      [--kv-events-replay tcp://HOST:PORT [--kv-events-buffer N]]]\n"
     "      [--tokenizer FILE [--block-size N]]] [--models A,B,...] [--extra-load N]\n"
     "      [--early-headers] [--role prefill|decode [--pd-secret S]\n"
     "      [--kv-pull-us-per-block US] [--pd-allow-local 0|1]] [--prefill-stalls-decode 0|1]\n"
     "      [--lora A,B,... [--max-loras N] [--lora-load-ms MS]]\n"
     "      a simulated accelerator server. --cache-blocks: a block-level prefix cache\n"
     "      (LRU) of N blocks of B bytes of prompt text (64); the first token comes after\n"
     "      --latency-ms + US (1000) per uncached block; at most 8192 blocks of a prompt\n"
     "      count. --kv-events publishes its changes as vLLM does (ZeroMQ, msgpack).\n"
     "      --tokenizer: blocks of N tokens (16) of the prompt as that tokenizer.json (and\n"
     "      the chat template beside it) gives them, published with their token_ids;\n"
     "      --kv-events-skip: the batch numbered SEQ is lost (a gap, for tests).\n"
     "      --kv-events-delay-ms: each batch goes out MS after its first event.\n"
     "      --kv-events-replay: vLLM's replay socket, from the last N batches (10000).\n"
     "      --models: the models served (others: 404). --extra-load: N phantom requests\n"
     "      from other clients keep coming back to its queue. --early-headers: a stream's\n"
     "      head goes out as the request arrives, its first event after the prefill (as\n"
     "      vLLM's and SGLang's HTTP servers do); without it the head comes with the first\n"
     "      event. --role: one side of prefill/decode disaggregation (vLLM's\n"
     "      kv_transfer_params, SGLang's bootstrap rooms); a decode sim refuses a request\n"
     "      without valid transfer params (400). --prefill-stalls-decode 1: while a prefill\n"
     "      runs, the streams it decodes wait (an engine without chunked prefill). --lora:\n"
     "      LoRA adapters loaded at start (--max-loras: adapter slots, as many as --lora names\n"
     "      by default); with them a model but the base one names an adapter, loaded on\n"
     "      demand (LRU) at a cost of --lora-load-ms (100) to its first token"},
    {"top", cmd_top,
     "top [--admin HOST:PORT] [--token-file FILE] [--interval-ms N] [--once]\n"
     "      live figures per pool and backend from the admin listener, redrawn every N ms\n"
     "      (1000); q or Ctrl-C quits; --once reads twice, one interval apart, prints one\n"
     "      frame and exits. --admin and --token-file as for ctl"},
    {"ctl", cmd_ctl,
     "ctl [--admin HOST:PORT] [--token-file FILE] [--json] COMMAND ...\n"
     "      change a running proxy through its admin API; COMMAND is one of\n"
     "        backends                       every pool's backends and their state\n"
     "        add POOL ADDRESS [--weight N] [--max-concurrency N]\n"
     "        remove|drain|enable|disable POOL ADDRESS\n"
     "        weight POOL ADDRESS N          max-concurrency POOL ADDRESS N\n"
     "        maintenance on [--retry-after S] | off | status\n"
     "        purge uri URL | prefix URL | tag TAG | all\n"
     "        reload\n"
     "      --admin: else $ACCELNET_ADMIN, else 127.0.0.1:8399; --token-file: else\n"
     "      $ACCELNET_ADMIN_TOKEN_FILE. Exit 0 done, 1 refused or unreachable (or done\n"
     "      but not kept in admin.state_file), 2 usage"},
    {"reload", cmd_reload,
     "reload [--admin HOST:PORT] [--token-file FILE] [--json]\n"
     "      reload a running proxy's config file (as SIGHUP does) through its admin API;\n"
     "      exit 0 when the new configuration is in use, 1 with FILE:LINE:COL when the file\n"
     "      is refused (the running configuration stays), 2 usage"},
    {"tokenize", cmd_tokenize,
     "tokenize --tokenizer FILE [--chat [--text]] TEXT|- | ... [--chat [--text]] --lines [-]\n"
     "      (or --model NAME --config FILE in place of --tokenizer FILE: the config's models:)\n"
     "      the token ids of TEXT (- reads standard input) as accelnet computes them from a\n"
     "      Hugging Face tokenizer.json or a SentencePiece model, in decimal separated by\n"
     "      spaces; --lines: one JSON\n"
     "      string literal a line in, one line of ids out; --chat: TEXT is an OpenAI\n"
     "      messages array, rendered by the chat template of the tokenizer_config.json\n"
     "      beside FILE with the generation prompt (docs/tokenizers.md); --chat --text:\n"
     "      the rendered prompt as a JSON string instead of its ids (FILE is not loaded);\n"
     "      --decode --lines: a line of ids in, the JSON string of their text out, as the\n"
     "      gRPC engine mode decodes them"},
    {"xfer", cmd_xfer,
     "xfer serve|send|get|bcast ...         bulk transfer over many streams and links\n"
     "      (accelnet xfer --help)"},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

int cli_is_help(const char *arg)
{
	return !strcmp(arg, "--help") || !strcmp(arg, "-h");
}

void cli_usage(FILE *out, const char *cmd)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(cmd, commands[i].name))
			fprintf(out, "usage: accelnet %s\n", commands[i].usage);
}

static void usage(FILE *out)
{
	fprintf(out, "accelnet %s - the network layer for accelerator clusters\n\nusage:\n",
		ACCELNET_VERSION);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  accelnet %s\n", commands[i].usage);
	fprintf(
	    out,
	    "  accelnet version | help | COMMAND --help\n\nSee README.md and docs/config.md.\n");
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
	if (!strcmp(cmd, "help") || cli_is_help(cmd)) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "accelnet: unknown command '%s'\n\n", cmd);
	usage(stderr);
	return 2;
}
