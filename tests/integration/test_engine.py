"""What accelnet learns from the inference engines behind it: their own Prometheus metrics
(pools.engine_metrics) as a load signal for work that did not pass through the proxy, and
their KV-cache events (backends.kv_events) as the exact content of their prefix cache."""

import http.server
import os
import subprocess
import threading
import time

from harness import (BIN, HttpBackend, backend_state, metrics_text, prom_samples, request,
                     served_by, wait_until)

# Alone under run.py -j: these two time how long the main thread takes to apply an engine's
# events (a fixed build takes a tenth of the bound, a broken one several times it).
SERIAL = {"test_kv_event_clears_sweep_nothing",
          "test_kv_event_hashes_an_engine_lines_up_share_no_probe_run"}


class Engine:
    """An engine stand-in: answers every request with X-Served-By, and GET /metrics with
    whatever .metrics() returns (bytes, or None for a 404). .running counts the requests it
    holds now; .hold makes each request wait that many seconds."""

    def __init__(self, name, metrics=lambda eng: b""):
        self.name = name
        self.metrics = metrics
        self.running = 0
        self.hold = 0.0
        self.scrapes = 0
        self.lock = threading.Lock()
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/metrics":
                    engine.scrapes += 1
                    body = engine.metrics(engine)
                    if body is None:
                        return self._send(404, b"no")
                    if callable(body):
                        return body(self)
                    return self._send(200, body, "text/plain; version=0.0.4")
                with engine.lock:
                    engine.running += 1
                try:
                    time.sleep(engine.hold)
                    self._send(200, engine.name.encode())
                finally:
                    with engine.lock:
                        engine.running -= 1

            do_POST = do_GET

            def _send(self, status, body, ctype="text/plain"):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Served-By", engine.name)
                self.end_headers()
                self.wfile.write(body)

        self.server = HttpBackend(Handler)
        self.port = self.server.port
        self.close = self.server.close


def _engine(env, name, metrics):
    e = Engine(name, metrics)
    env.on_cleanup.append(e.close)
    return e


def vllm(waiting, running=0, kv=0.25):
    """A vLLM page: two models (label sets) sharing the counts, histograms around them."""
    w1, r1 = waiting // 2, running // 2
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="a"}} {float(r1)}\n'
        f'vllm:num_requests_running{{engine="0",model_name="b"}} {float(running - r1)}\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="a"}} {float(w1)}\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="b"}} {float(waiting - w1)}\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="a"}} {kv}\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="b"}} {kv}\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="a"} 3.0\n'
        'vllm:e2e_request_latency_seconds_sum{model_name="a"} 1.5e+00\n'
    ).encode()


def sglang(waiting, running=0, kv=0.5):
    return (
        "# TYPE sglang:num_queue_reqs gauge\n"
        f'sglang:num_queue_reqs{{model_name="m",tp_rank="0"}} {float(waiting)}\n'
        f'sglang:num_running_reqs{{model_name="m",tp_rank="0"}} {float(running)}\n'
        f'sglang:token_usage{{model_name="m",tp_rank="0"}} {kv}\n'
        'sglang:cache_hit_rate{model_name="m"} NaN\n'
    ).encode()


def tgi(waiting, running=0):
    return (f"# TYPE tgi_queue_size gauge\ntgi_queue_size {waiting}\n"
            f"tgi_batch_current_size {running}\n"
            'tgi_request_duration_bucket{le="+Inf"} 4\n').encode()


def _pool(ports, balance, extra=""):
    text = f"pools:\n  - name: gpu\n    balance: {balance}\n    backends:\n"
    for p in ports:
        text += f"      - {{address: 127.0.0.1:{p}}}\n"
    return text + extra


# a healthy engine's scrapes never fail: a deadline that a loaded machine (the CI's passes
# side by side) does not miss, since the engine here is a Python thread of the test (80 ms
# did miss, once in a shared run)
SCRAPE = "    engine_metrics: {interval_ms: 500, timeout_ms: 400}\n"


