#!/usr/bin/python3
"""bench/active.py: active-active, issue 28's must-show (never a test: nothing here gates CI).

Scenario 9's fleet and traffic (bench/bench.py: 8 simulators with block prefix caches, chat
on 16 shared system prompts, bench/chattrace.py) at 1.6x the all-miss capacity, through
accelnet's `balance: llm` (max_concurrency 4 a backend, the simulators' block size and cache
size), in these variants, each on a fresh, cold fleet:

- one: one instance, as scenario 9 runs it;
- three: three instances, one config, sharing one redis-server (started on a free port here:
  `cluster: {redis: ..., sync_ms: 10}`: docs/operations.md, "Backend slots across
  instances"); one load generator sends request i of the trace to instance i mod 3
  (`loadgen open --target A --target B --target C`), so the turns of one conversation
  reach different instances, as behind a connection-spreading balancer;
  the percentiles are of all requests together (one loadgen: merged samples, never averaged
  percentiles);
- three-redis-stopped: the same, with Redis killed (SIGKILL) at a third of the run and a new,
  empty one started on the same port at two thirds; each instance's accelnet_cluster_redis_up
  is polled, so the table says when the instances saw it go and come back;
- one-busy: one instance, beside a process that burns the CPU three instances and Redis add
  (--burn, a share of a CPU, in 1 ms bursts) on the instances' CPU: what that CPU alone costs
  one instance's figures on this machine.

The load generator runs on CPU 0, the simulators on CPU 1, the instances and Redis on CPU 1
beside them or, with --proxy-cpu 0, beside the load generator (so that the instances' CPU
never delays the simulated accelerators, which stand for other machines).

Reported per variant: goodput at SLO (requests answered 200 in full whose first token came
within 1 s, a second), TTFT p50/p90/p99, block hits (the simulators' own counts), the most
requests one simulator held waiting behind its slots at once (0 when the instances together
never passed a backend's max_concurrency), the mean wait in the instances' queues, errors and
requests never answered, the requests each instance was sent and answered, and each
instance's cluster counters (prefixes sent and received through Redis, failed syncs).

Usage: bench/run --only active [--quick] [--seconds S] [--load X] [--repeat N]
                 [--variants one,three,three-redis-stopped] [--sync-ms MS] [--accelnet BIN]
                 [--cluster-extra KEYS]
                 [--samples DIR] [--json OUT]

--samples DIR keeps every request's record (the load generator's, with what its response
head said, and each instance's access log, joined on the request id) in DIR/VARIANT-N/ and
prints the slowest requests' TTFT taken apart (bench/requests_tail.py).
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the run, the fleet, the starters)
import chattrace  # noqa: E402
import requests_tail as requests  # noqa: E402  (--samples: the slowest requests taken apart)

# what is kept of each instance's /metrics at the end of a run
INSTANCE_SERIES = ("accelnet_cluster_", "accelnet_llm_predict_decisions_total",
                   "accelnet_llm_predict_hit_blocks_total", "accelnet_backend_llm_index_blocks",
                   "accelnet_pool_queue_")
VARIANTS = ("one", "three", "three-redis-stopped", "one-busy")
BURNER = """import sys, time
busy, idle = float(sys.argv[1]) / 1000, float(sys.argv[2]) / 1000
while True:
    t = time.perf_counter() + busy
    while time.perf_counter() < t:
        pass
    time.sleep(idle)
