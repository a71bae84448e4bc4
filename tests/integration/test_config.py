"""The config contract as a user meets it: `accelnet check`, refusing a bad config whole,
start-up failures, and docs/config.md listing every key the build accepts."""

import os
import re
import subprocess

from harness import BIN, free_port, port_open, request, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args, timeout=20):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


def test_check_accepts_a_good_config(env):
    path = env.write("good.yaml", "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
                                  "    backends: [127.0.0.1:9101]\n")
    r = _run("check", "-c", path)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_check_reports_file_line_col(env):
    path = env.write("bad.yaml", "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
                                 "    backends:\n      - {address: 127.0.0.1:9101, wieght: 2}\n")
    r = _run("check", "-c", path)
    assert r.returncode == 2, r
    assert r.stderr.startswith(f"{path}:5:35: "), r.stderr
    assert "unknown key 'wieght'" in r.stderr and "weight" in r.stderr, r.stderr


def test_proxy_refuses_a_bad_config_whole(env):
    port = free_port()
    path = env.write("bad.yaml", f"listen: [127.0.0.1:{port}]\npools:\n  - name: a\n"
                                 "    balance: fastest\n    backends: [127.0.0.1:9101]\n")
    r = _run("proxy", "-c", path)
    assert r.returncode == 2, r
    assert re.match(re.escape(path) + r":4:14: balance: unknown policy 'fastest'", r.stderr), r.stderr
    assert not port_open(port)


def test_proxy_fails_whole_on_a_busy_port(env):
    busy = env.sim("busy")
    admin = free_port()
    port = free_port()
    path = env.write("p.yaml", f"listen: [127.0.0.1:{port}, 127.0.0.1:{busy.port}]\n"
                               f"admin: {{address: 127.0.0.1:{admin}}}\n"
                               "pools:\n  - name: a\n    backends: [127.0.0.1:9101]\n")
    r = _run("proxy", "-c", path)
    assert r.returncode == 2, r
    assert f"127.0.0.1:{busy.port} is in use by another process" in r.stderr, r.stderr
    assert not port_open(port) and not port_open(admin)


def test_missing_config_file(env):
    r = _run("check", "-c", "/nonexistent.yaml")
    assert r.returncode == 2 and "/nonexistent.yaml: cannot open" in r.stderr, r


def test_docs_list_every_key(env):
    keys = _run("check", "--keys").stdout.split()
    assert "pools.backends.weight" in keys, keys
    with open(os.path.join(ROOT, "docs", "config.md")) as f:
        doc = f.read()
    missing = [k for k in keys if f"`{k}`" not in doc]
    assert not missing, f"docs/config.md does not document: {missing}"


def test_cli_usage(env):
    r = _run("version")
    assert r.returncode == 0 and r.stdout.startswith("accelnet "), r
    r = _run("help")
    assert r.returncode == 0 and "accelnet proxy -c FILE" in r.stdout, r
    r = _run("frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr, r
    r = _run("sim", "--listen", "127.0.0.1:1", "--slots", "zero")
    assert r.returncode == 2 and "--slots" in r.stderr, r


def test_admin_endpoints(env):
    sim = env.sim("s", latency_ms=0)
    px = env.proxy("pools:\n  - name: gpu\n    backends: [127.0.0.1:%d]\n" % sim.port)
    assert request(px.port, "GET", "/x")[0] == 200
    counted = (f'accelnet_backend_responses_total{{pool="gpu",backend="127.0.0.1:{sim.port}",'
               f'class="2xx"}} 1')
    # the worker counts a response once its last bytes are written, so the client may read it
    # and ask /metrics first (seen under the sanitizer pass's load): wait for the count
    wait_until(lambda: counted in request(px.admin, "GET", "/metrics")[2].decode(),
               "the response counted")
    st, h, body = request(px.admin, "GET", "/metrics")
    assert st == 200
    text = body.decode()
    assert f'accelnet_backend_up{{pool="gpu",backend="127.0.0.1:{sim.port}"}} 1' in text, text
    assert counted in text, text
    assert request(px.admin, "GET", "/nope")[0] == 404
