"""HTTP/2 over TLS (issue 29, step 2): ALPN "h2" on TLS listeners, "http/1.1" kept and chosen
by a client that offers only it; listen[].http2: false offers http/1.1 alone. Clients: curl
--http2 and Python's h2 over ssl."""

import json
import os
import socket
import ssl
import subprocess

import h2.config
import h2.connection
import h2.events

from harness import BIN, free_port, lenient_backend, pool_yaml, read_all


def _cert(env):
    key, pem = os.path.join(env.dir, "h2.key"), os.path.join(env.dir, "h2.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", pem, "-days",
                    "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return pem, key


def tls_proxy(env, backend_port, http2=None, extra=""):
    """A proxy with one TLS listener in front of <backend_port>. Returns (port, cafile)."""
    pem, key = _cert(env)
    port = free_port()
    text = (f"listen:\n  - address: 127.0.0.1:{port}\n"
            f"    tls: {{cert: {pem}, key: {key}}}\n" +
            (f"    http2: {'true' if http2 else 'false'}\n" if http2 is not None else "") +
            extra + "pools:\n" + pool_yaml("p", [backend_port]))
    path = env.write("h2tls.yaml", text)
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    return port, pem


def curl_tls(port, cafile, *args, path="/v1/completions"):
    out = subprocess.run(["curl", "-s", "--cacert", cafile, "-w",
                          "\n%{http_code} %{http_version}", *args,
                          f"https://localhost:{port}{path}"],
                         capture_output=True, timeout=30)
    body, _, tail = out.stdout.rpartition(b"\n")
    code, version = tail.decode().split()
    return int(code), version, body


def tls_socket(port, cafile, protocols):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(protocols)
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                        server_hostname="localhost")
    return s


def test_h2_over_tls_with_curl(env):
    be = lenient_backend(env)
    port, ca = tls_proxy(env, be.port)
    code, version, body = curl_tls(port, ca, "--http2", "-d", '{"model":"m","max_tokens":3}')
    assert (code, version) == (200, "2"), (code, version, body)
    seen = json.loads(body)
    assert (seen["model"], seen["max_tokens"]) == ("m", 3), seen
    assert seen["headers"]["host"] == ["localhost:%d" % port], seen["headers"]
    # a client that offers only http/1.1 gets HTTP/1.1 on the same listener
    code, version, body = curl_tls(port, ca, "--http1.1", path="/plain")
    assert (code, version) == (200, "1.1"), (code, version, body)
    assert json.loads(body)["path"] == "/plain"


def test_h2_over_tls_with_python_h2_and_alpn(env):
    be = lenient_backend(env)
    port, ca = tls_proxy(env, be.port)
    s = tls_socket(port, ca, ["h2", "http/1.1"])
    env.on_cleanup.append(s.close)
    assert s.selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sids = []
    for i in range(10):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "GET"), (":path", "/s%d" % i),
                                (":authority", "localhost"), (":scheme", "https")],
                          end_stream=True)
        sids.append(sid)
    s.sendall(conn.data_to_send())
    status, body, ended = {}, {}, set()
    while len(ended) < len(sids):
        data = s.recv(65536)
        assert data, "the proxy closed the connection"
        for e in conn.receive_data(data):
            if isinstance(e, h2.events.ResponseReceived):
                status[e.stream_id] = dict(e.headers)[b":status"]
            elif isinstance(e, h2.events.DataReceived):
                body[e.stream_id] = body.get(e.stream_id, b"") + e.data
                conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamEnded):
                ended.add(e.stream_id)
        out = conn.data_to_send()
        if out:
            s.sendall(out)
    for i, sid in enumerate(sids):
        assert status[sid] == b"200", (sid, status[sid])
        assert json.loads(body[sid])["path"] == "/s%d" % i


