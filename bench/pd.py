"""bench/pd.py: prefill/decode disaggregation against aggregated serving (issue 28).

One fleet of N `accelnet sim` servers alike, three ways to serve it:

- "accelnet P/D": the fleet split into a prefill pool and a decode pool (sims with --role
  prefill / --role decode, vLLM's protocol), the split that balances the two pools' all-miss
  capacities (FLEET below: the arithmetic is printed); the prefill pool by balance: llm (the
  expected time of each backend), the decode pool by least-connections with max_concurrency
  at the sims' slots (requests wait in the proxy's queue, not inside a busy engine).
- "round-robin P/D": the same split behind a round-robin P/D router, the pattern of vLLM's
  example disaggregated proxy (round-robin over the prefill servers, round-robin over the
  decode servers, nothing else). It is accelnet with round-robin on both pools and no caps:
  that is exactly the example proxy's policy, and an accelnet worker is never the bottleneck
  at these rates, where the example proxy (Python, one process) could be.
- "aggregated llm": the same N sims without roles behind accelnet balance: llm with
  max_concurrency at the sims' slots, each sim prefilling and decoding its own requests.

Two workloads (WORKLOADS): long prompts, where P/D should help, and short ones, where it
should not (a prefill costs little, and P/D gives a whole sim to it).

Every sim runs with --prefill-stalls-decode 1: while a sim prefills, the streams it decodes
get no token (an engine without chunked prefill; docs/sim.md). Only the aggregated sims ever
prefill and decode at once, so only they feel it; a decode sim pulls its KV (not a prefill),
a prefill sim answers whole. That interference is what disaggregation removes, and the
long-prompts workload makes it matter: long prompts (text no other request shares: every
prefill misses the cache), long streamed outputs.

Loads are multiples of the aggregated fleet's all-miss capacity, interference aside
(N x slots / (prefill + decode time)); Poisson arrivals (seeded, the same for every
contestant), each request its own unique prompt, `loadgen open --at` so bursts stay bursts,
the first `warmup` seconds not counted. Figures: TTFT p50/p90 (from when a request was due to
its first token), inter-token latency p50/p99 (per stream, the gaps between its events after
the first: loadgen's itl_ms), goodput (answered in full, per second), the tokens that waited
for a prefill on the sims (decode_stalls) and, for the P/D contestants, the proxy's
accelnet_pool_pd_* counters.

Usage: bench/run --only pd [--quick] [--workload NAME,...] [--loads 0.5,1.0,1.5]
                 [--seconds S] [--warmup S] [--repeat N] [--out DIR] [--report results.json]
Nothing here asserts a timing: this measures, it does not test.
"""

import argparse
import datetime
import json
import os
import random
import string
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the starters, the run, the loadgen)

# The fleet: N sims alike (latency_ms: a prefill's fixed cost; us_per_block: each uncached
# block of BLOCK bytes of prompt text; token_ms: each streamed token), their block caches
# large enough that nothing is evicted (the prompts are unique anyway).
FLEET = dict(n=4, slots=4, cache_blocks=8192, latency_ms=20, us_per_block=1000, token_ms=10,
             kv_pull_us_per_block=100, jitter=0.1)
BLOCK = 64
TOKENS = 48  # streamed tokens a request
# The workloads: prompt blocks a request (unique text: every prefill misses the cache).
WORKLOADS = {
    # 8 KiB of prompt text (about 2,000 tokens at 4 bytes each): prefill is a quarter of a
    # request's time, long enough to stall an aggregated sim's streams: P/D's case
    "long-prompts": dict(blocks=128, what="long prompts (8 KiB), 48 streamed tokens"),
    # 1 KiB: a prefill costs little, stalls little; the prefill sim mostly waits: P/D's
    # split gives up a quarter of the fleet for it
    "short-prompts": dict(blocks=16, what="short prompts (1 KiB), 48 streamed tokens"),
}
PD_IDS_MAX = 64  # the sims issue at most this many block ids: a decode pulls at most these
SLO_MS = 2000