def _steers(env, page, balance):
    busy = _engine(env, "busy", lambda e: page(40))
    idle = _engine(env, "idle", lambda e: page(0))
    px = env.proxy(_pool([busy.port, idle.port], balance, SCRAPE), workers=1)
    addr = f"127.0.0.1:{busy.port}"
    wait_until(lambda: backend_state(px.admin, addr)["engine"]["waiting"] == 40,
               "the busy engine's queue scraped")
    assert backend_state(px.admin, addr)["reported_load"] == 40
    seen = [served_by(request(px.port, "GET", "/v1/x")[1]) for _ in range(20)]
    assert seen.count("idle") == 20, seen
    return px, busy, idle


def test_vllm_queue_steers_least_connections(env):
    px, busy, idle = _steers(env, vllm, "least-connections")
    s = prom_samples(metrics_text(px.admin))
    lab = (("backend", f"127.0.0.1:{busy.port}"), ("pool", "gpu"))
    assert s[("accelnet_backend_engine_waiting", lab)] == 40
    assert s[("accelnet_backend_engine_running", lab)] == 0
    assert s[("accelnet_backend_engine_kv_usage_ratio", lab)] == 0.25  # mean of its models
    assert s[("accelnet_backend_engine_scrapes_total", lab)] >= 1
    assert s[("accelnet_backend_engine_scrape_failures_total", lab)] == 0
    assert s[("accelnet_backend_reported_load", lab)] == 40


def test_sglang_queue_steers_p2c(env):
    px, busy, _ = _steers(env, sglang, "p2c")
    b = backend_state(px.admin, f"127.0.0.1:{busy.port}")
    assert b["engine"]["kv_usage"] == 0.5 and b["engine"]["scrape_failures"] == 0, b


def test_tgi_queue_steers_least_connections(env):
    _steers(env, tgi, "least-connections")


def test_our_own_requests_are_not_counted_twice(env):
    # the engine reports what it runs, and we sent all of it: no load of others
    eng = _engine(env, "e", lambda e: vllm(e.extra, e.running))
    eng.extra = 0
    eng.hold = 3.0
    px = env.proxy(_pool([eng.port], "least-connections", SCRAPE), workers=1)
    addr = f"127.0.0.1:{eng.port}"
    threads = [threading.Thread(target=request, args=(px.port, "GET", "/v1/x"))
               for _ in range(2)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: backend_state(px.admin, addr)["engine"]["running"] == 2,
                   "the engine running our two requests")
        b = backend_state(px.admin, addr)
        assert b["inflight"] == 2 and b["reported_load"] == 0, b
        eng.extra = 5  # five more wait inside it that came some other way
        wait_until(lambda: backend_state(px.admin, addr)["reported_load"] == 5,
                   "others' load: five waiting")
    finally:
        for t in threads:
            t.join()


def _slow(handler):
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.end_headers()
    handler.wfile.write(b"tgi_queue_size 50\n")
    handler.wfile.flush()
    time.sleep(2)


def test_bad_metrics_are_counted_and_change_nothing(env):
    pages = {
        "garbage": lambda e: b"<html><body>502 Bad Gateway</body></html>\n",
        "huge": lambda e: b"tgi_queue_size 50\n" + b"# padding\n" * 120000,  # 1.2 MB
        "slow": lambda e: _slow,
        "missing": lambda e: None,
        "other": lambda e: b"process_cpu_seconds_total 12.5\n",
    }
    engines = {n: _engine(env, n, f) for n, f in pages.items()}
    px = env.proxy(_pool([e.port for e in engines.values()], "least-connections",
                         "    engine_metrics: {interval_ms: 200, timeout_ms: 150}\n"),
                   workers=1)

    def failures(name):
        return backend_state(px.admin, f"127.0.0.1:{engines[name].port}")["engine"]

    for name in pages:
        wait_until(lambda: failures(name)["scrape_failures"] >= 2, f"{name} counted")
    for name in pages:
        b = backend_state(px.admin, f"127.0.0.1:{engines[name].port}")
        assert b["engine"]["scrapes"] == 0 and b["engine"]["waiting"] == 0, (name, b)
        assert b["reported_load"] == 0, (name, b)
    seen = {served_by(request(px.port, "GET", "/v1/x")[1]) for _ in range(15)}
    assert seen == set(pages), seen
    assert px.poll() is None
    s = metrics_text(px.admin)
    assert "accelnet_backend_engine_scrape_failures_total" in s


