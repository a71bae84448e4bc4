"""SIGHUP reads certificates, keys and API keys files again (issue 12): the new ones serve at
once, connections already open carry on, a broken file changes nothing."""

import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess

from harness import BIN, free_port, pool_yaml, port_open, request, wait_until


def _cert(env, name, cn):
    key, pem = os.path.join(env.dir, name + ".key"), os.path.join(env.dir, name + ".pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", pem, "-days",
                    "2", "-subj", "/CN=" + cn, "-addext", f"subjectAltName=DNS:{cn}"],
                   check=True, capture_output=True)
    return pem, key


def test_sighup_reloads_keys_and_certificates(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    keys = env.write("keys.txt", "acme sk-first-0123456789abcdef\n")
    a_pem, a_key = _cert(env, "a", "localhost")
    b_pem, b_key = _cert(env, "b", "localhost")
    live_pem, live_key = os.path.join(env.dir, "live.pem"), os.path.join(env.dir, "live.key")
    shutil.copy(a_pem, live_pem)
    shutil.copy(a_key, live_key)
    tport, port = free_port(), free_port()
    conf = env.write("p.yaml", f"workers: 2\nlisten:\n  - address: 127.0.0.1:{tport}\n"
                     f"    tls: {{cert: {live_pem}, key: {live_key}}}\n"
                     f"  - 127.0.0.1:{port}\npools:\n" + pool_yaml("p", [sim.port]) +
                     f"routes:\n  - pool: p\n    auth: {{api_keys_file: {keys}}}\n")
    p = env.start([BIN, "proxy", "-c", conf], "proxy", wait_port=tport)
    wait_until(lambda: port_open(port), "plain port")

    def ok(key):
        return request(port, "GET", "/", headers={"X-API-Key": key})[0] == 200

    assert ok("sk-first-0123456789abcdef")
    old = http.client.HTTPSConnection("localhost", tport, timeout=10,
                                      context=ssl.create_default_context(cafile=a_pem))
    old.request("GET", "/", headers={"X-API-Key": "sk-first-0123456789abcdef"})
    assert old.getresponse().read() is not None

    # new key and new certificate
    env.write("keys.txt", "acme sk-second-0123456789abcdef\n")
    shutil.copy(b_pem, live_pem)
    shutil.copy(b_key, live_key)
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: ok("sk-second-0123456789abcdef"), "the new key")
    assert not ok("sk-first-0123456789abcdef")

    def b_served():
        c = ssl.create_default_context(cafile=b_pem)
        try:
            with c.wrap_socket(socket.create_connection(("127.0.0.1", tport), timeout=10),
                               server_hostname="localhost"):
                return True
        except ssl.SSLError:
            return False
    wait_until(b_served, "the new certificate")
    # the connection made under the old certificate carries on
    old.request("GET", "/", headers={"X-API-Key": "sk-second-0123456789abcdef"})
    r = old.getresponse()
    assert r.status == 200, r.status
    r.read()

    # a broken keys file: nothing changes, the log says why
    env.write("keys.txt", "acme\n")
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: "keys.txt:1: expected 'TENANT KEY'" in env.log(p), "the reload's error")
    assert ok("sk-second-0123456789abcdef")
    assert b_served()
    assert "sk-second" not in env.log(p)