def arithmetic(blocks, f=FLEET, tokens=TOKENS):
    """The all-miss capacities, in req/s, and the P/D split that balances its two pools."""
    prefill_ms = f["latency_ms"] + f["us_per_block"] * blocks / 1000
    decode_ms = tokens * f["token_ms"]
    agg_ms = prefill_ms + decode_ms
    agg = f["n"] * f["slots"] * 1000 / agg_ms
    # a prefill sim answers whole with max_tokens 1: its prefill and one token; a decode sim
    # pulls the KV of the blocks it was given ids for, then streams
    pre_ms = prefill_ms + f["token_ms"]
    dec_ms = f["kv_pull_us_per_block"] * min(blocks, PD_IDS_MAX) / 1000 + decode_ms
    best = None
    for npre in range(1, f["n"]):
        pre_cap = npre * f["slots"] * 1000 / pre_ms
        dec_cap = (f["n"] - npre) * f["slots"] * 1000 / dec_ms
        if not best or min(pre_cap, dec_cap) > best["capacity"]:
            best = dict(prefill_sims=npre, decode_sims=f["n"] - npre, prefill_capacity=pre_cap,
                        decode_capacity=dec_cap, capacity=min(pre_cap, dec_cap))
    lines = [
        f"aggregated: a request holds a slot {f['latency_ms']} + {blocks} blocks x "
        f"{f['us_per_block'] / 1000:g} ms = {prefill_ms:.0f} ms of prefill, then {tokens} "
        f"tokens x {f['token_ms']} ms = {decode_ms:.0f} ms: {agg_ms:.0f} ms; {f['n']} sims x "
        f"{f['slots']} slots / {agg_ms / 1000:.3f} s = {agg:.1f} req/s (1.0x; with prefills "
        "stalling decodes the real figure is lower)",
        f"P/D: a prefill holds a prefill slot {prefill_ms:.0f} + 1 token = {pre_ms:.0f} ms, a "
        f"decode a decode slot {min(blocks, PD_IDS_MAX)} blocks pulled x "
        f"{f['kv_pull_us_per_block'] / 1000:g} ms + {decode_ms:.0f} = {dec_ms:.1f} ms; the "
        f"split {best['prefill_sims']} prefill + {best['decode_sims']} decode serves "
        f"min({best['prefill_capacity']:.1f}, {best['decode_capacity']:.1f}) = "
        f"{best['capacity']:.1f} req/s ({best['capacity'] / agg:.2f}x)",
    ]
    return dict(prefill_ms=prefill_ms, decode_ms=decode_ms, aggregated_ms=agg_ms,
                capacity=agg, pd=best, lines=lines)


def sims(n):
    return [FLEET] * n


def sim_extra(role=None):
    x = ["--prefill-stalls-decode", "1", "--kv-pull-us-per-block",
         str(FLEET["kv_pull_us_per_block"])]
    return x + (["--role", role] if role else [])


def start_pd_sims(run, split):
    """The prefill sims, then the decode sims: (ports, procs), prefill ports first."""
    pp, pprocs = bench.start_block_sims(run, sims(split["prefill_sims"]), BLOCK,
                                        FLEET["jitter"], "prefill", sim_extra("prefill"))
    try:
        dp, dprocs = bench.start_block_sims(run, sims(split["decode_sims"]), BLOCK,
                                            FLEET["jitter"], "decode", sim_extra("decode"))
    except RuntimeError:
        for p in pprocs:
            run.stop(p)
        raise
    return pp + dp, pprocs + dprocs


def start_agg_sims(run):
    return bench.start_block_sims(run, sims(FLEET["n"]), BLOCK, FLEET["jitter"], "agg",
                                  sim_extra())


def llm_keys():
    return f"    llm: {{block_bytes: {BLOCK}, cache_blocks: {FLEET['cache_blocks']}}}\n"


def contestants(split):
    """name: (start_sims(run) -> (ports, procs), start_proxy(run, ports) -> (proc, port,
    admin))."""
    npre, slots = split["prefill_sims"], FLEET["slots"]

    def pd(decode_balance, cap, prefill_balance, prefill_keys):
        def start(run, ports):
            admin = bench.free_port()
            pre = "".join(f"      - {{address: 127.0.0.1:{p}}}\n" for p in ports[:npre])
            extra = ("    disaggregation: {prefill_pool: prefill, protocol: vllm}\n"
                     f"  - name: prefill\n    balance: {prefill_balance}\n{prefill_keys}"
                     f"    backends:\n{pre}admin: {{address: 127.0.0.1:{admin}}}\n")
            p, port = bench.start_accelnet(run, ports[npre:], decode_balance, cap=cap,
                                           extra=extra)
            return p, port, admin
        return (lambda run: start_pd_sims(run, split)), start

    def agg(run, ports):
        admin = bench.free_port()
        p, port = bench.start_accelnet(run, ports, "llm", cap=slots,
                                       extra=llm_keys() + f"admin: {{address: 127.0.0.1:{admin}}}\n")
        return p, port, admin

    # the prefill pool has no max_concurrency: a prefill finds a backend or fails (it never
    # waits in a queue), so the sims' own queues hold the excess
    return {
        "accelnet P/D (prefill llm, decode least-connections)":
            pd("least-connections", slots, "llm", llm_keys()),
        "round-robin P/D (vLLM example proxy's policy)": pd("round-robin", None, "round-robin", ""),
        "aggregated llm": (start_agg_sims, agg),
    }