# --- KV-cache events ---------------------------------------------------------------------


class Publisher:
    """An engine's KV-event publisher (vLLM's wire format) on an XPUB socket, so that it can
    wait for the proxy's subscription before sending."""

    def __init__(self, port=None):
        import zmq
        self.zmq = zmq
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.XPUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        if port is None:
            port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        else:
            self.sock.bind(f"tcp://127.0.0.1:{port}")
        self.port = port
        self.seq = 0

    def wait_subscriber(self):
        assert self.sock.poll(15000), "no subscriber came"
        assert self.sock.recv()[0] == 1

    def send(self, events, seq=None, payload=None):
        import msgpack
        seq = self.seq if seq is None else seq
        self.seq = seq + 1
        if payload is None:
            payload = msgpack.packb([time.time(), events, 0])
        self.sock.send_multipart([b"kv@e0", seq.to_bytes(8, "big"), payload])

    def close(self):
        self.sock.close(0)


def stored(hashes, parent=None):
    return ["BlockStored", hashes, parent, list(range(16 * len(hashes))), 16, None, "gpu"]


def removed(hashes):
    return ["BlockRemoved", hashes, "gpu"]


def test_kv_events_keep_the_prefix_index(env):
    pub = Publisher()
    env.on_cleanup.append(pub.close)
    eng = _engine(env, "e", lambda e: b"")
    px = env.proxy(
        "pools:\n  - name: gpu\n    balance: least-connections\n    backends:\n"
        f"      - {{address: 127.0.0.1:{eng.port}, kv_events: 'tcp://127.0.0.1:{pub.port}'}}\n",
        workers=1)
    addr = f"127.0.0.1:{eng.port}"
    pub.wait_subscriber()

    def state():
        return backend_state(px.admin, addr)

    pub.send([stored(list(range(1, 11)))])
    wait_until(lambda: state()["kv_events"]["blocks"] == 10, "ten blocks stored")
    pub.send([removed([9, 10]), stored([2**64 - 1], parent=8)])
    wait_until(lambda: state()["kv_events"]["blocks"] == 9, "two removed, one stored")
    b = state()["kv_events"]
    assert b["applied"] == {"stored": 2, "removed": 1, "cleared": 0}, b
    assert b["gaps"] == 0 and b["malformed"] == 0, b

    # a sequence number skipped: the index no longer mirrors the engine, and starts again
    pub.send([stored([100, 101])], seq=pub.seq + 1)
    wait_until(lambda: state()["kv_events"]["gaps"] == 1, "the gap seen")
    wait_until(lambda: state()["kv_events"]["blocks"] == 2, "only what came after the gap")

    # garbage: counted, dropped, the index cleared (its events are lost); no crash
    pub.send(None, payload=b"\xdd\xff\xff\xff\xff")
    pub.sock.send_multipart([b"kv@e0", b"short"])
    wait_until(lambda: state()["kv_events"]["malformed"] == 2, "two malformed messages")
    assert state()["kv_events"]["blocks"] == 0
    pub.send([stored([7, 8, 9])])
    wait_until(lambda: state()["kv_events"]["blocks"] == 3, "stored again")
    pub.send([["AllBlocksCleared"]])
    wait_until(lambda: state()["kv_events"]["blocks"] == 0, "all cleared")
    assert state()["kv_events"]["applied"]["cleared"] == 1

    s = prom_samples(metrics_text(px.admin))
    lab = (("backend", addr), ("pool", "gpu"))
    kind = (("backend", addr), ("kind", "stored"), ("pool", "gpu"))
    assert s[("accelnet_backend_kv_events_total", kind)] == 4
    assert s[("accelnet_backend_kv_event_gaps_total", lab)] == 1
    assert s[("accelnet_backend_kv_events_malformed_total", lab)] == 2
    assert s[("accelnet_backend_kv_events_blocks", lab)] == 0

    # the engine restarts: the connection drops (cleared, counted) and its count starts at 0
    pub.send([stored([1, 2, 3])])
    wait_until(lambda: state()["kv_events"]["blocks"] == 3, "three stored")
    pub.close()
    wait_until(lambda: state()["kv_events"]["gaps"] == 2, "the lost connection counted")
    assert state()["kv_events"]["blocks"] == 0
    pub2 = Publisher(pub.port)
    env.on_cleanup.append(pub2.close)
    pub2.wait_subscriber()
    pub2.send([stored([5, 6])])
    wait_until(lambda: state()["kv_events"]["blocks"] == 2, "the new engine's blocks")
    assert state()["kv_events"]["gaps"] == 2
    assert px.poll() is None