"""
INSTANCES = 3


def start_redis(run, port):
    return run.start([shutil.which("redis-server") or "/usr/bin/redis-server", "--port",
                      str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                      "--dir", run.dir], port, cpu=PROXY_CPU, name="redis")


CAP = 4  # max_concurrency of each backend (--cap)
EXTRA = ""  # more of each instance's pool config (--pool-extra)
PROXY_BIN = None  # the proxies' accelnet (--accelnet; None: build/accelnet, as the sims')
SYNC_MS = 10  # cluster.sync_ms (--sync-ms; 0: its default, 100)
CLUSTER_EXTRA = ""  # more keys of cluster: (--cluster-extra)
PROXY_CPU = bench.SERVER_CPU  # where the instances and Redis run (--proxy-cpu)
BURN = 0.27  # the share of a CPU one-busy's burner takes (--burn)
SAMPLE_RUN = {v: 1 for v in VARIANTS}  # the next run's number, per variant
ROTATE = 0  # --rotate: request i goes to the instance started (i + ROTATE) mod 3
SAMPLES = None  # --samples DIR: per-request records of every run kept here (None: none)


def start_instance(run, ports, redis_port):
    """One accelnet as scenario 9's `accelnet llm max_concurrency 4`, with an admin listener
    and, given <redis_port>, `cluster:`: (process, port); process.admin is its admin port."""
    f = bench.CHAT_FLEET
    admin = bench.free_port()
    explain = ", explain: true" if SAMPLES else ""
    extra = (f"    llm: {{block_bytes: {f['block_bytes']}, cache_blocks: {f['cache_blocks']}"
             f"{explain}}}\n" + EXTRA + f"admin: {{address: 127.0.0.1:{admin}}}\n")
    log = None
    if SAMPLES:  # the loadgen's request ids kept (trusted), each request's line in a file
        log = os.path.join(run.dir, f"access-{admin}.log")
        extra += (f"access_log: {{path: {log}, format: json}}\n"
                  "trusted_proxies: [127.0.0.1]\n")
    if redis_port:
        extra += (f"cluster: {{redis: 127.0.0.1:{redis_port}"
                  + (f", sync_ms: {SYNC_MS}" if SYNC_MS else "")
                  + (f", {CLUSTER_EXTRA}" if CLUSTER_EXTRA else "") + "}\n")
    p, port = bench.start_accelnet(run, ports, "llm", cap=CAP, extra=extra, binary=PROXY_BIN,
                                   cpu=PROXY_CPU)
    p.admin, p.access_log = admin, log
    return p, port


def metrics(admin, prefixes=("accelnet_cluster_",)):
    """The admin /metrics series whose names start with one of <prefixes>: {name: value}."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read()
    except OSError:
        return {}
    out = {}
    for line in text.decode().splitlines():
        if line.startswith(prefixes):
            name, _, v = line.rpartition(" ")
            try:
                out[name] = float(v)
            except ValueError:
                pass
    return out


def redis_up(admin):
    return int(metrics(admin).get("accelnet_cluster_redis_up", -1))


def wait_all(insts, want, timeout_s=15):
    """Until every instance says accelnet_cluster_redis_up == <want>: the seconds it took, or
    None when it never did."""
    t = time.monotonic()
    while time.monotonic() - t < timeout_s:
        if all(redis_up(p.admin) == want for p, _ in insts):
            return time.monotonic() - t
        time.sleep(0.05)
    return None


def sim_stats(ports):
    out = []
    for sp in ports:
        st = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{sp}/sim/stats",
                                               timeout=5).read())
        out.append({k: st.get(k, 0) for k in ("requests", "blocks_hit", "blocks_missed",
                                              "max_waiting")})
    return out


def loadgen_multi(targets, rate, seconds, trace, timeout_s, samples=None):
    argv = ["taskset", "-c", bench.LOAD_CPU, bench.LOADGEN, "open"]
    if samples:
        argv += ["--samples", samples]
    for port in targets:
        argv += ["--target", f"127.0.0.1:{port}"]
    argv += ["--rate", f"{rate:.2f}", "--duration", str(seconds), "--path",
             "/v1/chat/completions", "--bodies", trace, "--slo-ms", str(bench.CHAT_SLO_MS),
             "--timeout-s", str(timeout_s)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + timeout_s + 120,
                         preexec_fn=bench.raise_nofile)
    return json.loads(out.stdout.strip().splitlines()[-1])


