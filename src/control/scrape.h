/*
 * scrape.h - reading the inference engines' own metrics as a load signal, on the main
 * thread's loop beside the health checks (never on the request path).
 *
 * For every backend of a pool with engine_metrics:, a scraper connects every interval_ms,
 * sends GET <path> (HTTP/1.0: the answer ends when the engine closes), reads at most
 * max_bytes within timeout_ms, and reads the gauges of vLLM, SGLang and TGI out of the
 * Prometheus text (obs/promtext.h), each summed over its label sets:
 *
 *   waiting   vllm:num_requests_waiting, sglang:num_queue_reqs, tgi_queue_size
 *   running   vllm:num_requests_running, sglang:num_running_reqs, tgi_batch_current_size
 *   KV cache  vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc, sglang:token_usage
 *             (0..1; the mean of its label sets)
 *
 * running + waiting, less our own requests in flight to the backend at that moment, is the
 * load of work that did not pass through this proxy (other proxies, direct clients), and
 * goes where the backend's own X-Queue-Depth goes (backend_report_engine): the fresher
 * report wins. A scrape that fails (no connection, a status other than 200, too large, too
 * slow, not Prometheus text, or none of the gauges above) is counted and changes nothing.
 *
 * LoRA adapters: vLLM's vllm:lora_requests_info (its latest label set: running_lora_adapters
 * and waiting_lora_adapters, names separated by commas, and max_lora) and the model_name of
 * vllm:num_requests_running (its base model) are folded into the backend's adapter snapshot
 * (policy/lora.h), which the picks read to send an adapter's requests where it is loaded.
 */
#ifndef ACCELNET_CONTROL_SCRAPE_H
#define ACCELNET_CONTROL_SCRAPE_H

#include "core/loop.h"
#include "runtime/pool.h"

struct scrape;

/* Start scraping every backend of every pool with engine_metrics (none: *out is still set,
 * with nothing to do). 0 or -ENOMEM. */
int scrape_start(struct loop *loop, struct runtime *rt, struct scrape **out);
void scrape_stop(struct scrape *s);

#endif
