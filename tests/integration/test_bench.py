"""bench/run stopped in the middle (issue 26): Ctrl-C, a CI job's limit (SIGTERM) or a closed
terminal (SIGHUP) leaves none of the processes it started running: its nginx origin, the
proxies under test, the simulators and the load generators are each in a session of their
own, which no signal to the bench reaches, so the bench must kill them on its way out.

The bench runs --quick, its first scenario only, with a marker in its environment that every
process it starts inherits; once its origin and a proxy are up it gets the signal, and no
process carrying the marker may be left. Skipped where a package bench/run would install is
missing (nginx, HAProxy, Varnish, wrk, gnuplot); needs the normal build (bench/run builds
build/, a no-op once it is there).

bench/fleets.py (issue 27) gets two cheap checks: its trace generator's arithmetic on every
shape (rate, order, whole conversations, popularity, calibration), and a tiny run (one shape,
one light load, two accelnet contestants, 2 s measured) whose result JSON and tables must
hold what a reader of them looks for. bench/active.py's per-request records (issue 28): the
load generator's line for each request and the proxy's access log join on the request id."""

ENVIRONMENT = True  # runs the bench's tools (nginx, HAProxy, wrk) on the normal build

import os
import signal
import subprocess
import uuid

from harness import Skip, wait_until

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _marked(mark):
    """(pid, command line) of the live processes whose environment holds <mark>."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark not in f.read():
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append((int(pid), f.read().replace(b"\0", b" ").decode(errors="replace")))
        except (OSError, IndexError):  # gone meanwhile
            pass
    return out


def _stopped_bench_leaves_nothing(env, sig):
    # a test installs nothing: bench/run would, first (scripts/deps.sh's packages and these)
    for pkg in ("haproxy", "gnuplot-nox", "varnish", "nginx-light", "wrk"):
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True,
                           text=True)
        if "install ok installed" not in r.stdout:
            raise Skip(f"no {pkg} (bench/run installs it)")
    mark = f"ACCELNET_BENCH_TEST={uuid.uuid4()}"
    environ = dict(os.environ, ACCELNET_BENCH_TEST=mark.split("=", 1)[1])
    log = open(os.path.join(env.dir, "bench.log"), "wb")
    bench = subprocess.Popen([os.path.join(ROOT, "bench", "run"), "--quick", "--only", "1",
                              "--out", os.path.join(env.dir, "out")],
                             stdout=log, stderr=subprocess.STDOUT, env=environ,
                             start_new_session=True)
    try:
        # its origin is up (the first scenario has begun) and a proxy under test is too
        wait_until(lambda: any(" proxy -c " in c for _, c in _marked(mark.encode())),
                   "the bench's first proxy", timeout=120)
        assert bench.poll() is None
        bench.send_signal(sig)
        bench.wait(60)
        wait_until(lambda: not _marked(mark.encode()), "the bench's processes to go",
                   timeout=10)
    except AssertionError:
        left = _marked(mark.encode())
        with open(log.name, errors="replace") as f:
            said = f.read()[-2000:]
        raise AssertionError(f"left running after {signal.Signals(sig).name}: {left}\n"
                             f"the bench said: {said}") from None
    finally:
        for pid, _ in _marked(mark.encode()):
            try:  # what a failed run left: never beyond this test
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if bench.poll() is None:
            bench.kill()
        bench.wait()
        log.close()


def test_bench_stopped_by_sigterm_leaves_nothing_running(env):
    _stopped_bench_leaves_nothing(env, signal.SIGTERM)


def test_bench_stopped_by_ctrl_c_leaves_nothing_running(env):
    _stopped_bench_leaves_nothing(env, signal.SIGINT)


# --- bench/fleets.py (issue 27): the trace generator's arithmetic and a tiny run ---------

def _fleets_modules():
    import importlib
    import sys
    bench_dir = os.path.join(ROOT, "bench")
    if bench_dir not in sys.path:
        sys.path.insert(0, bench_dir)
    return importlib.import_module("fleettrace"), importlib.import_module("fleets")


def test_fleets_trace_comes_at_the_rate_asked_with_whole_conversations(env):
    """Every shape's trace: requests at the rate asked on average (bursts or not), due times
    in order, each turn's messages the previous turn's and more, the system prompts filling
    whole blocks, the popularity the shape says."""
    fleettrace, fleets = _fleets_modules()
    import json
    for shape in fleets.SHAPES.values():
        convs, events = fleettrace.conversations(shape, 40.0, 400.0)
        assert abs(len(events) / 400.0 - 40.0) < 40.0 * 0.12, (shape["name"], len(events))
        assert [e[0] for e in events] == sorted(e[0] for e in events)
        assert all(0 <= e[0] < 400.0 for e in events)
        if shape.get("burst"):  # no conversation starts in an off-window
            assert all(fleettrace._in_burst(shape, c["start"]) for c in convs)
        w = fleettrace.zipf_weights(shape)
        firsts = [convs[cid]["system"] for _, cid, k in events if k == 0]
        share = firsts.count(0) / len(firsts)
        assert abs(share - w[0] / sum(w)) < 0.06, (shape["name"], share)
        for text, b in zip(fleettrace.system_prompts(shape), fleettrace.system_sizes(shape)):
            assert len("system") + 2 + len(text) == b * fleettrace.BLOCK_BYTES
        body, at = os.path.join(env.dir, "t.jsonl"), os.path.join(env.dir, "t.at")
        n, _, _ = fleettrace.write_trace(shape, body, at, 10.0, 60.0, measured_from=20.0)
        with open(body) as f:
            bodies = [json.loads(line) for line in f]
        with open(at) as f:
            due = [float(line) for line in f]
        assert len(bodies) == len(due) == n > 0
        assert due == sorted(due)
        measured = sum(1 for t in due if t >= 20.0)  # calibrated: 10/s over 40 s, 2 %
        assert abs(measured - 400) <= 8, (shape["name"], measured)
        assert all(b["stream"] is shape["stream"] for b in bodies)
        by_conv = {}
        for b in bodies:
            by_conv.setdefault(b["messages"][1]["content"][:40] + b["messages"][0]["content"][:40],
                               []).append(b["messages"])
        grew = [m for turns in by_conv.values() for m in zip(turns, turns[1:])]
        assert grew, shape["name"]
        for a, b in grew:  # a later turn of one conversation starts with the earlier one
            assert b[:len(a)] == a and len(b) == len(a) + 2


def test_fleets_tiny_run_reports_capacity_and_hits(env):
    """One shape, one load, two accelnet contestants, 2 s: the result JSON and the tables."""
    import json
    subprocess.run(["make", "-s", "-C", ROOT, "all", "bench"], check=True,
                   capture_output=True)
    out = os.path.join(env.dir, "out")
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "fleets.py"),
                        "--shape", "independent", "--pick", "accelnet (llm|least)",
                        "--loads", "0.3", "--seconds", "2", "--warmup", "1", "--out", out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    (d,) = os.listdir(out)
    with open(os.path.join(out, d, "results.json")) as f:
        res = json.load(f)
    sc = res["shapes"]["independent"]
    runs = sc["results"]["0.30x"]
    assert sorted(runs) == ["accelnet least-connections max_concurrency 4",
                            "accelnet llm max_concurrency 4"]
    for (g,) in runs.values():
        assert g["sent"] > 0 and g["ok"] == g["sent"] and g["errors"] == 0, g
        assert 0 <= g["hit_share"] <= 1 and g["blocks_hit"] + g["blocks_missed"] > 0
        # the proxy's /metrics was read; its prediction series (none before issue 27's) kept
        assert g["metrics_samples"] > 0 and "_error" not in g["predict"], g["predict"]
    assert "| independent |" in r.stdout and "0.30x" in r.stdout
    assert "Capacity at SLO" in r.stdout


def test_loadgen_samples_take_each_request_apart(env):
    """bench/active.py --samples (issue 28's active-active): `loadgen open --samples` writes a
    line for every request with what its response head said (the simulator's cached and
    prompt blocks, its planned time, the proxy's llm decision), and a proxy that trusts the
    load generator logs each request under the id it sent, so that requests_tail.py can join
    the two and take each TTFT apart (queue, prefill, rest)."""
    import json
    import sys
    loadgen = os.path.join(ROOT, "build", "loadgen")
    if not os.path.exists(loadgen):
        raise Skip("no build/loadgen (make bench)")
    from harness import BIN, free_port
    sims = [env.sim(f"s{i}", slots=2, cache_blocks=64, block_bytes=64, latency_ms=20,
                    prefill_us_per_block=1000, tokens=2, token_ms=1, jitter=0)
            for i in range(2)]
    port, log = free_port(), os.path.join(env.dir, "access-0.log")
    cfg = env.write("p.yaml", f"listen: [127.0.0.1:{port}]\n"
                    f"access_log: {{path: {log}, format: json}}\n"
                    "trusted_proxies: [127.0.0.1]\n"
                    "pools:\n  - name: b\n    balance: llm\n"
                    "    llm: {block_bytes: 64, explain: true}\n    backends:\n"
                    + "".join(f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 1}}\n"
                              for s in sims))
    proxy = env.start([BIN, "proxy", "-c", cfg], "proxy", wait_port=port)
    system = "a system prompt long enough to fill some blocks. " * 8
    trace = env.write("t.jsonl", "".join(json.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "system", "content": system},
                                                     {"role": "user", "content": f"q{i}"}]})
        + "\n" for i in range(12)))
    d = os.path.join(env.dir, "run-1")
    os.makedirs(d)
    r = subprocess.run([loadgen, "open", "--target", f"127.0.0.1:{port}", "--rate", "100",
                        "--duration", "1", "--path", "/v1/chat/completions", "--bodies", trace,
                        "--samples", os.path.join(d, "samples.tsv"), "--timeout-s", "10"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["ok"] == 12
    proxy.send_signal(signal.SIGTERM)  # its access log written out whole
    proxy.wait(10)
    os.rename(log, os.path.join(d, "access-0.log"))
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import requests_tail
    reqs = requests_tail.load(d)
    assert sorted(x["i"] for x in reqs) == list(range(12))
    assert all(x["logged"] for x in reqs), "a request not found in the access log by its id"
    assert all(x["prompt"] > 0 and 0 <= x["cached"] <= x["prompt"] for x in reqs)
    assert all(x["reason"] != "-" for x in reqs)  # the llm decision came with each answer
    assert any(x["cached"] > 0 for x in reqs)  # the shared system prompt hit after the first
    assert any(x["queue"] > 0 for x in reqs)  # 100 a second at 2 slots of 30 ms: some queued
    for x in reqs:  # the terms add up to the TTFT the load generator measured
        assert x["prefill"] >= 20 and x["rest"] > -2, x
    dec = requests_tail.decompose(d)
    assert dec["all"]["n"] == 12 and dec["p90+"]["n"] >= 1