class RedisOutage(threading.Thread):
    """Kills Redis <stop_s> after the start and starts an empty one on its port <start_s>
    after it, watching each instance's accelnet_cluster_redis_up: when each saw it go and
    come back (seconds after the start)."""

    def __init__(self, run, redis, port, insts, stop_s, start_s):
        super().__init__(daemon=True)
        self.run_, self.redis, self.port, self.insts = run, redis, port, insts
        self.stop_s, self.start_s = stop_s, start_s
        self.seen_down = [None] * len(insts)
        self.seen_up = [None] * len(insts)
        self.error = None

    def run(self):
        try:
            t0 = time.monotonic()
            time.sleep(self.stop_s)
            self.redis.send_signal(signal.SIGKILL)
            self.redis.wait()
            while time.monotonic() - t0 < self.start_s:
                el = time.monotonic() - t0
                for i, (p, _) in enumerate(self.insts):
                    if self.seen_down[i] is None and redis_up(p.admin) == 0:
                        self.seen_down[i] = round(el, 2)
                time.sleep(0.1)
            self.redis = start_redis(self.run_, self.port)
            while any(u is None for u in self.seen_up) and time.monotonic() - t0 < self.start_s + 30:
                el = time.monotonic() - t0
                for i, (p, _) in enumerate(self.insts):
                    if self.seen_up[i] is None and redis_up(p.admin) == 1:
                        self.seen_up[i] = round(el, 2)
                time.sleep(0.1)
        except Exception as e:  # reported with the result, never lost in a thread
            self.error = repr(e)


def _cpu_s_or(pid, before):
    """<pid>'s CPU seconds, or <before> when it has ended and been reaped (the Redis an outage
    killed: reading it failed every three-redis-stopped run)."""
    try:
        return bench.proc_cpu_s(pid)
    except FileNotFoundError:
        return before


def one_variant(run, variant, rate, seconds, trace, timeout_s):
    """One variant on a fresh, cold fleet: the loadgen's figures, the simulators' and the
    instances'; {"failed": why} when something did not start."""
    try:
        ports, sims = bench.start_chat_fleet(run)
    except RuntimeError as e:
        return {"failed": f"simulator: {e}"}
    procs = []
    try:
        n = 1 if variant in ("one", "one-busy") else INSTANCES
        if variant == "one-busy":  # the CPU three instances and Redis add, burnt beside one
            busy_ms = 1.0
            burner = run.start([sys.executable, "-c", BURNER, str(busy_ms),
                                str(busy_ms * (1 - BURN) / BURN)], cpu=PROXY_CPU, name="burner")
            burner.burner = True
            procs.append(burner)
        rport = bench.free_port() if n > 1 else None
        redis = start_redis(run, rport) if rport else None
        if redis:
            procs.append(redis)
        insts = []
        for _ in range(n):
            p, port = start_instance(run, ports, rport)
            procs.append(p)
            insts.append((p, port))
        if rport and wait_all(insts, 1) is None:
            return {"failed": "the instances did not reach Redis"}
        outage = None
        if variant == "three-redis-stopped":
            outage = RedisOutage(run, redis, rport, insts, seconds / 3, 2 * seconds / 3)
            outage.start()
        g0 = [bench.proc_cpu_s(x.pid) for x in procs + sims]
        load_avg = os.getloadavg()[0]
        tsv = os.path.join(run.dir, "samples.tsv") if SAMPLES else None
        targets = [port for _, port in insts]
        targets = targets[ROTATE % n:] + targets[:ROTATE % n]  # request i: started (i + ROTATE) % n
        g = loadgen_multi(targets, rate, seconds, trace, timeout_s, tsv)
        g1 = [_cpu_s_or(x.pid, a) for x, a in zip(procs + sims, g0)]
        # CPU seconds of the run: the instances, Redis (the first one, 0 when an outage
        # killed it: gone, it says nothing; the second is not counted) and the simulators;
        # the load average before it
        np_ = len(procs)
        g["instances_cpu_s"] = round(sum(b - a for a, b, x in zip(g0, g1, procs)
                                         if x is not redis and not getattr(x, "burner", 0)),
                                     2)
        g["burner_cpu_s"] = round(sum(b - a for a, b, x in zip(g0, g1, procs)
                                      if getattr(x, "burner", 0)), 2)
        g["redis_cpu_s"] = round(g1[0] - g0[0], 2) if redis else 0.0
        g["sims_cpu_s"] = round(sum(g1[np_:]) - sum(g0[np_:]), 2)
        g["load_avg"] = load_avg
        if outage:
            outage.join(60)
            procs.append(outage.redis)
            g["redis_stopped_at_s"] = round(seconds / 3, 2)
            g["redis_started_at_s"] = round(2 * seconds / 3, 2)
            g["instances_saw_redis_down_at_s"] = outage.seen_down
            g["instances_saw_redis_up_at_s"] = outage.seen_up
            if outage.error:
                g["outage_error"] = outage.error
        st = sim_stats(ports)
        g["sims"] = st
        hit = sum(s["blocks_hit"] for s in st)
        missed = sum(s["blocks_missed"] for s in st)
        g["blocks_hit"], g["blocks_missed"] = hit, missed
        g["hit_share"] = hit / (hit + missed) if hit + missed else 0.0
        g["served"] = [s["requests"] for s in st]
        g["instances"] = [{"metrics": metrics(p.admin, INSTANCE_SERIES)} for p, _ in insts]
        if SAMPLES:  # kept before the run's directory goes: DIR/VARIANT-N/
            d = os.path.join(SAMPLES, f"{variant}-{SAMPLE_RUN[variant]}")
            SAMPLE_RUN[variant] += 1
            os.makedirs(d, exist_ok=True)
            shutil.copy(tsv, os.path.join(d, "samples.tsv"))
            for k, (p, _) in enumerate(insts):
                run.stop(p)  # its access log written out whole
                shutil.copy(p.access_log, os.path.join(d, f"access-{k}.log"))
            g["samples_dir"] = d
            g["tail"] = requests.decompose(d)
        return g
    finally:
        for p in procs:
            run.stop(p)
        for s_ in sims:
            run.stop(s_)


