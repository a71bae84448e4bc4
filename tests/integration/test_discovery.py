"""Service discovery (issue 16): backends given by a DNS name follow the name's answer while
the proxy runs. The names are served by a dnsmasq the test starts on a free port (the
proxy's discovery.resolvers point at it; /etc/resolv.conf is never touched), the backends
are simulators on other loopback addresses (127.0.0.2, .3, ...) at one port, as an A record
gives an address, not a port."""

import http.client
import json
import os
import shutil
import signal
import socket
import threading
import time

from harness import BIN, free_port, metrics_text, prom_samples, request, status, wait_until

DNSMASQ = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"

TTL_S = 1  # --local-ttl: every answer's TTL
MIN_TTL_MS, MAX_TTL_MS, TIMEOUT_MS = 200, 2000, 500


def _port_open_on(host, port):
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class Dns:
    """A dnsmasq answering for the zone test. from its hosts file (and SRV records given as
    --srv-host lines), on 127.0.0.1:<port>."""

    def __init__(self, env, hosts, extra=(), port=None):
        assert os.path.exists(DNSMASQ), "no dnsmasq: scripts/deps.sh installs dnsmasq-base"
        self.env = env
        self.port = port or free_port()
        self.hosts = os.path.join(env.dir, "dns-hosts")
        self.extra = list(extra)
        self.set(hosts, reload=False)
        self.start()

    def start(self):
        # --keep-in-foreground, not --no-daemon: in debug mode dnsmasq serves a TCP
        # connection (a long answer's) in its only process, and answers nothing else while
        # the resolver keeps that connection open
        argv = [DNSMASQ, "--keep-in-foreground", "--log-facility=-", f"--port={self.port}", "--listen-address=127.0.0.1",
                "--bind-interfaces", "--no-resolv", "--no-hosts", "--conf-file=/dev/null",
                "--pid-file=", f"--addn-hosts={self.hosts}", f"--local-ttl={TTL_S}",
                "--local=/test/", "--user=" + ("root" if os.geteuid() == 0 else ""),
                *self.extra]
        argv = [a for a in argv if a != "--user="]
        self.proc = self.env.start(argv, "dnsmasq")
        wait_until(lambda: self.proc.poll() is None and _port_open_on("127.0.0.1", self.port),
                   "dnsmasq")

    def set(self, lines, reload=True):
        """The hosts file holds <lines> ("ADDRESS NAME"); dnsmasq reads it again (SIGHUP)."""
        with open(self.hosts, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        if reload:
            self.proc.send_signal(signal.SIGHUP)

    def stop(self):
        self.env.stop(self.proc)


def _sim_at(env, host, port, name, **opts):
    argv = [BIN, "sim", "--listen", f"{host}:{port}", "--name", name]
    for k, v in opts.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    p = env.start(argv, f"sim-{name}")
    wait_until(lambda: p.poll() is None and _port_open_on(host, port), f"sim {name}")
    return p


def _proxy(env, dns, pools, routes="", workers=2):
    port, admin = free_port(), free_port()
    text = (f"workers: {workers}\nlisten:\n  - address: 127.0.0.1:{port}\n"
            f"admin:\n  address: 127.0.0.1:{admin}\n"
            f"discovery:\n  resolvers: [127.0.0.1:{dns.port}]\n  min_ttl_ms: {MIN_TTL_MS}\n"
            f"  max_ttl_ms: {MAX_TTL_MS}\n  timeout_ms: {TIMEOUT_MS}\n"
            f"pools:\n{pools}{routes}")
    path = env.write("proxy.yaml", text)
    p = env.start([BIN, "proxy", "-c", path], "proxy")
    wait_until(lambda: p.poll() is None and _port_open_on("127.0.0.1", admin), "proxy")
    p.port, p.admin = port, admin
    return p


def _present(px, pool="gpu"):
    """The addresses of <pool>'s backends that take new requests, as /status says."""
    for p in status(px.admin)["pools"]:
        if p["name"] == pool:
            return {b["address"]: b for b in p["backends"] if b["present"]}
    raise AssertionError(f"no pool {pool}")


def _discovery(px, pool="gpu"):
    for p in status(px.admin)["pools"]:
        if p["name"] == pool:
            return p["discovery"]
    raise AssertionError(f"no pool {pool}")


# The longest a change may take to be seen, as the design promises: the answer in hand
# expires (its TTL, held within min/max_ttl_ms), the next resolution takes at most its tries
# (2) times timeout_ms, and /status is polled; doubled, as this is no speed test.
CHANGE_BOUND_S = 2 * (max(TTL_S, MIN_TTL_MS / 1000) + 2 * TIMEOUT_MS / 1000) + 5


def _completion(port, stream=False):
    body = json.dumps({"prompt": "hi", "stream": stream})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/v1/completions", body=body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        return r.status, r.getheader("x-served-by", "?"), data
    finally:
        c.close()


def test_dns_change_is_picked_up_within_ttl_with_no_errors(env):
    port = free_port()
    # "two" answers slowly (a stream of 30 tokens 50 ms apart), so requests are in flight
    # on it when it leaves the answer
    _sim_at(env, "127.0.0.2", port, "two", latency_ms=0, tokens=30, token_ms=50)
    _sim_at(env, "127.0.0.3", port, "three", latency_ms=0, token_ms=0)
    _sim_at(env, "127.0.0.4", port, "four", latency_ms=0, token_ms=0)
    dns = Dns(env, ["127.0.0.2 api.test", "127.0.0.3 api.test"])
    px = _proxy(env, dns, f"  - name: gpu\n    backends:\n"
                          f"      - {{address: api.test:{port}, discover: a, max_backends: 4}}\n")
    two, three, four = (f"127.0.0.{i}:{port}" for i in (2, 3, 4))
    wait_until(lambda: set(_present(px)) == {two, three}, "the first answer", CHANGE_BOUND_S)

    results, lock, stop = [], threading.Lock(), threading.Event()

    def load(stream):
        while not stop.is_set():
            sent = time.monotonic()
            try:
                st, by, data = _completion(px.port, stream)
            except OSError as e:
                st, by, data = repr(e), "?", b""
            with lock:
                results.append((sent, st, by, stream, data))

    threads = [threading.Thread(target=load, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    try:
        # requests of both kinds reach both backends before the change
        wait_until(lambda: {r[2] for r in list(results)} >= {"two", "three"}, "load on both")
        # streams in flight to "two" when the answer changes
        wait_until(lambda: any(r[2] == "two" for r in list(results)), "a stream on two")
        dns.set(["127.0.0.3 api.test", "127.0.0.4 api.test"])
        changed = time.monotonic()
        wait_until(lambda: set(_present(px)) == {three, four}, "the change in /status",
                   CHANGE_BOUND_S)
        seen = time.monotonic()
        wait_until(lambda: any(r[2] == "four" and r[0] > seen for r in list(results)),
                   "requests on four", CHANGE_BOUND_S)
        time.sleep(1)  # a while of load on the new set
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    errors = [r for r in results if r[1] != 200]
    assert not errors, errors[:5]
    # every stream ran to its end, those on the backend that left included
    streams_on_two = [r for r in results if r[3] and r[2] == "two"]
    assert streams_on_two, "no stream reached two"
    for r in results:
        if r[3]:
            assert r[4].rstrip().endswith(b"data: [DONE]"), r[4][-200:]
    late = [r for r in results if r[0] > seen and r[2] == "two"]
    assert not late, f"{len(late)} requests sent after two left went to it"
    assert any(r[2] == "four" for r in results)
    print(f"change seen in /status {seen - changed:.2f} s after the DNS change "
          f"(bound {CHANGE_BOUND_S:.1f} s); {len(results)} requests, 0 errors, "
          f"{len(streams_on_two)} streams on the backend that left")
    d = _discovery(px)
    assert d["answers"] >= 2 and d["dropped"] == 0, d
    samples = prom_samples(metrics_text(px.admin))
    assert samples[("accelnet_pool_discovery_answers_total", (("pool", "gpu"),))] >= 2
    # the slot that held two is drained: nothing in flight, no longer present
    slots = [b for p in status(px.admin)["pools"] for b in p["backends"]]
    assert all(b["inflight"] == 0 for b in slots), slots


def test_srv_records_give_ports_and_weights(env):
    pb, pc, pd = free_port(), free_port(), free_port()
    _sim_at(env, "127.0.0.2", pb, "b", latency_ms=0, token_ms=0)
    _sim_at(env, "127.0.0.3", pc, "c", latency_ms=0, token_ms=0)
    _sim_at(env, "127.0.0.4", pd, "d", latency_ms=0, token_ms=0)
    dns = Dns(env, ["127.0.0.2 b.test", "127.0.0.3 c.test", "127.0.0.4 d.test"], extra=[
        f"--srv-host=_api._tcp.test,b.test,{pb},0,30",
        f"--srv-host=_api._tcp.test,c.test,{pc},0,10",
        f"--srv-host=_api._tcp.test,d.test,{pd},1,10",  # a worse priority: a standby
    ])
    px = _proxy(env, dns, "  - name: gpu\n    balance: p2c\n    backends:\n"
                          "      - {address: _api._tcp.test, discover: srv}\n")
    want = {f"127.0.0.2:{pb}": 30, f"127.0.0.3:{pc}": 10}
    wait_until(lambda: set(_present(px)) == set(want), "the SRV answer", CHANGE_BOUND_S)
    assert {a: b["weight"] for a, b in _present(px).items()} == want
    served = {_completion(px.port)[1] for _ in range(20)}
    assert served <= {"b", "c"} and served, served


def test_failed_resolution_keeps_the_last_answer(env):
    port = free_port()
    _sim_at(env, "127.0.0.2", port, "two", latency_ms=0, token_ms=0)
    dns = Dns(env, ["127.0.0.2 api.test"])
    px = _proxy(env, dns, f"  - name: gpu\n    backends:\n"
                          f"      - {{address: api.test:{port}, discover: a}}\n")
    wait_until(lambda: set(_present(px)) == {f"127.0.0.2:{port}"}, "the answer",
               CHANGE_BOUND_S)
    dns.stop()
    wait_until(lambda: _discovery(px)["failures"] >= 2, "failed resolutions", CHANGE_BOUND_S * 2)
    assert set(_present(px)) == {f"127.0.0.2:{port}"}
    for _ in range(10):
        st, by, _ = _completion(px.port)
        assert (st, by) == (200, "two")
    # the resolver back, with another answer: followed again
    _sim_at(env, "127.0.0.3", port, "three", latency_ms=0, token_ms=0)
    dns.set(["127.0.0.3 api.test"], reload=False)
    dns.start()
    wait_until(lambda: set(_present(px)) == {f"127.0.0.3:{port}"}, "the new answer",
               CHANGE_BOUND_S)
    assert _completion(px.port)[:2] == (200, "three")


def test_hostile_answers_are_bounded(env):
    port = free_port()
    _sim_at(env, "127.0.0.2", port, "two", latency_ms=0, token_ms=0)
    # 300 addresses for one name (the answer goes over TCP); only max_backends are taken
    many = [f"127.0.{1 + i // 250}.{1 + i % 250} big.test" for i in range(300)]
    dns = Dns(env, many + ["127.0.0.2 api.test"])
    px = _proxy(env, dns,
                "  - name: big\n    backends:\n"
                f"      - {{address: big.test:{port}, discover: a, max_backends: 8}}\n"
                "  - name: none\n    backends:\n"
                f"      - {{address: nothing.test:{port}, discover: a}}\n"
                "  - name: gpu\n    backends:\n"
                f"      - {{address: api.test:{port}, discover: a}}\n",
                routes="routes:\n  - match: {path_prefix: /none}\n    pool: none\n"
                       "  - pool: gpu\n")
    wait_until(lambda: len(_present(px, "big")) == 8, "8 of the 300", CHANGE_BOUND_S)
    wait_until(lambda: _discovery(px, "big")["dropped"] >= 292, "the rest counted",
               CHANGE_BOUND_S)
    wait_until(lambda: _discovery(px, "none")["answers"] >= 1, "the empty answer",
               CHANGE_BOUND_S)
    assert _present(px, "none") == {}
    assert _discovery(px, "none")["failures"] == 0
    st, _, _ = request(px.port, "POST", "/none/v1/completions", body=b"{}")
    assert st == 503, st
    wait_until(lambda: _present(px, "gpu"), "gpu's answer", CHANGE_BOUND_S)
    assert _completion(px.port)[:2] == (200, "two")


def test_discovery_config_errors(env):
    cases = [
        ("{address: api.test:80, discover: mdns}", "expected a or srv"),
        ("{address: api.test, discover: a}", "NAME:PORT"),
        ("{address: _a._tcp.test:80, discover: srv}", "without a port"),
        ("{address: 'bad name!:80', discover: a}", "is not a DNS name"),
        ("{address: 127.0.0.1:80, max_backends: 4}", "max_backends but no discover"),
    ]
    for backend, why in cases:
        path = env.write("bad.yaml", "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
                                     f"    backends:\n      - {backend}\n")
        r = _run_check(path)
        assert r.returncode == 2 and r.stderr.startswith(f"{path}:") and why in r.stderr, \
            (backend, r.stderr)
    path = env.write("bad.yaml", "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
                                 "    balance: weighted-round-robin\n    backends:\n"
                                 "      - {address: api.test:80, discover: a}\n")
    r = _run_check(path)
    assert r.returncode == 2 and "fixes its backends at load" in r.stderr, r.stderr
    path = env.write("bad.yaml", "listen: [127.0.0.1:8080]\ndiscovery:\n"
                                 "  resolvers: [dns.example:53]\npools:\n  - name: a\n"
                                 "    backends: [127.0.0.1:80]\n")
    r = _run_check(path)
    assert r.returncode == 2 and f"{path}:3:" in r.stderr, r.stderr
    path = env.write("bad.yaml", "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
                                 "    backends:\n"
                                 "      - {address: api.test:80, discover: a, max_backends: 200}\n"
                                 "      - {address: b.test:80, discover: a, max_backends: 100}\n")
    r = _run_check(path)
    assert r.returncode == 2 and "at most 256" in r.stderr, r.stderr


def _run_check(path):
    import subprocess
    return subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True,
                          timeout=20)


def test_admin_api_lists_discovered_backends_and_leaves_them_to_dns(env):
    port = free_port()
    _sim_at(env, "127.0.0.2", port, "two", latency_ms=0, token_ms=0)
    dns = Dns(env, ["127.0.0.2 api.test"])
    px = _proxy(env, dns, f"  - name: gpu\n    backends:\n"
                          f"      - {{address: api.test:{port}, discover: a}}\n")
    found = f"127.0.0.2:{port}"
    wait_until(lambda: set(_present(px)) == {found}, "the answer", CHANGE_BOUND_S)
    st, _, body = request(px.admin, "GET", "/api/backends")
    listed = {b["address"]: b for b in json.loads(body)["pools"][0]["backends"]}
    assert st == 200 and listed[found]["source"] == "dns", listed
    assert len(listed) == 1, listed  # the name's empty slots are not listed
    for method, path, body in (("POST", f"/api/pools/gpu/backends/{found}/drain", None),
                               ("PATCH", f"/api/pools/gpu/backends/{found}", '{"weight": 3}'),
                               ("DELETE", f"/api/pools/gpu/backends/{found}", None)):
        st, _, data = request(px.admin, method, path, body=body)
        assert st == 409 and b"backends.discover" in data, (method, st, data)
    assert _present(px)[found]["weight"] == 1
