"""/metrics under real traffic, as Prometheus sees it (issue 13): `promtool check metrics`
clean; queue figures that add up (enqueued = granted + displaced + timeouts + spilled +
withdrawn + length) with each outcome driven; slots, ejected and eligible per backend;
accelnet_backend_up right for a killed backend with passive checks only; the standard
process_* figures."""

import concurrent.futures
import json
import os
import re
import socket

from harness import (complete, free_port, metrics_text, pool_yaml, prom_samples, promtool_clean,
                     request, sim_stats, wait_until)

OUTCOMES = ("granted", "displaced", "timeouts", "spilled", "withdrawn")


def _queue(got, pool):
    lab = (("pool", pool),)
    q = {k: got[(f"accelnet_pool_queue_{k}_total", lab)] for k in ("enqueued",) + OUTCOMES}
    q["length"] = got[("accelnet_pool_queue_length", lab)]
    return q


def _adds_up(q):
    return q["enqueued"] == sum(q[k] for k in OUTCOMES) + q["length"]


def _capped(name, port, cap, extra=""):
    return (f"  - name: {name}\n    backends:\n"
            f"      - {{address: 127.0.0.1:{port}, max_concurrency: {cap}}}\n" + extra)


def test_queue_figures_add_up_through_every_outcome(env):
    gpu = env.sim("gpu", latency_ms=1500, jitter=0, token_ms=0, slots=64)
    slow = env.sim("slow", latency_ms=2000, jitter=0, token_ms=0, slots=64)
    main = env.sim("main", latency_ms=2000, jitter=0, token_ms=0, slots=64)
    spare = env.sim("spare", latency_ms=1, jitter=0, token_ms=0)
    px = env.proxy("pools:\n" + _capped("gpu", gpu.port, 1, "    queue: {max: 2}\n")
                   + _capped("tout", slow.port, 1, "    queue: {timeout_ms: 300}\n")
                   + _capped("main", main.port, 1) + _capped("spare", spare.port, 0)
                   + "routes:\n"
                   "  - match: {host: t}\n    pool: tout\n"
                   "  - match: {host: s}\n    pool: main\n"
                   "    spillover: {pool: spare, after_ms: 50}\n"
                   "  - match: {path_prefix: /}\n    pool: gpu\n    tenant_header: X-Tenant\n")

    def got():
        return prom_samples(metrics_text(px.admin))

    def on(host):
        return request(px.port, "POST", "/v1/completions", body=b'{"prompt":"hi"}',
                       headers={"Host": host, "Content-Type": "application/json"}, timeout=30)

    def as_tenant(t):
        return request(px.port, "POST", "/v1/completions", body=b'{"prompt":"hi"}',
                       headers={"X-Tenant": t, "Content-Type": "application/json"}, timeout=30)

    gl = (("backend", f"127.0.0.1:{gpu.port}"), ("pool", "gpu"))
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        first = ex.submit(as_tenant, "flood")
        wait_until(lambda: sim_stats(gpu.port)["active"] == 1, "the first request in service")
        g = got()
        assert g[("accelnet_backend_slots", gl)] == 1 and g[("accelnet_backend_inflight", gl)] == 1
        assert g[("accelnet_backend_eligible", gl)] == 0, "its one slot is taken"
        assert g[("accelnet_backend_ejected", gl)] == 0
        # still waiting, then withdrawn: a client that queues and goes away
        s = socket.create_connection(("127.0.0.1", px.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        wait_until(lambda: _queue(got(), "gpu")["length"] == 1, "it to queue")
        q = _queue(got(), "gpu")
        assert q["enqueued"] == 1 and _adds_up(q), q
        s.close()
        wait_until(lambda: _queue(got(), "gpu")["withdrawn"] == 1, "the queue to let it go")
        # displaced: the flooder fills the queue, a lighter tenant takes its newest place
        flood = [ex.submit(as_tenant, "flood") for _ in range(1)]
        wait_until(lambda: _queue(got(), "gpu")["length"] == 1, "the flood to queue")
        flood.append(ex.submit(as_tenant, "flood"))
        wait_until(lambda: _queue(got(), "gpu")["length"] == 2, "the flood to fill the queue")
        light = ex.submit(as_tenant, "light")
        # timed out, on pool tout; spilled, on pool main
        t1 = ex.submit(on, "t")
        wait_until(lambda: sim_stats(slow.port)["active"] == 1, "tout's slot taken")
        assert on("t")[0] == 503
        s1 = ex.submit(on, "s")
        wait_until(lambda: sim_stats(main.port)["active"] == 1, "main's slot taken")
        assert on("s")[0] == 200  # by the spare pool
        codes = sorted([first.result()[0], light.result()[0]] + [f.result()[0] for f in flood])
        assert codes == [200, 200, 200, 503], codes
        assert t1.result()[0] == 200 and s1.result()[0] == 200
    g = got()
    want = {"gpu": dict(enqueued=4, granted=2, displaced=1, timeouts=0, spilled=0,
                        withdrawn=1, length=0),
            "tout": dict(enqueued=1, granted=0, displaced=0, timeouts=1, spilled=0,
                         withdrawn=0, length=0),
            "main": dict(enqueued=1, granted=0, displaced=0, timeouts=0, spilled=1,
                         withdrawn=0, length=0)}
    for pool, w in want.items():
        q = _queue(g, pool)
        assert q == {k: float(v) for k, v in w.items()}, (pool, q)
        assert _adds_up(q), (pool, q)
    assert g[("accelnet_pool_spilled_in_total", (("pool", "spare"),))] == 1
    promtool_clean(metrics_text(px.admin))


def test_backend_up_with_passive_checks_only(env):
    a = env.sim("a", latency_ms=1, jitter=0, token_ms=0)
    b = env.sim("b", latency_ms=1, jitter=0, token_ms=0)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [a.port, b.port]))  # no health:
    for _ in range(4):
        assert complete(px.port)[0] == 200

    def up(port):
        return prom_samples(metrics_text(px.admin))[
            ("accelnet_backend_up", (("backend", f"127.0.0.1:{port}"), ("pool", "gpu")))]
    assert up(a.port) == 1 and up(b.port) == 1
    env.stop(b)  # killed: its port refuses connections now
    fails = (("backend", f"127.0.0.1:{b.port}"), ("pool", "gpu"))
    for _ in range(4):  # round robin tries b, fails over to a
        assert complete(px.port)[0] == 200
    g = prom_samples(metrics_text(px.admin))
    assert g[("accelnet_backend_connect_failures_total", fails)] >= 1
    assert up(b.port) == 0 and up(a.port) == 1
    assert g[("accelnet_backend_eligible", fails)] == 0
    assert g[("accelnet_backend_ejected", fails)] == 1  # out for fail_timeout_ms
    promtool_clean(metrics_text(px.admin))


