"""The runtime admin API (/api/ on the admin endpoint, docs/operations.md "Runtime admin API")
and `accelnet ctl`: list, add and remove backends, drain, disable and enable them, change
weights and concurrency caps, maintenance, purge, reload; each change seen at once in /status
and /metrics and kept in admin.state_file across a restart; the token; a stale, corrupt or
unwritable state file; hostile input (always a 4xx JSON error, never a crash).

Each call is made through `accelnet ctl` and, for the same call, through raw HTTP; what the
user sees (exit status, the table, the JSON, which backend answers) is what is asserted."""

import collections
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import time

from harness import (BIN, HttpBackend, complete, free_port, gated_backend, metrics_text,
                     port_open, prom_samples, request, served_by, sim_stats, status, wait_until)


def _start(env, pools, token=None, state_file=None, extra="", routes=None, name="proxy",
           ports=None):
    """A proxy with <pools> (YAML list items), every request routed to the first pool unless
    <routes>; the admin endpoint with <token> and <state_file> when given."""
    port, admin_port = ports or (free_port(), free_port())
    admin = f"admin:\n  address: 127.0.0.1:{admin_port}\n"
    if token:
        path = env.write("admin.token", token + "\n")
        os.chmod(path, 0o600)
        admin += f"  token_file: {path}\n"
    if state_file:
        admin += f"  state_file: {state_file}\n"
    first = pools.split("name:", 1)[1].split()[0]
    routes = routes or f"  - match: {{path_prefix: /}}\n    pool: {first}\n"
    text = (f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n" + admin + extra +
            "pools:\n" + pools + "routes:\n" + routes)
    p = env.start([BIN, "proxy", "-c", env.write(f"{name}.yaml", text)], name, wait_port=port)
    p.port, p.admin = port, admin_port
    wait_until(lambda: port_open(admin_port), "admin port")
    return p


def _fast(env, name):
    """A simulated backend that answers at once (one token)."""
    return env.sim(name, latency_ms=1, tokens=1, token_ms=1)


def _pool(name, sims, extra="", balance="round-robin", caps=None):
    lines = [f"  - name: {name}", f"    balance: {balance}", "    backends:"]
    for i, s in enumerate(sims):
        cap = f", max_concurrency: {caps[i]}" if caps else ""
        lines.append(f"      - {{address: 127.0.0.1:{s.port}{cap}}}")
    return "\n".join(lines) + "\n" + (extra + "\n" if extra else "")


def ctl(px, *args, token_file=None, check=None):
    """(exit status, stdout, stderr) of `accelnet ctl --admin ... ARGS`."""
    argv = [BIN, "ctl", "--admin", f"127.0.0.1:{px.admin}"]
    if token_file:
        argv += ["--token-file", token_file]
    r = subprocess.run(argv + list(args), capture_output=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    assert "Sanitizer" not in err and "runtime error" not in err, err
    if check is not None:
        assert r.returncode == check, (r.returncode, out, err)
    return r.returncode, out, err


def api(px, method, path, body=None, token=None, headers=None):
    """(status, headers, JSON answer) of one admin API call over raw HTTP."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = f"Bearer {token}"
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        h.setdefault("Content-Type", "application/json")
    st, hdrs, data = request(px.admin, method, path, body=body, headers=h)
    if st == 401:
        return st, hdrs, data
    assert hdrs["content-type"] == ["application/json"], (st, hdrs, data)
    return st, hdrs, json.loads(data)


def backends(px, pool=None, token=None):
    """{address: entry} of GET /api/backends (of pool <pool>, or all)."""
    st, _, doc = api(px, "GET", "/api/backends", token=token)
    assert st == 200, doc
    return {b["address"]: b for p in doc["pools"] if pool in (None, p["name"])
            for b in p["backends"]}


def status_backend(px, address):
    """The backend's object in /status, or None when /status does not list it."""
    for p in status(px.admin)["pools"]:
        for b in p["backends"]:
            if b["address"] == address:
                return b
    return None


def gauge(px, name, address):
    return prom_samples(metrics_text(px.admin)).get(
        (name, (("backend", address), ("pool", "gpu"))))


def addr(sim):
    return f"127.0.0.1:{sim.port}"


def test_list_through_ctl_and_http(env):
    a, b = _fast(env, "a"), _fast(env, "b")
    px = _start(env, _pool("gpu", [a, b], caps=[2, 3]))
    rc, out, _ = ctl(px, "backends", check=0)
    assert "POOL gpu (round-robin)  spare slots free: 4 of 4" in out, out
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.startswith("  127.")}
    assert rows[addr(a)][1:6] == ["config", "enabled", "1", "2", "yes"], out
    assert rows[addr(b)][4] == "3", out
    got = backends(px)
    assert got[addr(a)] == {"address": addr(a), "source": "config", "state": "enabled",
                            "weight": 1, "max_concurrency": 2, "up": True, "inflight": 0,
                            "present": True}, got
    rc, out, _ = ctl(px, "--json", "backends", check=0)
    assert json.loads(out)["pools"][0]["name"] == "gpu"
    # the four empty spare slots are no backends: not in /status, not in /metrics
    assert [x["address"] for x in status(px.admin)["pools"][0]["backends"]] == \
        [addr(a), addr(b)]
    assert "spare" not in metrics_text(px.admin)
    env.finish()