def _kv_proxy(env, pub, pool="balance: least-connections"):
    """A proxy whose one backend's KV events come from <pub>; its kv_events state."""
    eng = _engine(env, "e", lambda e: b"")
    px = env.proxy(
        f"pools:\n  - name: gpu\n    {pool}\n    backends:\n"
        f"      - {{address: 127.0.0.1:{eng.port}, kv_events: 'tcp://127.0.0.1:{pub.port}'}}\n",
        workers=1)
    pub.wait_subscriber()
    return px, lambda: backend_state(px.admin, f"127.0.0.1:{eng.port}")["kv_events"]


def test_kv_event_clears_sweep_nothing(env):
    """Review 8: an AllBlocksCleared (like a gap or a malformed message) cleared the map of
    the engine's hashes (control/kvmap.c) slot by slot, 3 MiB swept at the default index for
    each event an engine chooses to send: two messages of 50,000 (900 KB each, a turn's
    budget) held the main thread for seconds, the health checks and the admin API with it.
    A clear costs the same however large the map: they apply in well under a second."""
    pub = Publisher()
    env.on_cleanup.append(pub.close)
    px, kv = _kv_proxy(env, pub)
    pub.send([stored([1, 2])])  # with token ids: the map of engine hashes is made
    wait_until(lambda: kv()["blocks"] == 2, "two blocks stored")
    start = time.monotonic()
    for _ in range(2):
        pub.send([["AllBlocksCleared"]] * 50000)
    wait_until(lambda: kv()["applied"]["cleared"] == 100000, "the clears applied", timeout=120)
    took = time.monotonic() - start
    assert took < 5, f"100,000 AllBlocksCleared took {took:.1f} s to apply"
    pub.send([stored([3, 4], parent=None)])
    wait_until(lambda: kv()["blocks"] == 2, "stored after the clears")
    assert kv()["malformed"] == 0 and px.poll() is None


def test_kv_event_hashes_an_engine_lines_up_share_no_probe_run(env):
    """Review 8: the map of the engine's hashes placed a hash by the middle bits of a product,
    which only its low bits decide: an engine naming its blocks i << 40 put every one in the
    same probe run, and each BlockStored walked all of it (120,000 took 15 s of the main
    thread). Placed by a keyed hash of every bit, they apply at once, and a child still finds
    its parent among them."""
    pub = Publisher()
    env.on_cleanup.append(pub.close)
    # the map holds as many as the index: 131,072
    px, kv = _kv_proxy(env, pub, "balance: llm\n    llm: {cache_blocks: 131072}")
    n, per = 120000, 20000
    batches = [[["BlockStored", [i << 40], None, [7] * 16, 16, None, "gpu"]
                for i in range(first, first + per)] for first in range(1, n + 1, per)]
    for events in batches:
        pub.send(events)
    # (how they are spread is tests/unit/test_kvmap.c's high_bit_hashes_kept_apart: a probe
    # length, not a time; here, that they all apply and still chain)
    wait_until(lambda: kv()["applied"]["stored"] == n, "the blocks stored", timeout=120)
    before = kv()["blocks"]
    pub.send([["BlockStored", [1 << 62], 5 << 40, [8] * 16, 16, None, "gpu"]])
    wait_until(lambda: kv()["blocks"] == before + 1, "a child of a mapped block")
    assert kv()["malformed"] == 0 and px.poll() is None


def _check(env, text):
    path = env.write("c.yaml", text)
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=20)
    return path, r


