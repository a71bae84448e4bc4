"""accelnet in front of an ordinary web backend: nginx serving files and small handlers."""

import hashlib
import os
import subprocess

from harness import pool_yaml, raw, request


def _setup(env, extra=""):
    ng = env.nginx("""
        location = /headers { return 200 "xff=$http_x_forwarded_for rid=$http_x_request_id conn=$http_connection proto=$http_x_forwarded_proto\\n"; }
        location = /nocontent { return 204; }
    """)
    with open(os.path.join(ng.root, "big.bin"), "wb") as f:
        f.write(os.urandom(3 * 1024 * 1024 + 17))
    with open(os.path.join(ng.root, "small.txt"), "w") as f:
        f.write("hello from nginx\n")
    px = env.proxy("pools:\n" + pool_yaml("web", [ng.port]), extra=extra)
    return ng, px


def test_nginx_files_arrive_intact(env):
    ng, px = _setup(env)
    st, h, body = request(px.port, "GET", "/big.bin")
    with open(os.path.join(ng.root, "big.bin"), "rb") as f:
        want = f.read()
    assert st == 200 and len(body) == len(want)
    assert hashlib.sha256(body).digest() == hashlib.sha256(want).digest()
    st, h, body = request(px.port, "GET", "/small.txt")
    assert st == 200 and body == b"hello from nginx\n"
    assert request(px.port, "GET", "/missing")[0] == 404


def test_nginx_head_204_304(env):
    ng, px = _setup(env)
    st, h, body = request(px.port, "HEAD", "/big.bin")
    assert st == 200 and body == b"" and h["content-length"] == [str(3 * 1024 * 1024 + 17)]
    st, h, body = request(px.port, "GET", "/nocontent")
    assert st == 204 and body == b""
    st, h, _ = request(px.port, "GET", "/small.txt")
    st, _, body = request(px.port, "GET", "/small.txt",
                          headers={"If-None-Match": h["etag"][0]})
    assert st == 304 and body == b""
    # and the connection carries on after bodiless responses
    out = raw(px.port, b"HEAD /small.txt HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /small.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 ") == 3 and out.endswith(b"hello from nginx\n"), out


def test_nginx_sees_forwarding_headers(env):
    # the client poses as a proxy in trusted_proxies, so its X-Forwarded-For is kept and
    # extended (test_security checks that an untrusted client's is replaced)
    ng, px = _setup(env, extra="trusted_proxies: [127.0.0.1]\n")
    st, h, body = request(px.port, "GET", "/headers",
                          headers={"X-Forwarded-For": "203.0.113.9", "X-Request-Id": "abc",
                                   "Connection": "keep-alive"})
    assert st == 200
    assert body == b"xff=203.0.113.9, 127.0.0.1 rid=abc conn= proto=http\n", body


def test_nginx_sees_few_connections(env):
    ng, px = _setup(env)
    out = subprocess.run(["wrk", "-t1", "-c4", "-d1s", f"http://127.0.0.1:{px.port}/small.txt"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Non-2xx" not in out.stdout, out.stdout
    with open(os.path.join(env.dir, "nginx-access.log")) as f:
        lines = f.read().splitlines()
    conns = {line.split()[0] for line in lines}
    assert len(lines) > 200, len(lines)
    assert len(conns) <= 4, (len(conns), len(lines))
