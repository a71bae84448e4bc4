"""bench/fleets.py: the LLM balancers on fleets and traffic we did not design (issue 27).

Scenario 9 (bench/bench.py) is one fleet shape: 16 system prompts filling 70 % of 8 caches.
A balancer fitted to it may give up affinity elsewhere; this bench runs every contestant on
several shapes, each named after what it tests (SHAPES below, the arithmetic of each in its
comment and printed by `/usr/bin/python3 bench/fleettrace.py`):

- independent: the reviewers' fleet as issue 27 describes it (4 x 4 slots, block-LRU caches
  of 320 KiB, one server twice as slow, multi-turn chat whose histories fill the caches,
  Zipf-popular system prompts, streamed);
- small-cache-long-chats, large-cache-short-flat, bursty-arrivals, non-streamed-flat: the
  same kind of fleet varied along cache size against the working set, conversation length,
  prompt popularity, arrivals and streaming.

Every run starts a fresh, cold fleet of `accelnet sim` servers and one contestant in front,
replays the shape's trace (bench/fleettrace.py) with `loadgen open --at` (each request at its
own due time: bursts stay bursts), the first `warmup` seconds sent but not counted, and
reads the simulators' block hits. Loads are multiples of the shape's all-miss capacity (what
the fleet serves when no request finds anything cached). The SLO is issue 27's: TTFT p99 at
most 2 s and no errors (for the non-streamed shape the first byte is the whole answer);
"goodput" counts the requests answered in full whose first byte came within 2 s, a second.
A contestant's capacity at SLO is the highest load at which it met the SLO with every lower
load met too, as a multiple of the all-miss capacity.

For the accelnet contestants the proxy's admin /metrics is read at the end of each run and
every `accelnet_llm_predict*` series kept in the result (the llm balancer's prediction
accuracy, where the build has it; empty where not).

Usage: bench/run --only fleets [--quick] [--shape NAME,...] [--pick REGEX] [--loads 0.5,1.0]
                 [--seconds S] [--repeat N] [--early-headers] [--baseline BIN] [--out DIR]
                 [--report results.json]
Nothing here asserts a timing: this measures, it does not test.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the starters, the run, the loadgen)
import fleettrace  # noqa: E402

SLO_MS = 2000
BLOCK = fleettrace.BLOCK_BYTES


def servers(n=4, slots=4, cache_blocks=5120, latency_ms=20, us_per_block=1500, token_ms=4,
            slow=1):
    """<n> simulators alike, the last <slow> of them twice as slow in every cost."""
    return [dict(slots=slots, cache_blocks=cache_blocks,
                 latency_ms=latency_ms * (2 if i >= n - slow else 1),
                 us_per_block=us_per_block * (2 if i >= n - slow else 1),
                 token_ms=token_ms * (2 if i >= n - slow else 1)) for i in range(n)]


# The shapes. Figures in each comment come from fleettrace.describe() (a 600 s trace at the
# shape's all-miss capacity); the working set is the blocks of every conversation still to
# send a turn at one moment, plus the system prompts in use.
SHAPES = {s["name"]: s for s in [
    # The reviewers' fleet. 4 servers x 4 slots, 5,120 blocks of 64 B each (320 KiB; 20,480
    # in all); a request holds a slot 20 ms + 1.5 ms a block not cached + 4 ms a token (16,
    # 24 or 32 tokens), server 3 twice that in each. 4 system prompts of 16-48 blocks (128
    # in all), Zipf 1/rank (48 % of conversations on the first); 3-10 turns, user messages
    # 100-600 B, replies 300-1,500 B, 2-10 s between turns. The mean prompt is 97 blocks,
    # almost all history, 19 of them new a turn; all-miss slot times 261 ms (fast) and 522
    # ms (slow): 53.6 req/s is 1.0x; all-hit 144 and 287 ms: 1.8x. The live working set at
    # 1.0x is 0.99x the fleet's cache, 4x one server's: whoever keeps a conversation on one
    # server finds its history (a server adding only new messages turns its cache over in
    # more than 10 s, longer than the gap between turns); whoever scatters it re-reads it.
    dict(name="independent", what="the reviewers' fleet: histories fill the caches, one "
         "slow server, Zipf system prompts, streamed",
         sims=servers(), n_system=4, system_blocks=(16, 48), zipf=1.0, turns=(3, 10),
         user_bytes=(100, 600), reply_bytes=(300, 1500), think_s=(2.0, 10.0),
         max_tokens=(16, 24, 32), stream=True, seed=1),
    # The same traffic, longer conversations (8-16 turns), caches of 1,024 blocks (64 KiB):
    # mean prompt 148 blocks, 338/677 ms all-miss (41.4 req/s), all-hit 2.3x; the working
    # set is 7x the fleet's cache (28x one server's), a long conversation a third of a
    # server's: affinity keeps a conversation's last turns at best; a balancer that waits
    # for an affine server gains little and queues.
    dict(name="small-cache-long-chats", what="caches far smaller than the working set, "
         "long conversations: affinity pays little, load still matters",
         sims=servers(cache_blocks=1024), n_system=4, system_blocks=(16, 48), zipf=1.0,
         turns=(8, 16), user_bytes=(100, 600), reply_bytes=(300, 1500), think_s=(2.0, 10.0),
         max_tokens=(16, 24, 32), stream=True, seed=2),
    # No slow server; caches of 8,192 blocks (512 KiB; 32,768 in all); 32 system prompts of
    # 256-512 blocks (12,288 in all: 38 % of the fleet's cache, 1.5x one server's) picked
    # evenly (flat), 1-3 short turns: mean prompt 397 blocks, 711 ms all-miss (22.5 req/s),
    # all-hit 5.5x; the working set fits the fleet's cache but no server's. The balancer
    # must place each prompt on a server or two and keep it there (placement), not let
    # every server cycle through all of them; with a flat pick no prompt is popular.
    dict(name="large-cache-short-flat", what="large caches, short conversations on many "
         "evenly picked long system prompts: placement, not history",
         sims=servers(cache_blocks=8192, slow=0), n_system=32, system_blocks=(256, 512),
         zipf=0.0, turns=(1, 3), user_bytes=(100, 400), reply_bytes=(200, 800),
         think_s=(2.0, 6.0), max_tokens=(16, 24, 32), stream=True, seed=3),
    # The independent fleet and prompts, conversations starting only in 2 s bursts every
    # 8 s (4x the mean rate while on; shorter chats, 2-6 turns 1-4 s apart, so the bursts
    # stay bursts): mean prompt 71 blocks, 222/444 ms all-miss (63 req/s), all-hit 1.6x,
    # working set 0.26x the fleet's cache. The queue fills in a burst and drains after; a
    # balancer that holds requests for an affine server in a burst delays them past the SLO.
    dict(name="bursty-arrivals", what="on/off arrivals (2 s on, 6 s off), histories, one "
         "slow server", sims=servers(), n_system=4, system_blocks=(16, 48), zipf=1.0,
         turns=(2, 6), user_bytes=(100, 600), reply_bytes=(300, 1500), think_s=(1.0, 4.0),
         max_tokens=(16, 24, 32), stream=True, burst=(2.0, 6.0), seed=4),
    # The independent fleet, 8 system prompts of 64-128 blocks picked evenly, 2-6 turns,
    # answers not streamed: the first byte is the whole answer (the decode counts in the
    # SLO, and the slow server's doubled decode shows). Mean prompt 137 blocks, 322/644 ms
    # all-miss (43.4 req/s), all-hit 2.3x, working set 0.40x the fleet's cache.
    dict(name="non-streamed-flat", what="answers not streamed, evenly picked system "
         "prompts, one slow server", sims=servers(), n_system=8, system_blocks=(64, 128),
         zipf=0.0, turns=(2, 6), user_bytes=(100, 600), reply_bytes=(300, 1500),
         think_s=(2.0, 8.0), max_tokens=(16, 24, 32), stream=False, seed=5),
]}


def contestants(shape):
    """The six contestants for <shape> (its slots as every cap), as scenario 9 names them;
    each start(run, ports) -> (proc, port, admin port or None)."""
    slots = shape["sims"][0]["slots"]
    streaming = shape["stream"]

    def accelnet(balance, extra="", binary=None):
        def start(run, ports):
            admin = bench.free_port()
            p, port = bench.start_accelnet(
                run, ports, balance, cap=slots, binary=binary,
                extra=extra + f"admin: {{address: 127.0.0.1:{admin}}}\n")
            return p, port, admin
        return start

    def other(fn):
        def start(run, ports):
            p, port = fn(run, ports)
            return p, port, None
        return start

    cache = max(s["cache_blocks"] for s in shape["sims"])
    llm = f"    llm: {{block_bytes: {BLOCK}, cache_blocks: {cache}}}\n"
    old = {f"accelnet llm max_concurrency {slots} (baseline)": accelnet("llm", llm, BASELINE[0])
           } if BASELINE else {}
    return old | {
        "nginx least_conn": other(lambda run, b: bench.start_nginx(
            run, b, "least_conn", streaming=streaming, body_buffer="1m")),
        f"haproxy leastconn maxconn {slots}": other(lambda run, b: bench.start_haproxy(
            run, b, "leastconn", maxconn=slots, streaming=streaming)),
        # as scenario 9: the body's first 256 bytes, bounded load (125 %)
        f"haproxy hash body prefix maxconn {slots}": other(lambda run, b: bench.start_haproxy(
            run, b, "hash req.body,bytes(0,256)", maxconn=slots, streaming=streaming,
            extra="    option http-buffer-request\n    hash-type consistent\n"
                  "    hash-balance-factor 125\n")),
        f"accelnet least-connections max_concurrency {slots}": accelnet("least-connections"),
        f"accelnet prefix-affinity max_concurrency {slots}": accelnet("prefix-affinity"),
        # the simulators' block size and cache size, as an operator knows the engine's
        f"accelnet llm max_concurrency {slots}": accelnet("llm", llm),
    }


# --early-headers: every simulator sends a stream's head as the request arrives and its first
# event after the prefill, as vLLM's, SGLang's and TGI's HTTP servers do (docs/sim.md)
EARLY_HEADERS = []
# --baseline BIN: another build's `llm` runs beside this one's, as "... (baseline)"
BASELINE = []


def start_sims(run, shape):
    return bench.start_block_sims(run, shape["sims"], BLOCK, 0.1, "fleet", EARLY_HEADERS)


def scrape_predict(admin):
    """Every `accelnet_llm_predict*` sample on the proxy's /metrics, {series: value}, and how
    many samples the page had in all (0: the scrape failed; then {"_error": why})."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read()
    except OSError as e:
        return {"_error": str(e)}, 0
    out, samples = {}, 0
    for line in text.decode(errors="replace").splitlines():
        if not line or line.startswith("#"):
            continue
        samples += 1
        if line.startswith("accelnet_llm_predict"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out, samples


def sim_blocks(ports):
    """(blocks hit, blocks missed) over the simulators, now."""
    hit = missed = 0
    for sp in ports:
        st = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{sp}/sim/stats",
                                               timeout=5).read())
        hit += st.get("blocks_hit", 0)
        missed += st.get("blocks_missed", 0)
    return hit, missed


