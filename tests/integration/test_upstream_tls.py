"""TLS to backends (issue 12, pools[].tls): the proxy in front of nginx serving HTTPS (and, for
a stream, in front of another accelnet that serves TLS before `accelnet sim`). Certificates
come from a CA made per test with the openssl command; the nginx access log says which TLS
connection carried each request and whether its session was resumed."""

import hashlib
import json
import os
import socket
import subprocess

from harness import BIN, NGINX, free_port, pool_yaml, request, status, wait_until


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class _CA:
    """A CA of its own in <env>.dir; issue() signs leaf certificates with it."""

    def __init__(self, env, name):
        self.env, self.name = env, name
        self.key = os.path.join(env.dir, name + "-ca.key")
        self.pem = os.path.join(env.dir, name + "-ca.pem")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", self.key, "-out", self.pem, "-days", "2",
                 "-subj", f"/CN={name} test CA")

    def issue(self, name, cn, san, client=False):
        key, csr, pem = (os.path.join(self.env.dir, f"{name}.{x}") for x in ("key", "csr", "pem"))
        ext = os.path.join(self.env.dir, name + ".ext")
        with open(ext, "w") as f:
            f.write(f"subjectAltName={san}\n" if san else "")
            f.write("extendedKeyUsage=" + ("clientAuth" if client else "serverAuth") + "\n")
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=" + cn)
        _openssl("x509", "-req", "-in", csr, "-CA", self.pem, "-CAkey", self.key,
                 "-CAcreateserial", "-out", pem, "-days", "2", "-extfile", ext)
        return pem, key


def _nginx_tls(env, cert, extra="", protocols="TLSv1.2 TLSv1.3", keepalive="keepalive_timeout 60s;"):
    """nginx serving HTTPS on a free port with <cert>; its access log has one line per
    request: connection number, session reused ('r' or '.'), client DN, request line."""
    port = free_port()
    root = os.path.join(env.dir, "www")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "small.txt"), "w") as f:
        f.write("hello over tls\n")
    d = env.dir
    conf = f"""
daemon off;
master_process off;
worker_processes 1;
error_log {d}/nginx-error.log;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    log_format tlslog '$connection $ssl_session_reused $ssl_protocol "$ssl_client_s_dn" $request';
    access_log {d}/nginx-access.log tlslog;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    {keepalive}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert[0]};
        ssl_certificate_key {cert[1]};
        ssl_protocols {protocols};
        ssl_session_tickets on;
        ssl_session_cache shared:SSL:1m;
        root {root};
        location = /health {{ return 200 "ok\\n"; }}
        location = /echo {{ return 200 "$request_method dn=$ssl_client_s_dn\\n"; }}
        {extra}
    }}
}}
"""
    path = env.write("nginx.conf", conf)
    p = env.start([NGINX, "-c", path, "-e", f"{d}/nginx-error.log"], "nginx", wait_port=port)
    p.port, p.root = port, root
    return p