def fmt(v, f="{:.0f}"):
    return "-" if v is None else ("never" if v >= bench.NEVER_MS else f.format(v))


def inside(g):
    """The most requests one simulator held waiting behind its slots at once (its max_waiting
    counts each request as it arrives, so 1 is a request that never waited)."""
    return max([s.get("max_waiting", 0) for s in g.get("sims", [])] + [1]) - 1


def queue_wait_ms(g):
    """The mean wait in the instances' queues, all requests together, in ms (None: none)."""
    tot = cnt = 0.0
    for inst in g.get("instances", []):
        for k, v in inst.get("metrics", {}).items():
            if k.startswith("accelnet_pool_queue_wait_seconds_sum"):
                tot += v
            elif k.startswith("accelnet_pool_queue_wait_seconds_count"):
                cnt += v
    return tot / cnt * 1000 if cnt else None


def waits(runs):
    """The median over <runs> of queue_wait_ms, or "-" where no run has it."""
    vals = [w for w in map(queue_wait_ms, runs) if w is not None]
    return fmt(statistics.median(vals), "{:.0f}") if vals else "-"


def summary_rows(res):
    rows = []
    for v in res["variants"]:
        runs = [g for g in res["results"].get(v, []) if "failed" not in g]
        if not runs:
            rows.append([v] + ["-"] * 11)
            continue

        def m(get):
            return statistics.median([get(g) for g in runs])

        def spread(get, f="{:.1f}"):
            vals = [get(g) for g in runs]
            s = fmt(statistics.median(vals), f)
            return s + (f" [{fmt(min(vals), f)}-{fmt(max(vals), f)}]" if len(vals) > 1 else "")
        rows.append([v, spread(lambda g: g["goodput_slo"]),
                     fmt(m(lambda g: g["ttft_ms"]["p50"])),
                     spread(lambda g: g["ttft_ms"]["p90"], "{:.0f}"),
                     fmt(m(lambda g: g["ttft_ms"]["p99"])),
                     f"{m(lambda g: g['hit_share']) * 100:.1f} %",
                     f"{m(inside):.0f}",
                     waits(runs),
                     f"{m(lambda g: g['errors']):.0f}", f"{m(lambda g: g['no_first_token']):.0f}",
                     f"{m(lambda g: g['sent']):.0f}",
                     "/".join(f"{m(lambda g: g.get(k, 0)):.1f}" for k in
                              ("instances_cpu_s", "redis_cpu_s", "sims_cpu_s"))])
    return (["variant", "goodput@SLO req/s", "TTFT p50 ms", "p90 ms", "p99 ms", "block hits",
             "most waiting inside a sim", "queue wait ms (mean)", "errors", "never answered",
             "sent", "CPU s: instances/Redis/sims"], rows)