def test_add_serves_and_shows_then_remove(env):
    a, b, c = _fast(env, "a"), _fast(env, "b"), _fast(env, "c")
    px = _start(env, _pool("gpu", [a]))
    rc, out, _ = ctl(px, "add", "gpu", addr(b), "--weight", "2", "--max-concurrency", "5",
                     check=0)
    assert out.startswith(f"add: {addr(b)}: state enabled, weight 2, max_concurrency 5"), out
    st, _, doc = api(px, "POST", "/api/pools/gpu/backends", {"address": addr(c)})
    assert st == 201 and doc["backend"]["source"] == "api", doc
    # at once in /status and /metrics, and serving
    assert status_backend(px, addr(b))["weight"] == 2
    assert status_backend(px, addr(b))["max_concurrency"] == 5
    assert status_backend(px, addr(c))["weight"] == 1
    assert gauge(px, "accelnet_backend_weight", addr(b)) == 2
    assert gauge(px, "accelnet_backend_slots", addr(b)) == 5
    seen = collections.Counter(served_by(complete(px.port)[1]) for _ in range(12))
    assert set(seen) == {"a", "b", "c"}, seen
    # the same address twice: 409
    rc, _, err = ctl(px, "add", "gpu", addr(b), check=1)
    assert "HTTP 409" in err and "already" in err, err
    # remove: through ctl and through DELETE
    rc, out, _ = ctl(px, "remove", "gpu", addr(b), check=0)
    st, _, doc = api(px, "DELETE", f"/api/pools/gpu/backends/{addr(c)}")
    assert st == 200 and doc["backend"]["state"] in ("removing", "removed"), doc
    seen = collections.Counter(served_by(complete(px.port)[1]) for _ in range(6))
    assert set(seen) == {"a"}, seen
    # an added backend is gone once its last request ended; its slot is free again
    wait_until(lambda: status_backend(px, addr(b)) is None, "removed backend leaves /status")
    assert addr(c) not in backends(px)
    assert ctl(px, "backends")[1].count("spare slots free: 4 of 4") == 1
    env.finish()


def test_remove_drains_before_the_slot_frees(env):
    # <slow> holds its request until the test opens its gate: its slot stays busy through the
    # three ctl commands below however long a loaded machine takes (1.5 s of latency did not)
    a, slow, c = _fast(env, "a"), gated_backend(env), _fast(env, "c")
    px = _start(env, _pool("gpu", [a], extra="    spare_backends: 1"))
    ctl(px, "add", "gpu", addr(slow), check=0)
    ctl(px, "drain", "gpu", addr(a), check=0)  # so the next request goes to <slow>
    done = {}
    t = threading.Thread(target=lambda: done.update(r=complete(px.port)))
    t.start()
    wait_until(lambda: backends(px)[addr(slow)]["inflight"] == 1, "a request in flight")
    ctl(px, "enable", "gpu", addr(a), check=0)
    ctl(px, "remove", "gpu", addr(slow), check=0)
    assert backends(px)[addr(slow)]["state"] == "removing"
    # its only slot is still draining: no room for another
    rc, _, err = ctl(px, "add", "gpu", addr(c), check=1)
    assert "HTTP 409" in err and "no free slot" in err, err
    slow.gate.set()
    t.join()
    st, hdrs, _ = done["r"]
    assert st == 200 and slow.order == [None]  # the in-flight request finished, on <slow>
    wait_until(lambda: addr(slow) not in backends(px), "the slot frees")
    ctl(px, "add", "gpu", addr(c), check=0)
    assert served_by(complete(px.port)[1]) in ("a", "c")
    env.finish()