def _access_log(env):
    """[(connection number, reused, protocol, client DN, request line)] so far."""
    try:
        with open(os.path.join(env.dir, "nginx-access.log")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        conn, reused, proto, rest = line.split(" ", 3)
        dn, req = rest[1:].split('" ', 1)
        out.append((conn, reused, proto, dn, req))
    return out


def _log_of(env, n):
    """The access log once it holds <n> lines (nginx writes a line after its response)."""
    wait_until(lambda: len(_access_log(env)) >= n, f"{n} lines in nginx's access log")
    return _access_log(env)


def _proxy(env, backend, tls, host="localhost", health=None, workers=1, extra=""):
    """The proxy with one pool over <backend> (HOST:PORT) with pools.tls <tls> (YAML flow)."""
    lines = ["pools:", "  - name: secure", "    backends:",
             f"      - {{address: {host}:{backend.port}}}", f"    tls: {tls}"]
    if health:
        lines.append(f"    health: {health}")
    return env.proxy("\n".join(lines) + "\n", workers=workers, extra=extra)


def _backend(px):
    return status(px.admin)["pools"][0]["backends"][0]


def test_upstream_tls_verified_backend_answers(env):
    ca = _CA(env, "good")
    ng = _nginx_tls(env, ca.issue("srv", "localhost", "DNS:localhost"))
    px = _proxy(env, ng, f"{{ca: {ca.pem}}}", health="{path: /health, interval_ms: 100}")
    st, _, body = request(px.port, "GET", "/small.txt")
    assert st == 200 and body == b"hello over tls\n", (st, body)
    # the health checks ran over TLS too: nginx logged them, and the backend stays up
    wait_until(lambda: any(r[4].startswith("GET /health") for r in _access_log(env)),
               "a TLS health check")
    b = _backend(px)
    assert b["up"] and b["tls_handshakes"] + b["tls_resumed"] >= 1 and b["tls_failures"] == 0, b
    assert "DOWN" not in env.log(px)


def test_upstream_tls_untrusted_certificate_is_a_failed_connect(env):
    good, other = _CA(env, "good"), _CA(env, "other")
    ng = _nginx_tls(env, good.issue("srv", "localhost", "DNS:localhost"))
    px = _proxy(env, ng, f"{{ca: {other.pem}}}")
    st, _, body = request(px.port, "GET", "/small.txt", timeout=10)
    assert st == 502 and b"TLS handshake failed" in body, (st, body)
    b = _backend(px)
    assert not b["eligible"] and b["tls_failures"] == 1, b  # out of rotation
    log = env.log(px)
    assert "certificate verify failed" in log or "unable to get local issuer" in log, log
    assert log.count("TLS handshake failed") == 1, log  # said once, with the reason
    assert _access_log(env) == []  # nothing reached nginx


def test_upstream_tls_health_check_marks_untrusted_backend_down(env):
    good, other = _CA(env, "good"), _CA(env, "other")
    ng = _nginx_tls(env, good.issue("srv", "localhost", "DNS:localhost"))
    px = _proxy(env, ng, f"{{ca: {other.pem}}}",
                health="{path: /health, interval_ms: 50, fall: 2}")
    wait_until(lambda: not _backend(px)["up"], "the backend marked down")
    log = env.log(px)
    assert "is DOWN: TLS handshake failed" in log and "not trusted" in log, log
    assert request(px.port, "GET", "/small.txt", timeout=10)[0] in (502, 503)


def test_upstream_tls_verify_name_mismatch_is_refused(env):
    ca = _CA(env, "good")
    ng = _nginx_tls(env, ca.issue("srv", "localhost", "DNS:localhost"))
    # the certificate names localhost; the pool insists on another name
    px = _proxy(env, ng, f"{{ca: {ca.pem}, verify_name: api.internal.test}}")
    st, _, body = request(px.port, "GET", "/small.txt", timeout=10)
    assert st == 502 and b"TLS handshake failed" in body, (st, body)
    assert "hostname mismatch" in env.log(px), env.log(px)
    # ... and a certificate for an address is checked against the address dialed
    ng2 = _nginx_tls(env, ca.issue("ip", "backend", "IP:127.0.0.2"))
    px2 = _proxy(env, ng2, f"{{ca: {ca.pem}}}", host="127.0.0.1")
    assert request(px2.port, "GET", "/small.txt", timeout=10)[0] == 502


def test_upstream_tls_sni_and_verify_name_for_an_address(env):
    ca = _CA(env, "good")
    ng = _nginx_tls(env, ca.issue("srv", "api.internal.test", "DNS:api.internal.test"),
                    extra='location = /sni { return 200 "sni=$ssl_server_name\\n"; }')
    # dialed by address, named by sni: the certificate is checked against the sni
    px = _proxy(env, ng, f"{{ca: {ca.pem}, sni: api.internal.test}}", host="127.0.0.1")
    st, _, body = request(px.port, "GET", "/sni")
    assert st == 200 and body == b"sni=api.internal.test\n", (st, body)
    # ... or by the backend's own tls (backends[].tls), before the pool's
    env.stop(px)
    px2 = env.proxy("pools:\n  - name: p\n    backends:\n"
                    f"      - {{address: 127.0.0.1:{ng.port}, tls: {{sni: api.internal.test}}}}\n"
                    f"    tls: {{ca: {ca.pem}, sni: wrong.test}}\n")
    st, _, body = request(px2.port, "GET", "/sni")
    assert st == 200 and body == b"sni=api.internal.test\n", (st, body)


def test_upstream_tls_client_certificate(env):
    ca = _CA(env, "good")
    srv = ca.issue("srv", "localhost", "DNS:localhost")
    cli = ca.issue("cli", "accelnet-proxy", None, client=True)
    ng = _nginx_tls(env, srv, extra=f"ssl_client_certificate {ca.pem}; ssl_verify_client on;")
    px = _proxy(env, ng, f"{{ca: {ca.pem}, cert: {cli[0]}, key: {cli[1]}}}")
    st, _, body = request(px.port, "GET", "/echo")
    assert st == 200 and body == b"GET dn=CN=accelnet-proxy\n", (st, body)
    # without it nginx refuses the request (its 400 passes through)
    env.stop(px)
    px2 = _proxy(env, ng, f"{{ca: {ca.pem}}}")
    st, _, body = request(px2.port, "GET", "/echo")
    assert st == 400 and b"No required SSL certificate" in body, (st, body)


def test_upstream_tls_keepalive_reuses_one_connection(env):
    ca = _CA(env, "good")
    ng = _nginx_tls(env, ca.issue("srv", "localhost", "DNS:localhost"))
    px = _proxy(env, ng, f"{{ca: {ca.pem}}}", workers=1)
    for i in range(20):
        st, _, body = request(px.port, "POST" if i % 2 else "GET", "/echo",
                              body=b"x" if i % 2 else None)
        assert st == 200 and body.endswith(b"dn=\n"), (st, body)
    log = _log_of(env, 20)
    assert len(log) == 20 and len({r[0] for r in log}) == 1, log
    b = _backend(px)
    assert b["tls_handshakes"] == 1 and b["tls_resumed"] == 0, b


def _resumes_after_backend_closes(env, protocols):
    ca = _CA(env, "good")
    # nginx closes each connection after one request: each next request reconnects
    ng = _nginx_tls(env, ca.issue("srv", "localhost", "DNS:localhost"), protocols=protocols,
                    keepalive="keepalive_requests 1;")
    px = _proxy(env, ng, f"{{ca: {ca.pem}}}", workers=1)
    for _ in range(5):
        assert request(px.port, "GET", "/small.txt")[0] == 200
    log = _log_of(env, 5)
    assert len({r[0] for r in log}) == 5, log  # five connections
    assert [r[1] for r in log] == [".", "r", "r", "r", "r"], log  # the last four resumed
    b = _backend(px)
    assert b["tls_handshakes"] == 1 and b["tls_resumed"] == 4, b


def test_upstream_tls_reconnect_resumes_tls13(env):
    _resumes_after_backend_closes(env, "TLSv1.3")


def test_upstream_tls_reconnect_resumes_tls12(env):
    _resumes_after_backend_closes(env, "TLSv1.2")


def test_upstream_tls_idle_connection_closed_by_backend_is_not_reused(env):
    ca = _CA(env, "good")
    ng = _nginx_tls(env, ca.issue("srv", "localhost", "DNS:localhost"),
                    keepalive="keepalive_timeout 1s;")
    px = _proxy(env, ng, f"{{ca: {ca.pem}}}", workers=1)
    assert request(px.port, "GET", "/echo")[0] == 200

    def upstream_conns():
        out = subprocess.run(["ss", "-Htn", "state", "established",
                              f"( dport = :{ng.port} )"], capture_output=True, text=True)
        return len(out.stdout.strip().splitlines())

    # nginx closes the idle connection (close_notify, FIN); the proxy lets it go
    wait_until(lambda: upstream_conns() == 0, "the idle upstream connection closed")
    # a POST (never retried) on a fresh, resumed connection: not a 502 from the dead one
    st, _, body = request(px.port, "POST", "/echo", body=b"prompt")
    assert st == 200 and body.startswith(b"POST"), (st, body)
    log = _log_of(env, 2)
    assert len({r[0] for r in log}) == 2 and log[1][1] == "r", log


def test_upstream_tls_large_response_arrives_whole(env):
    ca = _CA(env, "good")
    ng = _nginx_tls(env, ca.issue("srv", "localhost", "DNS:localhost"))
    data = os.urandom(6 * 1024 * 1024 + 5)
    with open(os.path.join(ng.root, "big.bin"), "wb") as f:
        f.write(data)
    px = _proxy(env, ng, f"{{ca: {ca.pem}}}")
    for _ in range(2):  # a fresh connection, then the kept-alive one
        st, h, body = request(px.port, "GET", "/big.bin", timeout=60)
        assert st == 200 and len(body) == len(data), (st, len(body))
        assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()


def test_upstream_tls_streams_server_sent_events(env):
    ca = _CA(env, "good")
    srv = ca.issue("srv", "localhost", "DNS:localhost")
    sim = env.sim("s", latency_ms=0, token_ms=5, tokens=8)
    # a second accelnet serves TLS in front of the simulator
    front_port = free_port()
    front = env.write("front.yaml",
                      f"workers: 1\nlisten:\n  - address: 127.0.0.1:{front_port}\n"
                      f"    tls: {{cert: {srv[0]}, key: {srv[1]}}}\n"
                      "pools:\n" + pool_yaml("sim", [sim.port]))
    f = env.start([BIN, "proxy", "-c", front], "front", wait_port=front_port)
    f.port = front_port
    px = _proxy(env, f, f"{{ca: {ca.pem}}}")
    st, h, body = request(px.port, "POST", "/v1/chat/completions",
                          body=json.dumps({"stream": True, "messages": []}),
                          headers={"Content-Type": "application/json"})
    assert st == 200 and h["content-type"][0].startswith("text/event-stream"), (st, h)
    assert body.count(b"data: ") == 9 and body.rstrip().endswith(b"data: [DONE]"), body
    assert _backend(px)["tls_handshakes"] == 1


def test_upstream_tls_verify_false_warns(env):
    ca = _CA(env, "good")
    ng = _nginx_tls(env, ca.issue("srv", "localhost", "DNS:localhost"))
    px = _proxy(env, ng, "{verify: false}")
    assert request(px.port, "GET", "/small.txt")[0] == 200  # untrusted CA, not checked
    assert "tls.verify is false" in env.log(px) and "NOT checked" in env.log(px)


def test_upstream_tls_bad_config_is_refused_with_its_place(env):
    ca = _CA(env, "good")
    cases = [
        ("{ca: /nonexistent/ca.pem}", "cannot load the TLS CA file"),
        ("{sni: 127.0.0.1}", "sni is a host name"),
        ("{cert: " + ca.pem + "}", "'cert' and 'key'"),
        ("{min_version: \"1.1\"}", "min_version"),
        ("{verify: false, ca: " + ca.pem + "}", "mean nothing with verify: false"),
        ("{ciphers: NOSUCHCIPHER}", "no usable cipher"),
    ]
    for tls, want in cases:
        path = env.write("bad.yaml", "listen: [127.0.0.1:1]\npools:\n  - name: p\n"
                         "    backends: [localhost:9]\n    tls: " + tls + "\n")
        r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True)
        assert r.returncode == 2 and want in r.stderr + r.stdout, (tls, r.stderr, r.stdout)
        assert f"{path}:5:" in r.stderr + r.stdout, (tls, r.stderr)