def test_config_errors_name_their_place(env):
    base = "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
    path, r = _check(env, base + "    backends:\n"
                     "      - {address: 127.0.0.1:9101, kv_events: 'udp://h:1'}\n")
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:5:46: kv_events: expected"), r.stderr
    path, r = _check(env, base + "    backends: [127.0.0.1:9101]\n"
                     "    engine_metrics: {interval_ms: 100, timeout_ms: 500}\n")
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:5:21: engine_metrics:"), r.stderr
    assert "timeout_ms" in r.stderr
    path, r = _check(env, base + "    backends: [127.0.0.1:9101]\n"
                     "    engine_metrics: {path: metrics}\n")
    assert r.returncode == 2 and f"{path}:5:28: engine_metrics: 'path'" in r.stderr, r.stderr
    path, r = _check(env, base + "    backends: [127.0.0.1:9101]\n"
                     "    engine_metrics: {max_bytes: 100}\n")
    assert r.returncode == 2 and f"{path}:5:33:" in r.stderr, r.stderr
    _, r = _check(env, base + "    backends:\n"
                  "      - {address: 127.0.0.1:9101, kv_events: 'tcp://[::1]:5557'}\n"
                  "    engine_metrics: {}\n")
    assert r.returncode == 0, r.stderr


# --- end to end with the simulator: its block cache published as vLLM does ----------------


def _sim_chat(k):
    import json
    system = f"System prompt {k}: " + f"you are assistant number {k}, answer with care. " * 12
    return json.dumps({"model": "m", "messages": [{"role": "system", "content": system},
                                                  {"role": "user", "content": "hello"}]})


def test_sim_kv_events_feed_the_llm_index(env):
    from harness import complete, free_port, sim_stats, status
    ports = [free_port() for _ in range(2)]
    sims = [env.sim(f"s{i}", latency_ms=1, jitter=0, tokens=1, token_ms=0, cache_blocks=4096,
                    block_bytes=64, kv_events=f"tcp://127.0.0.1:{ports[i]}") for i in range(2)]
    lines = ["pools:", "  - name: gpu", "    balance: llm",
             "    llm: {block_bytes: 64, cache_blocks: 4096}", "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 4, "
              f"kv_events: 'tcp://127.0.0.1:{p}'}}" for s, p in zip(sims, ports)]
    px = env.proxy("\n".join(lines) + "\n", workers=1)

    def backends():
        return {b["address"]: b for b in status(px.admin)["pools"][0]["backends"]}

    def stored():
        return sum(b["kv_events"]["applied"]["stored"] for b in backends().values())

    # the subscription reaches the sims some time after the start: a warm-up prompt per try
    # until a stored event comes back from both
    k = 0

    def both_heard():
        nonlocal k
        k += 1
        complete(px.port, _sim_chat(1000 + k), "/v1/chat/completions")
        return all(b["kv_events"]["applied"]["stored"] for b in backends().values())

    wait_until(both_heard, "stored events from both simulators")
    base = {a: b["kv_events"]["blocks"] for a, b in backends().items()}
    used = {f"127.0.0.1:{s.port}": sim_stats(s.port)["cache_blocks_used"] for s in sims}
    homes = {}
    for k in range(6):
        _, h, _ = complete(px.port, _sim_chat(k), "/v1/chat/completions")
        homes[k] = served_by(h)

    def mirrored():
        now = backends()
        return all(now[a]["kv_events"]["blocks"] - base[a] ==
                   sim_stats(s.port)["cache_blocks_used"] - used[a]
                   for a, s in ((f"127.0.0.1:{s.port}", s) for s in sims))

    # each index grows by exactly what its simulator's cache took in
    wait_until(mirrored, "the proxy's indexes mirroring the simulators' caches")
    assert sum(b["kv_events"]["gaps"] + b["kv_events"]["malformed"]
               for b in backends().values()) == 0
    # and the pick reads them: each prompt again goes where its blocks are
    for k in range(6):
        _, h, _ = complete(px.port, _sim_chat(k), "/v1/chat/completions")
        assert served_by(h) == homes[k], (k, homes)
    assert stored() >= 2