def one_run(run, shape, name, start, rate, seconds, warmup, trace, at, timeout_s):
    """One contestant on a fresh fleet; the block hits are those after the warm-up (read
    from the simulators when it ends, the proxy started just before the load)."""
    admin, snap = [], []

    def proxy(run_, ports):
        p, port, a = start(run_, ports)
        admin.append(a)

        def at_warm():
            try:
                snap.append(sim_blocks(ports))
            except OSError:
                pass
        timer = threading.Timer(warmup, at_warm)
        timer.daemon = True
        timer.start()
        admin.append(timer)
        return p, port

    def after(g):
        if admin and admin[0]:
            g["predict"], g["metrics_samples"] = scrape_predict(admin[0])
        if len(admin) > 1:
            admin[1].join()
        if snap:
            g["warmup_blocks_hit"], g["warmup_blocks_missed"] = snap[0]
            hit, missed = g["blocks_hit"] - snap[0][0], g["blocks_missed"] - snap[0][1]
            g["hit_share"] = hit / (hit + missed) if hit + missed else 0.0
        g["offered"] = g["sent"] / g["duration_s"] if g.get("duration_s") else 0.0

    return bench.fleet_run(run, lambda r: start_sims(r, shape), proxy, rate,
                           warmup + seconds, trace, timeout_s, SLO_MS,
                           ("--at", at, "--warmup", str(warmup)), after)