def phase_rows(res):
    """Goodput at SLO a second, by when requests were due: before Redis was stopped, while it
    was away, after it was started again (the same seconds of the other variants beside)."""
    rows = []
    secs = res["seconds"]
    cuts = [(0, secs // 3), (secs // 3, 2 * secs // 3), (2 * secs // 3, secs)]
    for v in res["variants"]:
        runs = [g for g in res["results"].get(v, []) if "failed" not in g and "per_second" in g]
        if not runs:
            continue
        row = [v]
        for a, b in cuts:
            vals = [sum(g["per_second"]["good_slo"][a:b]) / (b - a) for g in runs]
            row.append(f"{statistics.median(vals):.1f}")
        rows.append(row)
    return (["variant", f"goodput@SLO s 0-{secs // 3}", f"s {secs // 3}-{2 * secs // 3} "
             "(Redis away)", f"s {2 * secs // 3}-{secs}"], rows)


def ratio_rows(res):
    one = [g for g in res["results"].get("one", []) if "failed" not in g]
    rows = []
    for v in res["variants"]:
        if v == "one" or not one:
            continue
        runs = [g for g in res["results"].get(v, []) if "failed" not in g]
        if not runs:
            continue
        good = statistics.median(g["goodput_slo"] for g in runs) / \
            statistics.median(g["goodput_slo"] for g in one)
        p90 = statistics.median(g["ttft_ms"]["p90"] for g in runs) / \
            statistics.median(g["ttft_ms"]["p90"] for g in one)
        rows.append([v, f"{good:.3f}", "yes" if good >= 0.9 else "NO", f"{p90:.3f}",
                     "yes" if p90 <= 1.1 else "NO"])
    return (["variant ÷ one", "goodput", "≥ 0.9", "TTFT p90", "≤ 1.1"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 s runs, once")
    ap.add_argument("--seconds", type=int, help="seconds of load per run (default 30; "
                    "--quick: 10)")
    ap.add_argument("--load", type=float, default=1.6,
                    help="multiple of the all-miss capacity (default 1.6)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each variant, interleaved")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--timeout-s", type=float, default=10)
    ap.add_argument("--cap", type=int, default=4, help="each backend's max_concurrency")
    ap.add_argument("--pool-extra", default="", help="more YAML of the pool, one line each, "
                    "indented as the pool's keys (for exploring)")
    ap.add_argument("--sync-ms", type=int, default=10,
                    help="cluster.sync_ms (default 10, as docs/operations.md advises for LLM "
                    "pools near capacity; 0: the key left out, its default 100)")
    ap.add_argument("--cluster-extra", default="", metavar="KEYS",
                    help="more keys of each instance's cluster: section, as YAML flow "
                    "pairs ('key: value, key: value'), a branch's new switch say")
    ap.add_argument("--accelnet", metavar="BIN",
                    help="run this accelnet binary (an older build, say) instead of build/'s")
    ap.add_argument("--proxy-cpu", default=bench.SERVER_CPU,
                    help=f"the CPU the instances and Redis run on (default {bench.SERVER_CPU}, "
                    f"beside the simulators; {bench.LOAD_CPU}: beside the load generator, so "
                    "the proxies' CPU never delays the simulated accelerators)")
    ap.add_argument("--burn", type=float, default=0.27,
                    help="one-busy: the share of the instances' CPU a burner takes beside one "
                    "instance, in 1 ms bursts (default 0.27: what three instances and Redis "
                    "used beyond one, measured)")
    ap.add_argument("--samples", metavar="DIR",
                    help="keep every request's record here (the load generator's and each "
                    "instance's access log, DIR/VARIANT-N/) and take the slowest requests "
                    "apart (bench/requests_tail.py); turns on llm.explain and trusts the "
                    "load generator's request ids")
    ap.add_argument("--rotate", type=int, default=0, metavar="K",
                    help="send request i of the trace to the instance started (i + K) mod 3 "
                    "(default 0): the trace is the same every run, so this tells an instance's "
                    "own figures from those of its slice of the trace")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    global SAMPLES, ROTATE
    ROTATE = a.rotate
    SAMPLES = os.path.abspath(a.samples) if a.samples else None
    global CAP, EXTRA, SYNC_MS, PROXY_CPU, BURN, CLUSTER_EXTRA
    CLUSTER_EXTRA = a.cluster_extra
    CAP, EXTRA, SYNC_MS, PROXY_CPU, BURN = a.cap, a.pool_extra, a.sync_ms, a.proxy_cpu, a.burn
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"unknown variant {v}: {', '.join(VARIANTS)}")
    seconds = a.seconds or (10 if a.quick else 30)
    global PROXY_BIN
    PROXY_BIN = os.path.abspath(a.accelnet) if a.accelnet else None
    bench.raise_nofile()
    cap, miss_ms, blocks = bench.chat_capacity()
    rate = cap * a.load
    run = bench.Run()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, bench._interrupted)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ"),
           "quick": a.quick, "versions": bench.versions(), "load": a.load, "rate": rate,
           "capacity": cap, "seconds": seconds, "instances": INSTANCES, "fleet": bench.CHAT_FLEET,
           "slo_ms": bench.CHAT_SLO_MS, "variants": variants, "sync_ms": SYNC_MS,
           "cluster_extra": CLUSTER_EXTRA, "rotate": ROTATE,
           "accelnet": PROXY_BIN or bench.ACCELNET, "proxy_cpu": PROXY_CPU,
           "placement": f"load generator on CPU {bench.LOAD_CPU}, simulators on CPU "
                        f"{bench.SERVER_CPU}, instances and Redis on CPU {PROXY_CPU}",
           "results": {}}
    try:
        trace = os.path.join(run.dir, "chat.jsonl")
        res["requests_in_trace"] = chattrace.write_trace(trace, rate, seconds, shared=True)
        for r in range(a.repeat):
            order = variants if r % 2 == 0 else variants[::-1]
            for v in order:
                t = time.monotonic()
                g = one_variant(run, v, rate, seconds, trace, a.timeout_s)
                res["results"].setdefault(v, []).append(g)
                print(f"  active {v} (run {r + 1}): "
                      + (f"failed ({g['failed'][-160:]})" if "failed" in g else
                         f"goodput@SLO {g['goodput_slo']:.1f}/s, TTFT p90 "
                         f"{fmt(g['ttft_ms']['p90'])} ms, hits {g['hit_share'] * 100:.1f} %, "
                         f"errors {g['errors']}")
                      + f" ({time.monotonic() - t:.0f} s)", file=sys.stderr, flush=True)
    finally:
        run.cleanup()
    text = "\n".join([
        f"# active-active {res['date']}{' (quick)' if a.quick else ''}: scenario 9 at "
        f"{a.load}x ({rate:.0f} req/s), {seconds} s a run, {a.repeat} run(s) each", "",
        bench.table(*summary_rows(res)), "", bench.table(*ratio_rows(res)), "",
        "By when requests were due (in three-redis-stopped, Redis is away in the middle "
        "third):", "", bench.table(*phase_rows(res)), ""]
        + (["TTFT taken apart (--samples; ms, means over the slice; rest = TTFT - lag - queue "
            "- sim wait - prefill):", "", bench.table(*requests.rows(
                [(os.path.basename(g["samples_dir"]), g["tail"]) for v in res["variants"]
                 for g in res["results"].get(v, []) if "tail" in g])), ""]
           if SAMPLES else []))
    bench.emit(text, res, a.json)


if __name__ == "__main__":
    main()
