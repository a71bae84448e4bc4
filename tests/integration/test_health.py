"""The proxy's own health (issue 26): GET /healthz (the process answers) and GET /readyz
(it should be sent traffic) on the admin endpoint, with and without backends up, with and
without the admin token, while draining; and the Kubernetes snippet in deploy/kubernetes/
that probes them parses and holds a config that `accelnet check` accepts."""

import json
import os
import signal
import socket
import subprocess
import threading

import yaml

from harness import (BIN, complete, echo_backend, free_port, gated_backend, pool_yaml, request,
                     wait_until)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "deploy", "kubernetes", "accelnet.yaml")
HEALTH = {"path": "/health", "interval_ms": 50, "fall": 1, "rise": 1}


def _dead_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: every connect is refused
    return port


def _probe(admin, path, headers=None):
    status, hdrs, body = request(admin, "GET", path, headers=headers)
    return status, body.decode(), hdrs


def test_healthz_and_readyz_with_backends_up_and_down(env):
    """Both pools have a backend up: /healthz 200 "ok", /readyz 200 "ready". The one backend
    of pool "b" stops: /readyz turns 503 and names pool b (and not a), /healthz stays 200;
    it comes back: /readyz is 200 again. Neither is ever forwarded, nor cached by anyone."""
    a = env.sim("a", latency_ms=1, jitter=0)
    b = env.sim("b", latency_ms=1, jitter=0)
    bport = b.port
    px = env.proxy("pools:\n" + pool_yaml("a", [a.port], health=HEALTH)
                   + pool_yaml("b", [bport], health=HEALTH)
                   + "routes:\n  - match: {path_prefix: /}\n    pool: a\n")
    assert _probe(px.admin, "/healthz")[:2] == (200, "ok\n")
    wait_until(lambda: _probe(px.admin, "/readyz")[0] == 200, "ready with both pools up")
    status, body, hdrs = _probe(px.admin, "/readyz")
    assert (status, body) == (200, "ready\n")
    assert hdrs["cache-control"] == ["no-store"] and hdrs["content-type"] == ["text/plain"]
    assert request(px.admin, "HEAD", "/readyz")[0] == 200
    env.stop(b)
    wait_until(lambda: _probe(px.admin, "/readyz")[0] == 503, "not ready once b is down")
    status, body, _ = _probe(px.admin, "/readyz")
    assert "pool b has 0 backends up" in body and "pool a" not in body, body
    assert body.endswith(" (probes.min_up: 1)\n"), body
    assert _probe(px.admin, "/healthz")[:2] == (200, "ok\n")
    # the data listener forwards /readyz like any path: it is the admin endpoint's
    assert complete(px.port, path="/readyz")[0] == 200
    b2 = env.start([BIN, "sim", "--listen", f"127.0.0.1:{bport}", "--name", "b2"], "sim-b2",
                   wait_port=bport)
    assert b2.poll() is None
    wait_until(lambda: _probe(px.admin, "/readyz")[0] == 200, "ready once b is back")
    assert request(px.admin, "POST", "/readyz")[0] == 405


def test_readyz_without_any_backend_up_from_start(env):
    """A pool whose only backend refuses every connection: not ready from the start, while
    alive; probes.min_up: 0 makes readiness not depend on backends."""
    px = env.proxy("pools:\n" + pool_yaml("gpu", [_dead_port()], health=HEALTH)
                   + "routes:\n  - match: {path_prefix: /}\n    pool: gpu\n")
    wait_until(lambda: _probe(px.admin, "/readyz")[0] == 503, "not ready")
    assert "pool gpu has 0 backends up" in _probe(px.admin, "/readyz")[1]
    assert _probe(px.admin, "/healthz")[0] == 200
    env.stop(px)
    port, admin = free_port(), free_port()
    cfg = env.write("zero.yaml", f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                    f"admin:\n  address: 127.0.0.1:{admin}\nprobes: {{min_up: 0}}\n"
                    "pools:\n" + pool_yaml("gpu", [_dead_port()], health=HEALTH)
                    + "routes:\n  - match: {path_prefix: /}\n    pool: gpu\n")
    env.start([BIN, "proxy", "-c", cfg], "proxy-zero", wait_port=admin)
    assert _probe(admin, "/readyz")[:2] == (200, "ready\n")