def meets_slo(g):
    return ("failed" not in g and g["errors"] == 0 and g["ttft_ms"]["p99"] <= SLO_MS
            and g["sent"] > 0)


def run_shape(run, res, shape, loads, seconds, warmup, repeat, pick, timeout_s):
    a = fleettrace.arithmetic(shape)
    cap = a["capacity"]
    who = {n: s for n, s in contestants(shape).items() if not pick or re.search(pick, n)}
    out = res["shapes"].setdefault(shape["name"], {
        "what": shape["what"], "shape": shape, "arithmetic": a,
        "describe": fleettrace.describe(shape), "capacity": cap, "slo_ms": SLO_MS,
        "seconds": seconds, "warmup_s": warmup, "results": {}})
    for r in range(repeat):
        for load in loads:
            rate = cap * load
            trace = os.path.join(run.dir, f"{shape['name']}-{load}.jsonl")
            at = trace + ".at"
            n, nblocks, factor = fleettrace.write_trace(shape, trace, at, rate,
                                                        warmup + seconds, 1 + r, warmup)
            # every contestant on the same trace, in an order turned each repeat
            order = list(who.items())
            order = order[r % len(order):] + order[:r % len(order)]
            for name, start in order:
                t = time.monotonic()
                g = one_run(run, shape, name, start, rate, seconds, warmup, trace, at,
                            timeout_s)
                g["requests_in_trace"], g["blocks_in_trace"], g["repeat"] = n, nblocks, r
                g["start_rate_factor"] = factor
                out["results"].setdefault(f"{load:.2f}x", {}).setdefault(name, []).append(g)
                print(f"  {shape['name']} {load:.2f}x #{r + 1} {name}: "
                      + (f"failed ({g['failed'][-160:]})" if "failed" in g else
                         f"goodput@SLO {g['goodput_slo']:.1f}/s of {g['offered']:.1f}, TTFT p99 "
                         f"{bench.fmt_ttft(g['ttft_ms']['p99'])} ms, errors {g['errors']}, "
                         f"hits {g['hit_share'] * 100:.0f}%")
                      + f" ({time.monotonic() - t:.0f} s)", file=sys.stderr, flush=True)
            os.unlink(trace)
            os.unlink(at)


