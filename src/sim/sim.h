/*
 * sim.h - the simulated accelerator server (`accelnet sim`).
 *
 * It behaves like an inference server on one accelerator: at most <slots> requests are in
 * service at once and the rest wait inside it in arrival order, so its latency grows with
 * its own queue. A completion takes latency_ms (+- jitter) to the first token, then one
 * token every token_ms; with "stream": true the tokens arrive as Server-Sent Events. A
 * request can fail at random (fail_rate) with a 500. With stall_every_ms, the accelerator
 * freezes for stall_ms at the end of every such period (a GC pause, a thermal throttle, a
 * neighbour's burst): nothing it serves progresses meanwhile. Each streamed event carries
 * "sent_ns", the sender's CLOCK_MONOTONIC, so a client on the same machine can measure what
 * a proxy adds per token. With extra_load N, N phantom requests from "other clients" keep
 * coming back to its queue (each served like a plain completion, then queued again at the
 * back), so real requests wait behind work no proxy in front of it has seen.
 *
 * Prefix caches, one of two models (never both):
 *  - prefix_cache N: it keeps the N prompt prefixes (the first 256 bytes of "prompt" or
 *    "messages") it served last; a request whose prefix is there gets its first token after
 *    cache_hit_ms instead of latency_ms.
 *  - cache_blocks N: a block-level cache like vLLM's automatic prefix caching (kvcache.h).
 *    The prompt is cut into blocks of block_bytes of prompt text named by chain hashes
 *    (http_prompt_blocks); its cached prefix is its longest run of leading blocks in the
 *    cache, and when it is admitted (gets its slot: its prefill runs then) those are touched
 *    and the rest inserted, evicting the least recently used. Time to first token:
 *    latency_ms + prefill_us_per_block x (uncached blocks, a last partial block always
 *    uncached), then the jitter. At most SIM_PROMPT_BLOCKS blocks of a prompt count.
 *    X-Prefix-Cache says hit (every whole block cached), partial or miss (none);
 *    X-Sim-Cached-Blocks and X-Sim-Prompt-Blocks give the counts of whole blocks.
 *
 * Prefill interference (prefill_stalls_decode, off by default): a real engine without chunked
 * prefill runs a new request's prefill as one step of the whole batch, so every stream it is
 * decoding gets no token meanwhile. With it on, each prefill computed here (the time to first
 * token of a request that is not a decode pulling its KV: latency_ms and its uncached blocks)
 * marks the sim busy prefilling until it ends (prefills that overlap are one batch: the mark
 * is the latest end), and a streamed token due while the mark is ahead waits until it passes.
 * /sim/stats counts the tokens that waited and the milliseconds they lost (decode_stalls,
 * decode_stall_ms). Answers sent whole are timed when admitted, as before.
 *
 * Tokens (tokenizer, tok/tokmodel.h): with one, a prompt is its token ids (runtime/
 * tokprompt.h: a chat completion's messages through the chat template beside the
 * tokenizer.json), cut into blocks of block_size tokens named by the sim's own chain hash of
 * the ids (seeded by the scope: not accelnet's chain, as vLLM's hashes are not), and
 * prompt_tokens and cached_tokens count real tokens; a prompt it cannot tokenize is taken in
 * bytes as below. Without one, the simulator counts SIM_BYTES_PER_TOKEN bytes of the request
 * body as one token (prompt_tokens: body bytes / 4), so a block of block_bytes of prompt text
 * stands for block_bytes / 4 tokens. Every usage block (a JSON answer's, a stream's last chunk
 * with stream_options.include_usage) carries "prompt_tokens_details": {"cached_tokens": N} as
 * OpenAI and vLLM write it: N = whole blocks found cached x block_bytes / 4 in the block model
 * (never more than prompt_tokens: the prompt text is part of the body), 0 otherwise.
 *
 * KV events (kv_events, block model only), as vLLM publishes them: a ZeroMQ publisher bound
 * on the endpoint sends one message per batch of cache changes (those gathered until a timer
 * due at once fires: all of a loop turn's I/O, and of the timers that fire before it; a batch
 * that would pass 16384 block hashes is sent first, so a subscriber's bound is never met) of
 * three frames: the topic (kv_events_topic, "" by default as vLLM's), the batch's sequence
 * number (8 bytes, big-endian, from 0), and the msgpack payload
 *     [ts, [event, ...], data_parallel_rank]
 * ts the wall clock in seconds (float64), data_parallel_rank 0; the batch is positional as
 * vLLM's EventBatch(array_like=True) encodes it (vLLM 0.26's events on the wire, and what
 * Dynamo's, llm-d's and SGLang's routers read; one recent vLLM main declares EventBatch
 * without array_like, which would make it a map: not followed here). Each event, by default as
 * current vLLM encodes it (msgspec tag=True without array_like since vLLM PR #42892, seen from vLLM
 * 0.26): a map whose "type" comes first --
 *     {"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash": u64 | nil,
 *      "token_ids": [], "block_size": block_bytes, "lora_id": nil, "medium": "GPU",
 *      "lora_name": nil}
 *     {"type": "BlockRemoved", "block_hashes": [u64...], "medium": "GPU"}
 *     {"type": "AllBlocksCleared"}
 * -- or, with kv_events_array, as vLLM encoded it before (array_like=True, the tag first):
 *     ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
 *      medium, lora_name]; ["BlockRemoved", block_hashes, medium]; ["AllBlocksCleared"].
 * -- or as SGLang encodes them (kv_events_format sglang): the same arrays without medium and
 * lora_name, block hashes as signed 64-bit ints, the batch [ts, events] without the rank.
 * Block hashes are our chain hashes (msgpack unsigned ints); a BlockStored carries one run of
 * consecutive new blocks of a chain, its parent the block before it (nil for a chain's
 * first); a BlockRemoved the blocks one admission evicted. The first batch is one
 * AllBlocksCleared, and POST /reset_prefix_cache (vLLM's) empties the cache and publishes
 * another. With a tokenizer, block_size is block_size and token_ids the ids of the event's
 * blocks. kv_events_skip N: the batch numbered N is not sent (a gap, for tests).
 * kv_events_delay_ms: a batch is published that long after its first event (an engine's
 * queue and batching, for tests of what a subscriber knows meanwhile).
 * kv_events_replay: vLLM's replay socket (sim/kvreplay.h), a ROUTER on an endpoint of its
 * own answering a subscriber's request for the batches from a sequence number on, out of
 * the last kv_events_buffer numbered (vLLM's buffer_steps, 10000 by default) -- the one
 * kv_events_skip loses among them; /sim/stats counts the requests in kv_events_replays.
 *
 * Models: with models listed, a request naming another "model" gets vLLM's 404
 * ({"error": {"message": "The model `x` does not exist.", "type": "NotFoundError",
 * "param": null, "code": 404}}), GET /v1/models lists them in OpenAI's format, and every
 * answer to a request that named a model carries X-Sim-Model: NAME.
 *
 * Every response carries X-Served-By: NAME. GET /health is 200 while it runs; GET /sim/stats
 * reports its counters as JSON; GET /metrics vLLM's gauges in Prometheus text
 * (vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc and its
 * older name vllm:gpu_cache_usage_perc, labelled model_name and engine); every other path
 * answers 200 with a one-line description.
 *
 * LoRA adapters (--lora A,B --max-loras N --lora-load-ms MS, sim/lora.h): with max_loras, a
 * request naming another model than the base one (--models, else --name) names an adapter,
 * loaded on demand (evicting the least recently used) at a cost of lora_load_ms to its first
 * token; at most max_loras distinct adapters run at once; GET /metrics adds
 * vllm:lora_requests_info as vLLM writes it; /sim/stats counts requests and loads per adapter.
 * The prefix caches (both models) key a prompt by its "model" and "cache_salt" as vLLM keys
 * its blocks by adapter and salt (http_prompt_scope): a prompt cached under one is never a
 * hit for another, and the KV events publish the scoped hashes.
 *
 * Roles (--role prefill|decode, sim/pd.h): a prefill sim answers vLLM's kv_transfer_params and
 * registers SGLang's bootstrap rooms (GET /bootstrap/ROOM); a decode sim refuses (400) a
 * request without valid transfer params and charges a KV pull per block in place of the
 * prefill. /sim/stats counts pd_valid, pd_refused, pd_local, pd_issued and pd_rooms.
 */