def _load(px, n_threads, stop, results):
    def run():
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                st, hdrs, _ = complete(px.port)
                results.append((t0, st, served_by(hdrs)))
            except OSError as e:
                results.append((t0, str(e), None))
    threads = [threading.Thread(target=run) for _ in range(n_threads)]
    for t in threads:
        t.start()
    return threads


def test_drain_under_load(env):
    a = env.sim("a", latency_ms=30, tokens=1, token_ms=1, slots=16)
    b = env.sim("b", latency_ms=30, tokens=1, token_ms=1, slots=16)
    px = _start(env, _pool("gpu", [a, b]))
    stop, results = threading.Event(), []
    threads = _load(px, 6, stop, results)
    try:
        wait_until(lambda: len(results) > 30, "load")
        rc, out, _ = ctl(px, "drain", "gpu", addr(a), check=0)
        drained_at = time.monotonic()
        assert "state draining" in out, out
        assert status_backend(px, addr(a))["eligible"] is False
        assert gauge(px, "accelnet_backend_admin_state", addr(a)) == 1
        wait_until(lambda: len([r for r in results if r[0] > drained_at]) > 40, "more load")
        wait_until(lambda: backends(px)[addr(a)]["inflight"] == 0, "in-flight ones finish")
    finally:
        stop.set()
        for t in threads:
            t.join()
    errors = [r for r in results if r[1] != 200]
    assert not errors, errors[:5]
    after = [r[2] for r in results if r[0] > drained_at]
    assert after and set(after) == {"b"}, collections.Counter(after)
    # enabled again, it serves again
    st, _, doc = api(px, "POST", f"/api/pools/gpu/backends/{addr(a)}/enable")
    assert st == 200 and doc["backend"]["state"] == "enabled", doc
    seen = collections.Counter(served_by(complete(px.port)[1]) for _ in range(6))
    assert seen["a"] and seen["b"], seen
    env.finish()


def test_disable_and_enable(env):
    a, b = _fast(env, "a"), _fast(env, "b")
    px = _start(env, _pool("gpu", [a, b]))
    rc, out, _ = ctl(px, "disable", "gpu", addr(b), check=0)
    assert "state disabled" in out, out
    assert status_backend(px, addr(b))["state"] == "disabled"
    assert gauge(px, "accelnet_backend_admin_state", addr(b)) == 2
    assert {served_by(complete(px.port)[1]) for _ in range(6)} == {"a"}
    r = subprocess.run([BIN, "top", "--admin", f"127.0.0.1:{px.admin}", "--once",
                        "--interval-ms", "100"], capture_output=True, timeout=30)
    rows = [ln.split() for ln in r.stdout.decode().splitlines() if addr(b) in ln]
    assert r.returncode == 0 and rows and rows[0][1] == "disabled", r.stdout
    st, _, doc = api(px, "PATCH", f"/api/pools/gpu/backends/{addr(a)}", {"state": "disabled"})
    assert st == 200, doc
    st, hdrs, _ = complete(px.port)
    assert st == 503 and hdrs.get("retry-after"), st  # nothing left to serve
    ctl(px, "enable", "gpu", addr(b), check=0)
    api(px, "POST", f"/api/pools/gpu/backends/{addr(a)}/enable")
    assert {served_by(complete(px.port)[1]) for _ in range(6)} == {"a", "b"}
    assert gauge(px, "accelnet_backend_admin_state", addr(b)) == 0
    env.finish()