# --- output -------------------------------------------------------------------------------

def _spread(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return fmt(m)
    return f"{fmt(m)} [{fmt(min(vals))}-{fmt(max(vals))}]"


def _ttft(v):
    return bench.fmt_ttft(v)


def capacity(sc, name, r=None):
    """The highest load at which <name> met the SLO, every lower load met too (repeat <r>,
    or every repeat); 0 when it met none."""
    best = 0.0
    for load in sorted(sc["results"], key=lambda k: float(k[:-1])):
        runs = sc["results"][load].get(name, [])
        runs = [g for g in runs if r is None or g.get("repeat") == r]
        if not runs or not all(meets_slo(g) for g in runs):
            break
        best = float(load[:-1])
    return best


def shape_rows(sc):
    rows = []
    for load in sorted(sc["results"], key=lambda k: float(k[:-1])):
        for name, runs in sc["results"][load].items():
            ok = [g for g in runs if "failed" not in g]
            if not ok:
                rows.append([load, name] + ["-"] * 7 + ["did not start"])
                continue
            rows.append([
                load, name,
                _spread([g.get("offered", g["rate"]) for g in ok], lambda v: f"{v:.1f}"),
                _spread([g["goodput_slo"] for g in ok], lambda v: f"{v:.1f}"),
                _spread([g["errors"] for g in ok], lambda v: f"{v:.0f}"),
                _spread([g["ttft_ms"]["p50"] for g in ok], _ttft),
                _spread([g["ttft_ms"]["p90"] for g in ok], _ttft),
                _spread([g["ttft_ms"]["p99"] for g in ok], _ttft),
                _spread([g["hit_share"] * 100 for g in ok], lambda v: f"{v:.0f}%"),
                "/".join("yes" if meets_slo(g) else "no" for g in ok)])
    return (["load", "contestant", "offered req/s", "goodput ≤ 2 s req/s", "errors",
             "TTFT p50 ms", "p90 ms", "p99 ms", "block hits", "meets SLO"], rows)


def shape_rows_arith(res):
    """Each shape's arithmetic, one row (fleettrace.arithmetic)."""
    rows = []
    for name, sc in res["shapes"].items():
        a, sh = sc["arithmetic"], sc["shape"]
        ms = sorted(set(round(m) for m in a["all_miss_ms"]))
        rows.append([name, sh["what"],
                     "/".join(str(c) for c in sorted({s["cache_blocks"] for s in sh["sims"]})),
                     f"{a['mean_prompt_blocks']:.0f} ({a['mean_new_blocks']:.0f} new)",
                     "/".join(str(m) for m in ms), f"{sc['capacity']:.1f}",
                     f"{a['all_hit_capacity'] / sc['capacity']:.1f}x",
                     f"{a['working_set_per_fleet_cache']:.2f} "
                     f"({a['working_set_per_server_cache']:.1f})"])
    return (["shape", "what it tests", "cache blocks a server", "mean prompt blocks",
             "all-miss slot ms (fast/slow)", "1.0x req/s", "all-hit ÷ all-miss",
             "live working set ÷ fleet cache (÷ one server's)"], rows)


def capacity_rows(res):
    names = []
    for sc in res["shapes"].values():
        for by in sc["results"].values():
            names += [n for n in by if n not in names]
    rows = []
    for shape, sc in res["shapes"].items():
        repeats = sorted({g.get("repeat", 0) for by in sc["results"].values()
                          for runs in by.values() for g in runs})
        cells = []
        for n in names:
            if not any(n in by for by in sc["results"].values()):
                cells.append("-")
                continue
            per = [capacity(sc, n, r) for r in repeats]
            cells.append(_spread(per, lambda v: f"{v:.2f}x"))
        rows.append([shape, f"{sc['capacity']:.1f}"] + cells)
    return (["shape", "1.0x req/s"] + names, rows)


def accuracy(p):
    """What llm's own metrics say of its predictions over a run (<p>: the series kept),
    summed over the backends: decisions by reason, hit blocks predicted against those the
    servers reported, the mean predicted and measured TTFT and the mean absolute error."""
    tot = {}
    for k, v in p.items():
        name = k.split("{", 1)[0]
        m = re.search(r'reason="([^"]+)"', k)
        key = f"{name}:{m.group(1)}" if m else name
        tot[key] = tot.get(key, 0) + v
    n = tot.get("accelnet_llm_predict_ttft_seconds_count", 0)
    mean = lambda name: 1000 * tot.get(name, 0) / n if n else float("nan")  # noqa: E731
    why = {k.split(":", 1)[1]: v for k, v in tot.items()
           if k.startswith("accelnet_llm_predict_decisions_total:") and v}
    return {"decisions": why, "hit_blocks_predicted": tot.get(
        "accelnet_llm_predict_hit_blocks_total", 0),
        "hit_blocks_reported": tot.get("accelnet_llm_predict_reported_hit_blocks_total", 0),
        "ttft_predicted_ms": mean("accelnet_llm_predict_ttft_seconds_sum"),
        "ttft_measured_ms": mean("accelnet_llm_predict_measured_ttft_seconds_sum"),
        "ttft_abs_error_ms": mean("accelnet_llm_predict_ttft_error_seconds_sum")}


def predict_rows(res):
    rows = []
    for shape, sc in res["shapes"].items():
        for load, by in sc["results"].items():
            for name, runs in by.items():
                for g in runs:
                    if not g.get("predict"):
                        continue
                    a = accuracy(g["predict"])
                    if not a["decisions"]:
                        continue  # a balancer that predicts nothing (not llm)
                    hp, hr = a["hit_blocks_predicted"], a["hit_blocks_reported"]
                    rows.append([shape, load, name, f"{hp:,.0f} / {hr:,.0f}" + (
                        f" ({hp / hr - 1:+.0%})" if hr else ""),
                        f"{a['ttft_predicted_ms']:.0f} / {a['ttft_measured_ms']:.0f}",
                        f"{a['ttft_abs_error_ms']:.0f}",
                        ", ".join(f"{k} {v:,.0f}" for k, v in sorted(
                            a["decisions"].items(), key=lambda kv: -kv[1]))])
    return (["shape", "load", "contestant", "hit blocks predicted / reported",
             "TTFT mean predicted / measured ms", "mean abs error ms", "decisions"], rows)


def render(res, outdir):
    v = res["versions"]
    md = [f"# accelnet fleets bench {res['date']}{' (quick)' if res['quick'] else ''}", "",
          f"{v['cpu']}, {v['cpus']} CPUs, kernel {v['kernel']}; {v['accelnet']}, {v['nginx']}, "
          f"{v['haproxy'].split(' - ')[0]}; {res['placement']}; {res['elapsed_s']:.0f} s. "
          f"SLO: TTFT p99 ≤ {SLO_MS} ms and no errors; figures are median [min-max] over "
          f"{res['repeat']} repeat(s).", "",
          "## Capacity at SLO (× the shape's all-miss capacity; the highest load met, every "
          "lower one met too)", "", bench.table(*capacity_rows(res)), "",
          "## The shapes", "", bench.table(*shape_rows_arith(res)), ""]
    for shape, sc in res["shapes"].items():
        md += [f"## {shape}: {sc['what']}", "", "```", *sc["describe"], "```", "",
               bench.table(*shape_rows(sc)), ""]
    pr = predict_rows(res)
    md += ["## llm's predictions (from `accelnet_llm_predict*` on the proxy's /metrics)", "",
           "Each decision's prediction is made by the pick that placed the request (after "
           "any wait in the queue), against what the server reported and the first token "
           "measured.", "",
           bench.table(*pr) if pr[1] else "(none: this build exports none)", ""]
    md += [f"Raw figures: {os.path.join(outdir, 'results.json')}"]
    text = "\n".join(md) + "\n"
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write(text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="every shape at 1.0x, 8 s runs after 4 s of warm-up: about 8 "
                    "minutes on 2 cores")
    ap.add_argument("--shape", help="shapes to run, comma-separated (default all): "
                    + ", ".join(SHAPES))
    ap.add_argument("--pick", metavar="REGEX", help="only the contestants whose names match")
    ap.add_argument("--loads", type=lambda v: [float(x) for x in v.split(",")],
                    help="multiples of the all-miss capacity (default 0.5,0.75,1.0,1.25,1.5; "
                    "--quick: 1.0)")
    ap.add_argument("--seconds", type=float, help="measured seconds a run (default 30; "
                    "--quick: 8)")
    ap.add_argument("--warmup", type=float, help="seconds sent before measuring, on the cold "
                    "fleet (default 10; --quick: 4)")
    ap.add_argument("--repeat", type=int, default=1, help="run everything N times (another "
                    "trace seed each time) and report median [min-max]")
    ap.add_argument("--early-headers", action="store_true",
                    help="the simulators send a stream's head at once and its first event "
                    "after the prefill, as vLLM, SGLang and TGI do (default: the head with the "
                    "first event)")
    ap.add_argument("--baseline", metavar="BIN", help="another build of accelnet: its `llm` "
                    "runs beside this build's as \"... (baseline)\" (before and after a change)")
    ap.add_argument("--out", default=os.path.join(bench.ROOT, "bench", "out"))
    ap.add_argument("--report", metavar="RESULTS_JSON",
                    help="only render summary.md again from a results.json")
    a = ap.parse_args()
    if a.report:
        with open(a.report) as f:
            print(render(json.load(f), os.path.dirname(os.path.abspath(a.report))))
        return
    shapes = a.shape.split(",") if a.shape else list(SHAPES)
    for s in shapes:
        if s not in SHAPES:
            ap.error(f"no shape {s!r}: {', '.join(SHAPES)}")
    q = a.quick
    if a.early_headers:
        EARLY_HEADERS.append("--early-headers")
    if a.baseline:
        BASELINE.append(os.path.abspath(a.baseline))
    loads = a.loads or ([1.0] if q else [0.5, 0.75, 1.0, 1.25, 1.5])
    seconds = a.seconds or (8 if q else 30)
    warmup = a.warmup if a.warmup is not None else (4 if q else 10)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
    outdir = os.path.join(a.out, stamp + "-fleets" + ("-quick" if q else ""))
    os.makedirs(outdir, exist_ok=True)
    bench.raise_nofile()
    res = {"date": stamp, "quick": q, "versions": bench.versions(), "repeat": a.repeat,
           "early_headers": a.early_headers, "baseline": a.baseline,
           "placement": f"load generator on CPU {bench.LOAD_CPU}, servers on CPU "
                        f"{bench.SERVER_CPU}", "loads": loads, "shapes": {}}
    run = bench.Run()
    for sig in (bench.signal.SIGTERM, bench.signal.SIGHUP):
        bench.signal.signal(sig, bench._interrupted)
    t0 = time.monotonic()
    try:
        for s in shapes:
            t = time.monotonic()
            print(f"shape {s} ...", file=sys.stderr, flush=True)
            run_shape(run, res, SHAPES[s], loads, seconds, warmup, a.repeat, a.pick,
                      4 if q else 10)
            print(f"shape {s} done in {time.monotonic() - t:.0f} s", file=sys.stderr,
                  flush=True)
    finally:
        run.cleanup()
        res["elapsed_s"] = time.monotonic() - t0
        with open(os.path.join(outdir, "results.json"), "w") as f:
            json.dump(res, f, indent=1)
    print(render(res, outdir))


if __name__ == "__main__":
    main()