def test_process_figures(env):
    sim = env.sim("a", latency_ms=1, jitter=0, token_ms=0)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [sim.port]))
    for _ in range(20):
        assert complete(px.port)[0] == 200
    g1 = prom_samples(metrics_text(px.admin))
    with open(f"/proc/{px.pid}/limits") as f:
        soft = [line.split()[3] for line in f if line.startswith("Max open files")][0]
    with open(f"/proc/{px.pid}/status") as f:
        vm = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f
              if line.startswith(("VmRSS", "VmSize"))}
    assert g1[("process_max_fds", ())] == int(soft)
    assert 3 <= g1[("process_open_fds", ())] <= g1[("process_max_fds", ())]
    assert 0 < g1[("process_resident_memory_bytes", ())] <= g1[("process_virtual_memory_bytes", ())]
    assert g1[("process_virtual_memory_bytes", ())] <= 2 * vm["VmSize"]
    assert g1[("process_cpu_seconds_total", ())] > 0
    for _ in range(20):
        assert complete(px.port)[0] == 200
    g2 = prom_samples(metrics_text(px.admin))
    assert g2[("process_cpu_seconds_total", ())] >= g1[("process_cpu_seconds_total", ())]
    promtool_clean(metrics_text(px.admin))


# --- docs/observability.md lists every family, with its type and labels -------------------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _documented(program):
    """{family: (type, labels)} of the rows of docs/observability.md's tables, wherever they
    are, that name a family: xfer's (accelnet_xfer_*) or the proxy's (the others)."""
    doc = open(os.path.join(ROOT, "docs", "observability.md")).read()
    out = {}
    for line in doc.splitlines():
        m = re.match(r"\| `((?:accelnet|process)_\w+)` \|", line)
        if not m or m.group(1).startswith("accelnet_xfer_") != (program == "xfer"):
            continue
        assert m.group(1) not in out, f"{m.group(1)} documented twice"
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        labels = frozenset(re.findall(r"`(\w+)`", cells[2])) - {"le"}
        out[cells[0].strip("`")] = (cells[1], labels)
    return out