def test_upstream_tls_failed_handshake_fails_over_to_another_backend(env):
    good, other = _CA(env, "good"), _CA(env, "other")
    bad = _nginx_tls(env, other.issue("bad", "localhost", "DNS:localhost"))
    ok = _nginx_tls(env, good.issue("ok", "localhost", "DNS:localhost"),
                    extra='location = /who { return 200 "ok\\n"; }')
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - localhost:{bad.port}\n      - localhost:{ok.port}\n"
                   f"    tls: {{ca: {good.pem}}}\n", workers=1)
    for _ in range(4):  # round-robin tries the untrusted one first once: retried, then skipped
        st, _, body = request(px.port, "GET", "/who")
        assert st == 200 and body == b"ok\n", (st, body)
    states = {b["address"]: b for b in status(px.admin)["pools"][0]["backends"]}
    assert not states[f"localhost:{bad.port}"]["eligible"], states
    assert states[f"localhost:{bad.port}"]["tls_failures"] == 1, states


def test_upstream_tls_silent_backend_is_a_connect_timeout_not_a_hang(env):
    # TCP is accepted (the kernel's backlog) but no TLS ever comes back
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    env.on_cleanup.append(lsock.close)
    port = lsock.getsockname()[1]
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - localhost:{port}\n    tls: {{verify: false}}\n",
                   extra="timeouts: {connect_ms: 300}\n")
    st, _, body = request(px.port, "GET", "/", timeout=10)
    assert st == 504 and b"connect timeout" in body, (st, body)