def test_h2_over_tls_http11_only_client_gets_http11(env):
    be = lenient_backend(env)
    port, ca = tls_proxy(env, be.port)
    s = tls_socket(port, ca, ["http/1.1"])
    env.on_cleanup.append(s.close)
    assert s.selected_alpn_protocol() == "http/1.1"
    s.sendall(b"GET /one HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    got = read_all(s)
    assert got.startswith(b"HTTP/1.1 200"), got[:80]
    # and one that offers no ALPN at all
    s2 = tls_socket(port, ca, [])
    env.on_cleanup.append(s2.close)
    assert s2.selected_alpn_protocol() is None
    s2.sendall(b"GET /two HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert s2.recv(65536).startswith(b"HTTP/1.1 200")


def test_h2_over_tls_off_by_config_offers_http11_only(env):
    be = lenient_backend(env)
    port, ca = tls_proxy(env, be.port, http2=False)
    s = tls_socket(port, ca, ["h2", "http/1.1"])
    env.on_cleanup.append(s.close)
    assert s.selected_alpn_protocol() == "http/1.1"
    code, version, _ = curl_tls(port, ca, "--http2", path="/x")
    assert (code, version) == (200, "1.1"), (code, version)


def test_h2_over_tls_without_a_preface_is_closed(env):
    """A client that chose h2 by ALPN and then speaks HTTP/1.1 is closed, never read as an
    HTTP/1.1 request (RFC 9113 3.4: the preface must come first)."""
    be = lenient_backend(env)
    port, ca = tls_proxy(env, be.port)
    s = tls_socket(port, ca, ["h2"])
    env.on_cleanup.append(s.close)
    assert s.selected_alpn_protocol() == "h2"
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    got = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except (ssl.SSLError, OSError):
        pass
    assert not got.startswith(b"HTTP/1.1"), got[:80]


def test_h2_over_tls_bodies_both_ways(env):
    """A 1 MB request body up and a large streamed response down over TLS, several streams at
    once: the TLS writes that take part of a frame go on from where they stopped."""
    sim = env.sim("s", latency_ms=0, token_ms=0)
    pem, key = _cert(env)
    port = free_port()
    path = env.write("h2tls_big.yaml",
                     f"listen:\n  - address: 127.0.0.1:{port}\n"
                     f"    tls: {{cert: {pem}, key: {key}}}\n"
                     "limits:\n  body_buffer_bytes: 64KiB\npools:\n" +
                     pool_yaml("p", [sim.port]))
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    big = os.path.join(env.dir, "big.bin")
    with open(big, "wb") as f:
        f.write(b"x" * 1000000)
    code, version, body = curl_tls(port, pem, "--http2", "--data-binary", "@" + big,
                                   path="/upload")
    assert (code, version) == (200, "2"), (code, version, body[:200])
    assert b"(1000000 body bytes)" in body, body[:200]
    code, version, body = curl_tls(port, pem, "--http2", "-N", "-d",
                                   '{"prompt":"x","max_tokens":2000,"stream":true}')
    assert (code, version) == (200, "2"), (code, version)
    assert body.count(b"data: ") == 2001, body[-200:]


def test_h2_nghttp_and_httpx_clients_over_tls_and_h2c(env):
    """nghttp (nghttp2-client) and httpx with http2 (python3-httpx, python3-h2), each over TLS
    (ALPN h2) and h2c with prior knowledge, on one proxy: a GET and a POST with a JSON body,
    answered over HTTP/2 with what the backend saw."""
    import httpx
    be = lenient_backend(env)
    plain = free_port()
    port, ca = tls_proxy(env, be.port, extra=f"  - address: 127.0.0.1:{plain}\n")
    body = env.write("body.json", '{"model":"m","max_tokens":4}')
    for base in (f"https://localhost:{port}", f"http://127.0.0.1:{plain}"):
        out = subprocess.run(["nghttp", f"{base}/ng/get"], capture_output=True, timeout=30)
        assert out.returncode == 0, out
        assert json.loads(out.stdout)["path"] == "/ng/get", out.stdout
        out = subprocess.run(["nghttp", "-d", body, f"{base}/ng/post"], capture_output=True,
                             timeout=30)
        seen = json.loads(out.stdout)
        assert (seen["path"], seen["model"], seen["max_tokens"]) == ("/ng/post", "m", 4), seen
        tls = base.startswith("https")
        with httpx.Client(http1=tls, http2=True,  # http1=False: h2c with prior knowledge
                          verify=ca if tls else False, timeout=30) as c:
            r = c.get(f"{base}/hx/get")
            assert (r.status_code, r.http_version) == (200, "HTTP/2"), r
            assert r.json()["path"] == "/hx/get"
            r = c.post(f"{base}/hx/post", json={"model": "m", "max_tokens": 5})
            assert (r.status_code, r.http_version) == (200, "HTTP/2"), r
            assert (r.json()["model"], r.json()["max_tokens"]) == ("m", 5), r.json()
