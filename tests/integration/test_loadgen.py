"""bench/loadgen, the generator behind bench/run's open-loop and SSE figures: it must count
what it sends and what comes back, and measure latency from when a request was due."""

SERIAL = True  # load, timing or fixed ports: run alone under run.py -j

import json
import os
import signal
import subprocess

from harness import BIN, pool_yaml

LOADGEN = os.path.join(os.path.dirname(BIN), "loadgen")


def _run(*args):
    r = subprocess.run([LOADGEN, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_loadgen_open_loop_counts_and_latency(env):
    sim = env.sim("s", latency_ms=20, token_ms=0, jitter=0, slots=8)
    out = _run("open", "--target", f"127.0.0.1:{sim.port}", "--rate", "50", "--duration", "1")
    assert out["sent"] == 50 and out["ok"] == 50 and out["errors"] == 0, out
    assert out["latency_ms"]["n"] == 50 and out["latency_ms"]["p50"] >= 20, out


def test_loadgen_open_loop_sees_a_stall(env):
    # one slot, 100 ms per request, 20 requests/s: the server falls behind, and latency is
    # measured from when each request was due, so the queue shows in the tail
    sim = env.sim("s", latency_ms=100, token_ms=0, jitter=0, slots=1)
    out = _run("open", "--target", f"127.0.0.1:{sim.port}", "--rate", "20", "--duration", "1")
    assert out["ok"] == 20, out
    assert out["latency_ms"]["max"] >= 1000, out  # the 20th waited behind 19 others


def test_loadgen_sse_through_the_proxy(env):
    sim = env.sim("s", latency_ms=0, token_ms=2, tokens=10, slots=64)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]))
    out = _run("sse", "--target", f"127.0.0.1:{px.port}", "--streams", "20", "--body",
               '{"stream": true}')
    assert out["ok"] == 20 and out["errors"] == 0, out
    assert out["token_delay_ms"]["n"] == 200 and out["ttft_ms"]["n"] == 20, out


def test_loadgen_idle_holds_connections(env):
    sim = env.sim("s")
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]))
    g = subprocess.Popen([LOADGEN, "idle", "--target", f"127.0.0.1:{px.port}", "--conns", "200",
                          "--path", "/x"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    report = json.loads(g.stdout.readline())
    assert report["ok"] == 200 and report["errors"] == 0, report
    g.stdin.close()
    assert g.wait(15) == 0