def test_weights_change_the_split(env):
    a = env.sim("a", latency_ms=20, tokens=1, token_ms=1, slots=16)
    b = env.sim("b", latency_ms=20, tokens=1, token_ms=1, slots=16)
    px = _start(env, _pool("gpu", [a, b], balance="least-connections"))
    rc, out, _ = ctl(px, "weight", "gpu", addr(b), "7", check=0)
    assert "weight 7" in out, out
    assert gauge(px, "accelnet_backend_weight", addr(b)) == 7
    assert status_backend(px, addr(b))["weight"] == 7
    stop, results = threading.Event(), []
    threads = _load(px, 8, stop, results)
    try:
        wait_until(lambda: len(results) >= 300, "load")
    finally:
        stop.set()
        for t in threads:
            t.join()
    seen = collections.Counter(r[2] for r in results)
    assert seen["b"] >= 3 * seen["a"], seen
    # raw HTTP too; a weight out of range is refused
    st, _, doc = api(px, "PATCH", f"/api/pools/gpu/backends/{addr(b)}", {"weight": 1})
    assert st == 200 and doc["backend"]["weight"] == 1, doc
    rc, _, err = ctl(px, "weight", "gpu", addr(b), "0", check=1)
    assert "HTTP 400" in err and "weight" in err, err
    env.finish()


def test_max_concurrency_grows_wakes_queued_shrinks_keeps_inflight(env):
    a = env.sim("a", latency_ms=2500, slots=8)
    px = _start(env, _pool("gpu", [a], caps=[1],
                           extra="    queue: {max: 100, timeout_ms: 60000}"))
    res = []
    threads = [threading.Thread(target=lambda: res.append(complete(px.port)[0]))
               for _ in range(3)]
    for t in threads:
        t.start()

    def queued():
        p = status(px.admin)["pools"][0]
        return p["queue"]["length"] == 2 and p["backends"][0]["inflight"] == 1
    wait_until(queued, "one in flight, two queued")
    rc, out, _ = ctl(px, "max-concurrency", "gpu", addr(a), "3", check=0)
    assert "max_concurrency 3" in out
    # the queued ones were woken at once: nothing queued, all three sent, every one not yet
    # answered in flight (three while the first still runs; on a loaded machine the first
    # may have ended, 2.5 s after it began, before this look: then two)
    p = status(px.admin)["pools"][0]
    b = p["backends"][0]
    assert p["queue"]["length"] == 0 and b["requests"] == 3, p
    assert 3 - b["responses"]["2xx"] <= b["inflight"] <= 3, p
    assert gauge(px, "accelnet_backend_slots", addr(a)) == 3
    # shrinking strands nothing: the three in flight finish
    st, _, doc = api(px, "PATCH", f"/api/pools/gpu/backends/{addr(a)}",
                     {"max_concurrency": 1})
    assert st == 200 and doc["backend"]["max_concurrency"] == 1 and \
        doc["backend"]["inflight"] >= 2, doc
    for t in threads:
        t.join()
    assert res == [200, 200, 200], res
    env.finish()


def test_maintenance(env):
    a = env.sim("a", latency_ms=1200)
    px = _start(env, _pool("gpu", [a]))
    done = {}
    t = threading.Thread(target=lambda: done.update(r=complete(px.port)))
    t.start()
    wait_until(lambda: backends(px)[addr(a)]["inflight"] == 1, "a request in flight")
    rc, out, _ = ctl(px, "maintenance", "on", "--retry-after", "17", check=0)
    assert "maintenance on" in out and "17" in out, out
    st, hdrs, body = complete(px.port)
    assert st == 503 and hdrs["retry-after"] == ["17"], (st, hdrs)
    assert b"maintenance" in body
    assert prom_samples(metrics_text(px.admin))[("accelnet_maintenance", ())] == 1
    assert status(px.admin)["process"][0]["maintenance"] is True
    t.join()
    assert done["r"][0] == 200  # the one in flight finished
    rc, out, _ = ctl(px, "maintenance", "status", check=0)
    assert "maintenance on" in out
    st, _, doc = api(px, "POST", "/api/maintenance", {"on": False})
    assert st == 200 and doc["maintenance"] == {"on": False, "retry_after_s": 0}, doc
    assert complete(px.port)[0] == 200
    env.finish()


