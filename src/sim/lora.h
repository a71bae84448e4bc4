/*
 * lora.h - the simulated accelerator's LoRA adapters (accelnet sim --lora, --max-loras,
 * --lora-load-ms), as vLLM serves them with runtime loading:
 *
 *  - a request naming the base model (one of --models, else --name), or no model, runs as
 *    before; any other name is an adapter: one loaded is used, another is loaded on demand;
 *  - at most max_loras adapters are loaded (the accelerator's adapter slots); loading one
 *    more evicts the least recently used adapter that no running request uses;
 *  - one batch holds at most max_loras distinct adapters: a request whose adapter is not among
 *    those running waits while max_loras others run (vLLM's scheduler skips it for the next
 *    request that fits, so the queue is first come first served among those that fit);
 *  - a load costs load_ms, added to the time to first token of the request that needed it.
 *
 * It keeps per adapter its requests, loads, and the requests of it running and waiting, and
 * writes vllm:lora_requests_info as vLLM does: one sample per label set (max_lora,
 * running_lora_adapters, waiting_lora_adapters, names joined by commas) ever set, its value
 * the wall-clock time it was last set (each GET /metrics sets the current one), the last
 * SIM_LORA_HISTORY label sets kept.
 */
#ifndef ACCELNET_SIM_LORA_H
#define ACCELNET_SIM_LORA_H

#include <stddef.h>
#include <stdint.h>

#define SIM_LORA_MAX 32	   /* adapters known at once (loaded, or with requests) */
#define SIM_LORA_NAME 128  /* bytes of a name, with the NUL (SIM_MODEL_NAME) */
#define SIM_LORA_HISTORY 8 /* label sets of vllm:lora_requests_info kept */
#define SIM_LORA_LIST 2048 /* bytes of one label's names */

struct sim_lora {
	char name[SIM_LORA_NAME];
	unsigned running, waiting; /* its requests running and waiting now */
	unsigned long requests, loads;
	uint64_t used; /* when it last ran (a tick): the least recent loaded one goes first */
	int loaded;
};

struct sim_lora_set {
	char running[SIM_LORA_LIST], waiting[SIM_LORA_LIST];
	double at; /* wall-clock seconds it was last set */
};

struct sim_loras {
	struct sim_lora a[SIM_LORA_MAX];
	unsigned n, max, load_ms;
	uint64_t tick;
	unsigned long loads;
	struct sim_lora_set hist[SIM_LORA_HISTORY]; /* oldest first */
	unsigned nhist;
};

/* Adapters <names> (a comma-separated list, may be NULL) loaded at start, at most <max>. 0, or
 * -EINVAL when there are more than max or SIM_LORA_MAX, or a name is empty or too long. */
int sim_lora_init(struct sim_loras *l, const char *names, unsigned max, unsigned load_ms);

/* The adapter named <name> (known, or taken into the table): its index, or -ENOSPC when every
 * entry is loaded or has requests. */
int sim_lora_get(struct sim_loras *l, const char *name);

/* May a request of adapter <i> start now: is it running already, or do fewer than max
 * distinct adapters run? */
int sim_lora_fits(const struct sim_loras *l, int i);

/* A request of adapter <i> was queued / starts / ends while running / leaves the queue. The
 * start loads it when it is not: returns the ms that costs (0 when loaded). */
void sim_lora_queued(struct sim_loras *l, int i);
unsigned sim_lora_start(struct sim_loras *l, int i);
void sim_lora_done(struct sim_loras *l, int i);
void sim_lora_unqueued(struct sim_loras *l, int i);

/* vllm:lora_requests_info (HELP, TYPE, its samples) into out[0..cap), at wall-clock <now_s>;
 * the bytes written. */
size_t sim_lora_metrics(struct sim_loras *l, double now_s, char *out, size_t cap);
/* ,"max_loras":N,"lora_loads":N,"lora":{NAME:{...},...} into out[0..cap); the bytes written. */
size_t sim_lora_stats(const struct sim_loras *l, char *out, size_t cap);

#endif