def _written(text):
    """{family: (type, labels)} as a scrape shows them (a histogram's le left out)."""
    types = dict(line[7:].split(" ", 1) for line in text.splitlines() if line.startswith("# TYPE "))
    labels = {name: set() for name in types}
    for (name, pairs) in prom_samples(text):
        fam = name
        if fam not in types:
            fam = re.sub(r"_(bucket|sum|count)$", "", name)
            assert types.get(fam) == "histogram", f"{name}: a sample of no family"
        labels[fam] |= {k for k, _ in pairs if k != "le"}
    return {name: (types[name], frozenset(labels[name])) for name in types}


def _same(written, documented, what):
    missing = sorted(set(written) - set(documented))
    stale = sorted(set(documented) - set(written))
    assert not missing, f"{what}: families written but not in docs/observability.md: {missing}"
    assert not stale, f"{what}: families in docs/observability.md never written: {stale}"
    wrong = {n: (written[n], documented[n]) for n in written if written[n] != documented[n]}
    assert not wrong, f"{what}: (written, documented) type and labels differ: {wrong}"


def test_every_proxy_family_is_documented(env):
    """A proxy with every feature that adds families or labels (health checks, caps and a
    queue, spillover, hedging, named routes, authenticated tenants with token budgets and
    more than metrics.max_tenants of them, an OpenAI route read for tokens, a streamed answer,
    the access log, prices, a model with a tokenizer) under a little traffic: each family it
    writes is in the docs' tables with its type and labels, and the tables list nothing it
    does not write."""
    a = env.sim("a", latency_ms=1, jitter=0, token_ms=1, tokens=3)
    b = env.sim("b", latency_ms=1, jitter=0, token_ms=1, tokens=3)
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\nbeta sk-beta-0123456789abcdef\n")
    from test_tokenize import _tiny
    tok = env.write("tokenizer.json", json.dumps(_tiny()))
    px = env.proxy(
        "pools:\n"
        + pool_yaml("gpu", [a.port], health={"path": "/health", "interval_ms": 200},
                    extra="    queue: {max: 8, timeout_ms: 1000}\n    hedge_after_ms: 500\n")
        + _capped("spare", b.port, 4)
        + "routes:\n"
        "  - name: llm\n    match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n"
        "    spillover: {pool: spare, after_ms: 50}\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "    rate_limit: {tokens_per_minute: 100000}\n"
        "  - match: {path_prefix: /}\n    pool: spare\n    tenant_header: X-Tenant\n",
        extra=f"access_log: {{path: {os.path.join(env.dir, 'access.log')}}}\n"
              "metrics: {max_tenants: 1}\n"
              "prices: {m: {input: 0.15, output: 0.60}}\n"  # the priced models' series
              f"models: {{m: {{tokenizer: {tok}}}}}\n")  # the tokenized models' series
    auth = {"Authorization": "Bearer sk-acme-0123456789abcdef",
            "Content-Type": "application/json"}
    assert request(px.port, "POST", "/v1/completions", body=b'{"prompt":"hi","stream":true}',
                   headers=auth)[0] == 200
    assert request(px.port, "POST", "/v1/completions", body=b'{"prompt":"hi"}',
                   headers=auth)[0] == 200
    assert request(px.port, "POST", "/v1/completions", body=b'{"prompt":"hi"}',
                   headers=dict(auth, Authorization="Bearer sk-beta-0123456789abcdef"))[0] == 200
    assert request(px.port, "POST", "/v1/completions", body=b'{}')[0] == 401
    assert request(px.port, "POST", "/other", body=b'{"prompt":"hi"}',
                   headers={"X-Tenant": "t1", "Content-Type": "application/json"})[0] == 200
    text = metrics_text(px.admin)
    assert 'route="llm"' in text and 'tenant="acme"' in text and 'tenant="other"' in text, text
    _same(_written(text), _documented("proxy"), "proxy")
    promtool_clean(text)


def test_xfer_serve_metrics_documented_and_promtool_clean(env):
    """xfer serve --metrics after a transfer: promtool check metrics passes, and each family
    is in the docs' table with its type and labels."""
    from test_xfer import make_file, send, serve
    src, dst = os.path.join(env.dir, "f.bin"), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    make_file(src, 3 * 1024 * 1024 + 5)
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port},127.0.0.2:{port}", dst, metrics=f"127.0.0.1:{mport}")
    rep = send([src, f"127.0.0.1:{port},127.0.0.2:{port}", "--chunk-kib", "256"])
    assert rep["ok"] and rep["files"] == 1
    st, hdrs, body = request(mport, "GET", "/metrics")
    assert st == 200 and hdrs["content-type"] == ["text/plain; version=0.0.4"], hdrs
    text = body.decode()
    assert "\naccelnet_xfer_files_completed_total 1\n" in text, text
    _same(_written(text), _documented("xfer"), "xfer serve")
    promtool_clean(text)