class Origin:
    """Answers every GET with max-age=3600 and counts the requests."""

    def __init__(self):
        self.count = collections.Counter()
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                origin.count[self.path] += 1
                body = b"x"
                self.send_response(200)
                self.send_header("Cache-Control", "max-age=3600")
                self.send_header("Cache-Tag", "t1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.http = HttpBackend(Handler)
        self.port = self.http.port


def test_purge(env):
    origin = Origin()
    env.on_cleanup.append(origin.http.close)
    pools = f"  - name: web\n    backends:\n      - {{address: 127.0.0.1:{origin.port}}}\n"
    px = _start(env, pools, extra="cache: {memory: 16MiB}\n",
                routes="  - match: {path_prefix: /}\n    pool: web\n    cache: true\n")

    def get(path):
        st, hdrs, _ = request(px.port, "GET", path, headers={"Host": "example.com"})
        assert st == 200
        return hdrs.get("cache-status", [""])[0]
    for p in ("/a", "/b", "/c"):
        get(p)
        assert get(p).startswith("accelnet; hit")
    rc, out, _ = ctl(px, "purge", "uri", "http://example.com/a", check=0)
    assert out.strip() == "purged 1", out
    assert "fwd=miss" in get("/a")
    st, _, doc = api(px, "POST", "/api/cache/purge", {"tag": "t1"})
    assert st == 200 and doc["purged"] == 3, doc
    rc, out, _ = ctl(px, "purge", "all", check=0)
    rc, _, err = ctl(px, "purge", "prefix", "no-scheme", check=1)
    assert "HTTP 400" in err, err
    st, _, doc = api(px, "POST", "/api/cache/purge", {"uri": 7})
    assert st == 400 and "string" in doc["error"], doc
    env.finish()


def test_token_required_and_browsers_refused(env):
    a, b = _fast(env, "a"), _fast(env, "b")
    px = _start(env, _pool("gpu", [a]), token="s3cret-token")
    tf = os.path.join(env.dir, "admin.token")
    st, hdrs, _ = api(px, "GET", "/api/backends")
    assert st == 401
    st, _, _ = api(px, "POST", "/api/pools/gpu/backends", {"address": addr(b)})
    assert st == 401
    st, _, _ = api(px, "POST", "/api/pools/gpu/backends", {"address": addr(b)},
                   token="wrong")
    assert st == 401
    rc, _, err = ctl(px, "backends", check=1)
    assert "401" in err and "--token-file" in err, err
    rc, _, err = ctl(px, "add", "gpu", addr(b), token_file=tf, check=0)
    assert backends(px, token="s3cret-token")[addr(b)]["source"] == "api"
    # without a token, a change from a browser is refused (it could be any web page's)
    open_px = _start(env, _pool("gpu", [a]), name="proxy2")
    for h in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        st, _, doc = api(open_px, "POST", f"/api/pools/gpu/backends/{addr(a)}/drain",
                         headers=h)
        assert st == 403 and "browsers" in doc["error"], doc
    assert backends(open_px)[addr(a)]["state"] == "enabled"
    # and a name in Host is refused (DNS rebinding), as for every admin request
    st, _, _ = request(open_px.admin, "GET", "/api/backends", headers={"Host": "evil.example"})
    assert st == 403
    env.finish()


def test_state_file_survives_restart(env):
    a, b, c = _fast(env, "a"), _fast(env, "b"), _fast(env, "c")
    state = os.path.join(env.dir, "state.json")
    pools = _pool("gpu", [a, b])
    px = _start(env, pools, state_file=state)
    ports = (px.port, px.admin)
    ctl(px, "add", "gpu", addr(c), "--weight", "3", "--max-concurrency", "4", check=0)
    ctl(px, "weight", "gpu", addr(a), "5", check=0)
    ctl(px, "drain", "gpu", addr(b), check=0)
    ctl(px, "maintenance", "on", "--retry-after", "9", check=0)
    ctl(px, "maintenance", "off", check=0)
    doc = json.load(open(state))
    assert doc["version"] == 1 and {e["address"] for e in doc["pools"]["gpu"]} == \
        {addr(a), addr(b), addr(c)}, doc
    assert not [f for f in os.listdir(env.dir) if f.endswith(".tmp")]
    env.stop(px)
    px = _start(env, pools, state_file=state, name="proxy-again", ports=ports)
    got = backends(px)
    assert got[addr(c)]["weight"] == 3 and got[addr(c)]["max_concurrency"] == 4 and \
        got[addr(c)]["source"] == "api", got
    assert got[addr(a)]["weight"] == 5 and got[addr(a)]["state"] == "enabled", got
    assert got[addr(b)]["state"] == "draining" and got[addr(b)]["weight"] == 1, got
    assert status_backend(px, addr(c))["weight"] == 3
    assert {served_by(complete(px.port)[1]) for _ in range(8)} == {"a", "c"}
    # a config backend removed stays removed; enabling b drops it from the file
    ctl(px, "remove", "gpu", addr(a), check=0)
    ctl(px, "enable", "gpu", addr(b), check=0)
    entries = {e["address"]: e for e in json.load(open(state))["pools"]["gpu"]}
    assert entries[addr(a)]["removed"] is True and addr(b) not in entries, entries
    env.stop(px)
    px = _start(env, pools, state_file=state, name="proxy-third", ports=ports)
    assert backends(px)[addr(a)]["state"] == "removed"
    assert {served_by(complete(px.port)[1]) for _ in range(8)} == {"b", "c"}
    env.finish()


def test_stale_state_file_is_applied_where_it_can(env):
    a, b = _fast(env, "a"), _fast(env, "b")
    state = env.write("state.json", json.dumps({
        "version": 1, "maintenance": 0,
        "pools": {
            "gone": [{"address": "127.0.0.1:1", "source": "api"}],
            "gpu": [{"address": "127.0.0.1:2", "source": "config", "weight": 4},
                    {"address": addr(a), "source": "config", "weight": 6},
                    {"address": addr(b), "source": "api", "weight": 2}]}}))
    px = _start(env, _pool("gpu", [a]), state_file=state)
    got = backends(px)
    assert got[addr(a)]["weight"] == 6 and got[addr(b)]["weight"] == 2, got
    assert "127.0.0.1:2" not in got
    log = env.log(px)
    assert "pool gone is not in the config any more" in log, log
    assert "has no backend 127.0.0.1:2 in the config any more: skipped" in log, log
    env.finish()


def test_corrupt_state_file_is_set_aside(env):
    a = _fast(env, "a")
    for i, text in enumerate(['{"version": 1, "pools": {"gpu": [{"address": 5}]}}',
                              "\x00garbage{{{", '{"version": 2}', "[]"]):
        state = env.write(f"state{i}.json", text)
        px = _start(env, _pool("gpu", [a]), state_file=state, name=f"proxy{i}")
        assert complete(px.port)[0] == 200  # it started, from its config
        log = env.log(px)
        assert f"state file {state}" in log and f"kept as {state}.bad" in log, log
        assert os.path.exists(state + ".bad") and not os.path.exists(state)
        # and the next change writes a fresh file
        ctl(px, "weight", "gpu", addr(a), "2", check=0)
        assert json.load(open(state))["pools"]["gpu"][0]["weight"] == 2
        env.stop(px)
    env.finish()


def test_unwritable_state_file_says_so(env):
    a = _fast(env, "a")
    d = os.path.join(env.dir, "statedir")
    os.mkdir(d)
    px = _start(env, _pool("gpu", [a]), state_file=os.path.join(d, "state.json"))
    ctl(px, "weight", "gpu", addr(a), "2", check=0)
    shutil.rmtree(d)
    rc, out, err = ctl(px, "weight", "gpu", addr(a), "3", check=1)
    assert "weight 3" in out and "not kept" in err and "state file" in err, (out, err)
    st, _, doc = api(px, "PATCH", f"/api/pools/gpu/backends/{addr(a)}", {"weight": 4})
    assert st == 200 and doc["persisted"] is False and "old file is kept" in \
        doc["persist_error"], doc
    assert backends(px)[addr(a)]["weight"] == 4  # it holds, though not kept
    env.finish()


def test_reload_through_the_api_keeps_the_changes(env):
    a, b = _fast(env, "a"), _fast(env, "b")
    pools = _pool("gpu", [a])
    px = _start(env, pools)
    ctl(px, "add", "gpu", addr(b), "--weight", "3", check=0)
    ctl(px, "drain", "gpu", addr(a), check=0)
    rc, out, _ = ctl(px, "reload", check=0)
    assert out.strip() == "reloaded", out
    # the new configuration's runtime has the API's changes (no state file needed)
    got = backends(px)
    assert got[addr(b)]["source"] == "api" and got[addr(b)]["weight"] == 3, got
    assert got[addr(a)]["state"] == "draining", got
    assert {served_by(complete(px.port)[1]) for _ in range(6)} == {"b"}
    # and over SIGHUP too
    px.send_signal(signal.SIGHUP)
    wait_until(lambda: "configuration generation 2" in env.log(px), "the second reload")
    assert backends(px)[addr(b)]["weight"] == 3
    # a config it refuses: 400 with FILE:LINE:COL, and the running one stays
    path = os.path.join(env.dir, "proxy.yaml")
    with open(path, "a") as f:
        f.write("bogus_key: 1\n")
    rc, _, err = ctl(px, "reload", check=1)
    assert "HTTP 400" in err and "proxy.yaml:" in err, err
    st, _, doc = api(px, "POST", "/api/reload")
    assert st == 400 and "bogus_key" in doc["error"], doc
    assert backends(px)[addr(b)]["weight"] == 3
    env.finish()


def test_hostile_inputs(env):
    a = _fast(env, "a")
    px = _start(env, _pool("gpu", [a]) + _pool("wrr", [a], balance="weighted-round-robin"))
    be = f"/api/pools/gpu/backends/{addr(a)}"
    cases = [
        ("POST", "/api/pools/nope/backends", {"address": "127.0.0.1:9"}, 404, "no pool"),
        ("POST", "/api/pools/gpu/backends", {"address": "example.com:80"}, 400, "numeric"),
        ("POST", "/api/pools/gpu/backends", {"address": "127.0.0.1"}, 400, "IP:PORT"),
        ("POST", "/api/pools/gpu/backends", {"address": "127.0.0.1:0"}, 400, "port"),
        ("POST", "/api/pools/gpu/backends", {"address": "127.0.0.1:99999"}, 400, "port"),
        ("POST", "/api/pools/gpu/backends", {"address": "[::1:80"}, 400, "IPV6"),
        ("POST", "/api/pools/gpu/backends", {"address": 5}, 400, "address"),
        ("POST", "/api/pools/gpu/backends", {}, 400, "address"),
        ("POST", "/api/pools/gpu/backends", {"address": "127.0.0.1:9", "weight": 0}, 400,
         "weight"),
        ("POST", "/api/pools/gpu/backends", {"address": "127.0.0.1:9", "weight": "2"}, 400,
         "weight"),
        ("POST", "/api/pools/gpu/backends", {"address": "127.0.0.1:9",
                                             "max_concurrency": -1}, 400, "max_concurrency"),
        ("POST", "/api/pools/gpu/backends", {"address": "127.0.0.1:9", "x": 1}, 400,
         "unknown key"),
        ("POST", "/api/pools/gpu/backends", "[1, 2", 400, "not JSON"),
        ("POST", "/api/pools/gpu/backends", "[1, 2]", 400, "object"),
        ("POST", "/api/pools/gpu/backends", '{"address": "a", "address": "b"}', 400,
         "not JSON"),
        ("POST", "/api/pools/gpu/backends", "[" * 5000, 400, "not JSON"),
        ("POST", "/api/pools/gpu/backends", "\xff\xfe", 400, "not JSON"),
        ("PATCH", be, {"weight": 1e9}, 400, "weight"),
        ("PATCH", be, {"weight": 2.5}, 400, "weight"),
        ("PATCH", be, {"state": "broken"}, 400, "state"),
        ("PATCH", be, {}, 400, "give"),
        ("PATCH", "/api/pools/gpu/backends/127.0.0.1:1", {"weight": 2}, 404, "no backend"),
        ("PATCH", f"/api/pools/wrr/backends/{addr(a)}", {"weight": 2}, 409, "fixes"),
        ("POST", "/api/pools/wrr/backends", {"address": "127.0.0.1:9"}, 409, "no free slot"),
        ("POST", be + "/explode", None, 404, "no such"),
        ("POST", be + "/drain", {"x": 1}, 400, "unknown key"),
        ("GET", be + "/drain", None, 405, "not allowed"),
        ("DELETE", "/api/backends", None, 405, "not allowed"),
        ("POST", "/api/pools/%zz/backends", {"address": "127.0.0.1:9"}, 400, "percent"),
        ("POST", "/api/pools/%00/backends", {"address": "127.0.0.1:9"}, 400, "control"),
        ("POST", "/api/pools/" + "p" * 300 + "/backends", {"address": "1.2.3.4:5"}, 400,
         "too long"),
        ("POST", "/api/maintenance", {"on": "yes"}, 400, "on"),
        ("POST", "/api/maintenance", {"on": True, "retry_after_s": 0}, 400, "retry_after_s"),
        ("POST", "/api/cache/purge", {"all": True}, 404, "no response cache"),
        ("GET", "/api/", None, 404, "no such"),
        ("GET", "/api/backends/../../status", None, 404, "no such"),
    ]
    for method, path, body, want, words in cases:
        st, _, doc = api(px, method, path, body)
        assert st == want and words in doc["error"], (method, path, body, st, doc)
    # a body over the endpoint's limit
    st, _, _ = request(px.admin, "POST", "/api/pools/gpu/backends",
                       body=json.dumps({"address": "1.2.3.4:5", "pad": "x" * 40000}))
    assert st == 413
    # removed twice, enable a removed one, DNS-found ones
    ctl(px, "remove", "gpu", addr(a), check=0)
    rc, _, err = ctl(px, "remove", "gpu", addr(a), check=1)
    assert "HTTP 409" in err and "removed already" in err, err
    rc, _, err = ctl(px, "enable", "gpu", addr(a), check=1)
    assert "add it again" in err, err
    ctl(px, "add", "gpu", addr(a), check=0)  # a removed config backend comes back
    assert backends(px, "gpu")[addr(a)]["source"] == "config"
    # usage errors are exit 2, the endpoint unreachable exit 1
    assert ctl(px, "weight", "gpu", addr(a), "x")[0] == 2
    assert ctl(px, "frobnicate")[0] == 2
    assert ctl(px, "maintenance", "sideways")[0] == 2
    r = subprocess.run([BIN, "ctl", "--admin", f"127.0.0.1:{free_port()}", "backends"],
                       capture_output=True, timeout=30)
    assert r.returncode == 1 and b"cannot reach" in r.stderr, r.stderr
    assert status(px.admin)["pools"]  # still serving
    env.finish()


def test_spare_backends_config(env):
    a = _fast(env, "a")
    bad = ("workers: 1\nlisten:\n  - address: 127.0.0.1:1\npools:\n  - name: w\n"
           "    balance: weighted-round-robin\n    spare_backends: 2\n    backends:\n"
           f"      - {{address: 127.0.0.1:{a.port}}}\nroutes:\n  - match: {{path_prefix: /}}\n"
           "    pool: w\n")
    r = subprocess.run([BIN, "check", "-c", env.write("bad.yaml", bad)], capture_output=True,
                       timeout=30)
    assert r.returncode == 2 and b"spare_backends" in r.stderr and b":7:" in r.stderr, r.stderr
    # backends listing models: an added one would list none and take every unlisted model
    models = bad.replace("balance: weighted-round-robin", "balance: round-robin").replace(
        f"{{address: 127.0.0.1:{a.port}}}", f"{{address: 127.0.0.1:{a.port}, models: [base]}}")
    r = subprocess.run([BIN, "check", "-c", env.write("models.yaml", models)],
                       capture_output=True, timeout=30)
    assert r.returncode == 2 and b"list their models" in r.stderr and b":7:" in r.stderr, \
        r.stderr
    ok = models.replace("    spare_backends: 2\n", "")
    r = subprocess.run([BIN, "check", "-c", env.write("ok.yaml", ok)], capture_output=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr  # not given: none kept for such a pool
    px = _start(env, _pool("gpu", [a], extra="    spare_backends: 0"))
    rc, _, err = ctl(px, "add", "gpu", "127.0.0.1:9", check=1)
    assert "no free slot" in err and "spare_backends" in err, err
    env.finish()