def write_trace(path, at_path, rate, seconds, seed, blocks):
    """Poisson arrivals at <rate> for <seconds>, one unique long prompt each; the count."""
    rng = random.Random(seed)
    t, n = 0.0, 0
    letters = string.ascii_lowercase
    with open(path, "w") as f, open(at_path, "w") as a:
        while True:
            t += rng.expovariate(rate)
            if t >= seconds:
                break
            words = []
            size = 0
            while size < blocks * BLOCK:
                w = "".join(rng.choice(letters) for _ in range(rng.randint(2, 9)))
                words.append(w)
                size += len(w) + 1
            text = " ".join(words)[:blocks * BLOCK]
            body = {"model": "m", "messages": [{"role": "user", "content": text}],
                    "max_tokens": TOKENS, "stream": True}
            f.write(json.dumps(body, separators=(",", ":")) + "\n")
            a.write(f"{t:.6f}\n")
            n += 1
    return n


def scrape(admin, prefix="accelnet_pool_pd_"):
    """The proxy's /metrics samples whose names start with <prefix>, {series: value} (non-zero
    ones), or {"_error": why}."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read()
    except OSError as e:
        return {"_error": str(e)}
    out = {}
    for line in text.decode(errors="replace").splitlines():
        if line.startswith(prefix):
            name, _, value = line.rpartition(" ")
            if float(value):
                out[name] = float(value)
    return out


def sim_sum(ports, key):
    return sum(json.loads(urllib.request.urlopen(f"http://127.0.0.1:{p}/sim/stats",
                                                 timeout=5).read()).get(key, 0) for p in ports)


def one_run(run, start_sims, start_proxy, rate, seconds, warmup, trace, at, timeout_s):
    admin, ports_seen = [], []

    def sims_(run_):
        ports, procs = start_sims(run_)
        ports_seen.extend(ports)
        return ports, procs

    def proxy(run_, ports):
        p, port, a = start_proxy(run_, ports)
        admin.append(a)
        return p, port

    def after(g):
        g["pd_metrics"] = scrape(admin[0]) if admin else {}
        g["decode_stalls"] = sim_sum(ports_seen, "decode_stalls")
        g["decode_stall_ms"] = sim_sum(ports_seen, "decode_stall_ms")
        g["offered"] = g["sent"] / g["duration_s"] if g.get("duration_s") else 0.0

    return bench.fleet_run(run, sims_, proxy, rate, warmup + seconds, trace, timeout_s, SLO_MS,
                           ("--at", at, "--warmup", str(warmup)), after)


def run_workload(run, res, loads, seconds, warmup, repeat, timeout_s):
    a = res["arithmetic"]
    who = contestants(a["pd"])
    for r in range(repeat):
        for load in loads:
            rate = a["capacity"] * load
            trace = os.path.join(run.dir, f"pd-{load}.jsonl")
            at = trace + ".at"
            n = write_trace(trace, at, rate, warmup + seconds, 1 + r, res["blocks"])
            order = list(who.items())
            order = order[r % len(order):] + order[:r % len(order)]
            for name, (start_sims, start_proxy) in order:
                t = time.monotonic()
                g = one_run(run, start_sims, start_proxy, rate, seconds, warmup, trace, at,
                            timeout_s)
                g["requests_in_trace"], g["repeat"] = n, r
                res["results"].setdefault(f"{load:.2f}x", {}).setdefault(name, []).append(g)
                print(f"  {res['name']} {load:.2f}x #{r + 1} {name}: "
                      + (f"failed ({g['failed'][-160:]})" if "failed" in g else
                         f"TTFT p50 {bench.fmt_ttft(g['ttft_ms']['p50'])} p90 "
                         f"{bench.fmt_ttft(g['ttft_ms']['p90'])} ms, ITL p99 "
                         f"{g.get('itl_ms', {}).get('p99', 0):.0f} ms, goodput "
                         f"{g['goodput']:.1f}/s of {g['offered']:.1f}, errors {g['errors']}")
                      + f" ({time.monotonic() - t:.0f} s)", file=sys.stderr, flush=True)
            os.unlink(trace)
            os.unlink(at)


def _med(runs, get, fmt=lambda v: f"{v:.0f}"):
    """median [min-max] of get(g) over the runs that ran; a TTFT of a request never answered
    in time reads "never"."""
    vals = [get(g) for g in runs if "failed" not in g]
    if not vals:
        return "failed"
    m = bench.med(vals)
    return fmt(m) if len(vals) == 1 else f"{fmt(m)} [{fmt(min(vals))}-{fmt(max(vals))}]"


def rows(res):
    header = ["load", "contestant", "TTFT p50 ms", "TTFT p90 ms", "ITL p50 ms", "ITL p99 ms",
              "goodput req/s (offered)", "errors", "tokens stalled by a prefill"]
    out = []
    for load, by in res["results"].items():
        for name, runs in by.items():
            ok = [g for g in runs if "failed" not in g]
            offered = bench.med([g["offered"] for g in ok])
            out.append([load, name, _med(runs, lambda g: g["ttft_ms"]["p50"], bench.fmt_ttft),
                        _med(runs, lambda g: g["ttft_ms"]["p90"], bench.fmt_ttft),
                        _med(runs, lambda g: g["itl_ms"]["p50"]),
                        _med(runs, lambda g: g["itl_ms"]["p99"]),
                        _med(runs, lambda g: g["goodput"], lambda v: f"{v:.1f}")
                        + f" ({offered:.1f})",
                        _med(runs, lambda g: g["errors"]),
                        _med(runs, lambda g: g["decode_stalls"])])
    return header, out


def render(res, outdir):
    v = res["versions"]
    md = [f"# accelnet P/D bench {res['date']}{' (quick)' if res['quick'] else ''}", "",
          f"{v['cpu']}, {v['cpus']} CPUs, kernel {v['kernel']}; {v['accelnet']}; "
          f"{res['placement']}; {res['elapsed_s']:.0f} s; {res['seconds']} s measured after "
          f"{res['warmup_s']} s of warm-up; median [min-max] over {res['repeat']} repeat(s).",
          ""]
    for name, wl in res["workloads"].items():
        md += [f"## {name}: {wl['what']}", "", *[f"- {x}" for x in wl["arithmetic"]["lines"]],
               "", bench.table(*rows(wl)), ""]
    md += [f"Raw figures: {os.path.join(outdir, 'results.json')}"]
    text = "\n".join(md) + "\n"
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write(text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="8 s runs after 3 s of warm-up: about 3 minutes")
    ap.add_argument("--loads", type=lambda v: [float(x) for x in v.split(",")],
                    default=[0.5, 1.0, 1.5], help="multiples of the aggregated fleet's "
                    "all-miss capacity (default 0.5,1.0,1.5)")
    ap.add_argument("--seconds", type=float, help="measured seconds a run (default 30; "
                    "--quick: 8)")
    ap.add_argument("--warmup", type=float, help="seconds sent before measuring (default 5; "
                    "--quick: 3)")
    ap.add_argument("--workload", help="workloads to run, comma-separated (default all): "
                    + ", ".join(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=1, help="run everything N times (another "
                    "trace seed each time) and report median [min-max]")
    ap.add_argument("--out", default=os.path.join(bench.ROOT, "bench", "out"))
    ap.add_argument("--report", metavar="RESULTS_JSON",
                    help="only render summary.md again from a results.json")
    a = ap.parse_args()
    if a.report:
        with open(a.report) as f:
            print(render(json.load(f), os.path.dirname(os.path.abspath(a.report))))
        return
    q = a.quick
    seconds = a.seconds or (8 if q else 30)
    warmup = a.warmup if a.warmup is not None else (3 if q else 5)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
    outdir = os.path.join(a.out, stamp + "-pd" + ("-quick" if q else ""))
    os.makedirs(outdir, exist_ok=True)
    bench.raise_nofile()
    names = a.workload.split(",") if a.workload else list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            ap.error(f"no workload {n!r}: {', '.join(WORKLOADS)}")
    res = {"date": stamp, "quick": q, "versions": bench.versions(), "repeat": a.repeat,
           "placement": f"load generator on CPU {bench.LOAD_CPU}, servers on CPU "
                        f"{bench.SERVER_CPU}", "loads": a.loads, "seconds": seconds,
           "warmup_s": warmup, "fleet": FLEET, "block_bytes": BLOCK, "tokens": TOKENS,
           "slo_ms": SLO_MS, "workloads": {}}
    run = bench.Run()
    for sig in (bench.signal.SIGTERM, bench.signal.SIGHUP):
        bench.signal.signal(sig, bench._interrupted)
    t0 = time.monotonic()
    try:
        for n in names:
            wl = dict(WORKLOADS[n], name=n, arithmetic=arithmetic(WORKLOADS[n]["blocks"]),
                      results={})
            res["workloads"][n] = wl
            for line in wl["arithmetic"]["lines"]:
                print(f"{n}: {line}", file=sys.stderr)
            run_workload(run, wl, a.loads, seconds, warmup, a.repeat, 4 if q else 10)
    finally:
        run.cleanup()
        res["elapsed_s"] = time.monotonic() - t0
        with open(os.path.join(outdir, "results.json"), "w") as f:
            json.dump(res, f, indent=1)
    print(render(res, outdir))


if __name__ == "__main__":
    main()