#ifndef ACCELNET_SIM_SIM_H
#define ACCELNET_SIM_SIM_H

#include "core/loop.h"
#include "net/addr.h"
#include "sim/pd.h"

#define SIM_PROMPT_BLOCKS 8192 /* blocks of one prompt that count, at most */
#define SIM_BYTES_PER_TOKEN 4  /* the simulator's tokens: 4 bytes of the request each */
#define SIM_MODELS 16
#define SIM_MODEL_NAME 128 /* bytes, with the NUL */
#define SIM_EXTRA_LOAD_MAX 100000
#define SIM_ENGINE_SEED 0x656e67696e65ull /* "engine": the sim's token-block hashes */

struct sim_opts {
	struct net_addr addr;
	char name[64];
	unsigned slots;
	unsigned latency_ms;
	double jitter; /* 0..1: latency varies by up to this fraction either way */
	unsigned tokens;
	unsigned token_ms;
	double fail_rate;		   /* 0..1 */
	unsigned stall_ms, stall_every_ms; /* freeze for stall_ms at the end of every period */
	unsigned prefix_cache;		   /* prompt prefixes remembered; 0: none */
	unsigned cache_hit_ms;		   /* time to first token when the prefix is cached */
	unsigned cache_blocks;		   /* block-level prefix cache, in blocks; 0: none */
	unsigned block_bytes;		   /* prompt-text bytes per block */
	unsigned prefill_us_per_block;	   /* prefill time of each uncached block */
	char kv_events[256];		   /* ZeroMQ endpoint to publish KV events on; "": none */
	unsigned kv_events_skip;     /* the batch of this sequence number is not sent; 0: none */
	unsigned kv_events_delay_ms; /* events wait this long before their batch is published */
	char kv_events_replay[256];  /* ZeroMQ endpoint of the replay socket; "": none */
	unsigned kv_events_buffer;   /* batches kept for replays (vLLM's buffer_steps) */
	char tokenizer[512];	     /* a tokenizer.json: blocks of block_size tokens; "": bytes */
	unsigned block_size;	     /* tokens per block, with a tokenizer */
	char kv_events_topic[128];
	unsigned kv_events_format; /* enum kvevents_format: vLLM's maps (0), vLLM's tagged arrays
				    * before PR #42892, or SGLang's arrays */
	char models[SIM_MODELS][SIM_MODEL_NAME];
	unsigned nmodels;    /* 0: any model */
	unsigned extra_load; /* phantom requests from other clients */
	int early_headers;   /* a stream's head at once, as vLLM's and SGLang's servers send it */
	/* prefill/decode disaggregation (sim/pd.h) */
	unsigned role; /* enum sim_role */
	char pd_secret[128];
	unsigned kv_pull_us_per_block; /* a decode's pull of each block's KV */
	unsigned pd_allow_local;       /* a decode sim prefills a request without params */
	/* LoRA adapters (sim/lora.h): loaded at start, at most max_loras (0: none served) */
	char lora[2048]; /* names separated by commas */
	unsigned max_loras, lora_load_ms;
	/* while a prefill runs, the tokens of the streams it decodes wait (an engine without
	 * chunked prefill); 0: prefills and decodes never meet (as before) */
	unsigned prefill_stalls_decode;
};

struct sim;

void sim_opts_default(struct sim_opts *o);
/* Start serving on <loop>. 0 or -errno (e.g. -EADDRINUSE). */
int sim_start(struct loop *loop, const struct sim_opts *o, struct sim **out);
int sim_port(const struct sim *s);
/* The KV events endpoint bound ("" without one). */
const char *sim_kv_events_endpoint(const struct sim *s);
/* The replay endpoint bound ("" without one). */
const char *sim_kv_events_replay_endpoint(const struct sim *s);
void sim_stop(struct sim *s);

#endif
