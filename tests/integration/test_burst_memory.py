"""What a burst of requests leaves behind: once thousands of requests that were in flight at
the same moment are answered and their connections sit idle, the proxy holds each idle
connection's record and no more; what served the requests themselves (each exchange's block,
each buffer) goes back to the kernel beyond the worker's bounded free lists."""

import json
import os
import resource
import subprocess

from harness import BIN, Skip, pool_yaml, request, rss_kib, sim_stats

LOADGEN = os.path.join(os.path.dirname(BIN), "loadgen")
N = 2000


def test_a_burst_of_requests_leaves_no_memory_behind(env):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4 * N + 512:
        raise Skip(f"RLIMIT_NOFILE hard limit {hard}: {N} connections need about {4 * N}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    env.on_cleanup.append(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    # answers after 1 s, so that every request of the burst is in flight at once
    sim = env.sim("s", latency_ms=1000, token_ms=0, jitter=0, slots=N + 16)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]), workers=1)
    st, _, _ = request(px.port, "GET", "/warm")  # the worker's first buffers, counted before
    assert st == 200
    before = rss_kib(px.pid)
    g = subprocess.Popen([LOADGEN, "idle", "--target", f"127.0.0.1:{px.port}", "--conns", str(N),
                          "--path", "/v1/completions", "--timeout-s", "60"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    env.on_cleanup.append(lambda: g.poll() is None and g.kill())
    report = json.loads(g.stdout.readline())
    assert report["ok"] == N and report["errors"] == 0, report
    at_once = sim_stats(sim.port)["max_active"]
    assert at_once >= N // 2, at_once  # a burst: most of them in flight together
    after = rss_kib(px.pid)
    per = (after - before) * 1024 / N
    print(f"{N} requests at once, then idle: RSS {before} KiB -> {after} KiB, {per:.0f} bytes "
          f"per idle connection ({at_once} in flight at the simulator at once)")
    # An idle connection's record is some 400 bytes; the worker's free lists (128 exchange
    # blocks of 4 KiB, a bounded number of buffers) are a fixed cost spread over the N. Each
    # exchange kept after the burst would add 3.4 KiB a connection (4.6 KiB in all, as before
    # the blocks were given back). AddressSanitizer keeps what is freed in its quarantine and
    # pads every allocation by design: there the figure says nothing of the proxy's own.
    with open(f"/proc/{px.pid}/maps") as f:
        if "libasan" not in f.read():
            assert per < 2500, per
    g.stdin.close()
    assert g.wait(15) == 0