def test_probes_need_no_token_and_tell_pools_only_with_it(env):
    """With admin.token_file, /status without the token is 401, but the probes answer
    without it (and with any Host: they hold no data), and an unauthenticated 503 says how
    many pools are short, not which; with the token it names them."""
    token = env.write("admin.token", "s3cret-token-0123456789\n")
    os.chmod(token, 0o600)
    port, admin = free_port(), free_port()
    cfg = env.write("tok.yaml", f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                    f"admin:\n  address: 127.0.0.1:{admin}\n  token_file: {token}\n"
                    "pools:\n" + pool_yaml("secretpool", [_dead_port()], health=HEALTH)
                    + "routes:\n  - match: {path_prefix: /}\n    pool: secretpool\n")
    env.start([BIN, "proxy", "-c", cfg], "proxy", wait_port=admin)
    assert request(admin, "GET", "/status")[0] == 401
    status, body, hdrs = _probe(admin, "/healthz", {"Host": "probe.example"})
    assert (status, body) == (200, "ok\n")
    assert hdrs.get("connection") == ["close"], hdrs  # one probe per connection without it
    wait_until(lambda: _probe(admin, "/readyz")[0] == 503, "not ready")
    status, body, _ = _probe(admin, "/readyz", {"Host": "probe.example"})
    assert body == ("not ready: 1 pool with fewer than 1 backend up (send the admin token to "
                    "see which)\n"), body
    assert "secretpool" not in body, body
    status, body, _ = _probe(admin, "/readyz",
                             {"Authorization": "Bearer s3cret-token-0123456789"})
    assert status == 503 and "pool secretpool has 0 backends up" in body, body
    assert "connection" not in _probe(admin, "/healthz",
                                      {"Authorization": "Bearer s3cret-token-0123456789"})[2]
    # a wrong token is no token: counted, not named
    assert "secretpool" not in _probe(admin, "/readyz", {"Authorization": "Bearer nope"})[1]


def test_readyz_is_503_while_draining_and_healthz_200(env):
    """SIGTERM with a request in flight: the proxy drains (the request still finishes), and
    meanwhile the admin endpoint still answers: /readyz 503 "draining", /healthz 200."""
    be = gated_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [be.port])
                   + "routes:\n  - match: {path_prefix: /}\n    pool: gpu\n",
                   extra="timeouts: {shutdown_ms: 30000}\n")
    assert _probe(px.admin, "/readyz")[0] == 200
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", complete(px.port)))
    t.start()
    wait_until(lambda: len(be.order) == 1, "the request at the backend")
    px.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining" in env.log(px), "the proxy draining")
    status, body, _ = _probe(px.admin, "/readyz")
    assert (status, body) == (503, "not ready: draining to exit\n")
    assert _probe(px.admin, "/healthz")[:2] == (200, "ok\n")
    be.gate.set()
    t.join(30)
    assert out["r"][0] == 200
    assert px.wait(30) == 0


def test_data_listener_answers_probes_with_probes_listeners(env):
    """probes.listeners: GET /healthz and /readyz on the data listener are the proxy's own
    (JSON, never forwarded, whatever the routes say), readiness counting the short pools
    without naming them; any other method on those paths, and every path without the key,
    goes to the backend as before."""
    be = echo_backend(env)
    dead = _dead_port()
    px = env.proxy("pools:\n" + pool_yaml("live", [be.port])
                   + pool_yaml("gpu", [dead], health=HEALTH)
                   + "routes:\n  - match: {path_prefix: /}\n    pool: live\n",
                   extra="probes: {listeners: true}\n")
    st, h, body = request(px.port, "GET", "/healthz")
    assert (st, json.loads(body)) == (200, {"status": "ok"}), body
    assert h["content-type"] == ["application/json"] and h["cache-control"] == ["no-store"], h
    wait_until(lambda: request(px.port, "GET", "/readyz")[0] == 503, "not ready: gpu is down")
    st, h, body = request(px.port, "GET", "/readyz")
    assert json.loads(body) == {"status": "not ready",
                                "reason": "1 pool with fewer than 1 backend up"}, body
    assert be.count == 0  # none of it forwarded
    st, _, body = request(px.port, "POST", "/readyz", body=b"{}")
    assert st == 200 and body.startswith(b"POST /readyz HTTP/1.1"), body  # routed
    assert be.count == 1
    env.stop(px)
    px = env.proxy("pools:\n" + pool_yaml("live", [be.port])
                   + "routes:\n  - match: {path_prefix: /}\n    pool: live\n")
    st, _, body = request(px.port, "GET", "/healthz")
    assert st == 200 and body.startswith(b"GET /healthz HTTP/1.1"), body
    assert be.count == 2


def test_kubernetes_snippet_parses_and_its_config_checks(env):
    """deploy/kubernetes/accelnet.yaml: valid YAML documents of the kinds it says, whose
    Deployment probes /healthz (liveness) and /readyz (readiness) on the admin port the
    config listens on, and whose config passes `accelnet check` (the token path pointed at
    a real file)."""
    with open(K8S) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ConfigMap", "Secret", "Deployment", "Service"}, kinds.keys()
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"] == "accelnet" or d["kind"] == "Secret"
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    conf = yaml.safe_load(kinds["ConfigMap"]["data"]["proxy.yaml"])
    assert conf["probes"] == {"min_up": 1}, conf
    assert conf["admin"]["address"].endswith(f":{ports['admin']}")
    assert conf["listen"][0]["address"].endswith(f":{ports['http']}")
    grace_ms = pod["terminationGracePeriodSeconds"] * 1000
    assert conf["timeouts"]["shutdown_ms"] < grace_ms
    token = env.write("admin.token", "t0ken\n")
    os.chmod(token, 0o600)
    text = kinds["ConfigMap"]["data"]["proxy.yaml"].replace(
        conf["admin"]["token_file"], token)
    path = env.write("k8s.yaml", text)
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
