"""HTTP/1.1 behaviour through the proxy: keep-alive reuse, chunked bodies both ways, SSE
streaming token by token, pipelining, 100-continue, HEAD, malformed requests, limits."""

import http.client
import json
import re
import socket
import subprocess

from harness import (complete, pool_yaml, raw, read_all, read_until, request, served_by,
                     sim_stats, wait_until)


def _one_sim_proxy(env, extra="", **sim_opts):
    sim_opts.setdefault("latency_ms", 0)
    sim_opts.setdefault("token_ms", 0)
    sim = env.sim("s", **sim_opts)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]), extra=extra)
    return sim, px


def test_keepalive_reuses_upstream_connections(env):
    sim, px = _one_sim_proxy(env)
    before = sim_stats(sim.port)
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    for i in range(200):
        c.request("POST", "/v1/completions", body='{"prompt":"x","max_tokens":1}')
        r = c.getresponse()
        r.read()
        assert r.status == 200
    c.close()
    st = sim_stats(sim.port)
    # one client connection lives on one worker: one upstream connection serves all 200
    # (the stats requests themselves add one request and one connection each)
    assert st["requests"] - before["requests"] - 1 == 200, (before, st)
    assert st["connections"] - before["connections"] - 1 == 1, (before, st)


def test_keepalive_reuse_under_wrk(env):
    sim, px = _one_sim_proxy(env)
    before = sim_stats(sim.port)
    out = subprocess.run(["wrk", "-t1", "-c8", "-d1s", f"http://127.0.0.1:{px.port}/x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Non-2xx" not in out.stdout and "Socket errors" not in out.stdout, out.stdout
    st = sim_stats(sim.port)
    assert st["requests"] > 100, st
    # at most one upstream connection per concurrent client connection (8), however many
    # thousand requests they carried
    assert st["connections"] - before["connections"] - 1 <= 8, (before, st)


def test_chunked_request_body_is_relayed(env):
    sim, px = _one_sim_proxy(env)
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    c.request("POST", "/upload", body=iter([b"a" * 1000, b"b" * 5000, b"c" * 17]),
              encode_chunked=True, headers={"Transfer-Encoding": "chunked"})
    r = c.getresponse()
    body = r.read()
    assert r.status == 200 and b"(6017 body bytes)" in body, (r.status, body)
    # the connection stays usable after a chunked body
    c.request("GET", "/after")
    r = c.getresponse()
    assert r.status == 200 and b"GET /after" in r.read()
    c.close()


def test_large_request_body_streams_through(env):
    sim, px = _one_sim_proxy(env)
    body = b"x" * (900 * 1024)  # larger than any buffer: must flow, not be held
    st, _, data = request(px.port, "POST", "/big", body=body)
    assert st == 200 and b"(921600 body bytes)" in data, (st, data)


def test_sse_reaches_the_client_token_by_token(env):
    # one token every 10 s: the test reads the first event while the backend is still busy
    sim, px = _one_sim_proxy(env, tokens=3, token_ms=10000, latency_ms=0)
    s = socket.create_connection(("127.0.0.1", px.port), timeout=30)
    body = json.dumps({"stream": True, "prompt": "hi"}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
              % (len(body), body))
    got = read_until(s, lambda b: b"data: " in b)
    assert b"Content-Type: text/event-stream" in got
    assert b"Transfer-Encoding: chunked" in got
    # the first token arrived while the simulator is still generating the rest
    st = sim_stats(sim.port)
    assert st["active"] == 1 and st["completions"] == 0, st
    assert b"[DONE]" not in got
    s.close()
    # closing the client cancels the generation on the backend
    wait_until(lambda: sim_stats(sim.port)["aborted"] == 1, "the simulator to see the abort")
    assert sim_stats(sim.port)["active"] == 0


def test_sse_stream_is_complete_and_unaltered(env):
    sim, px = _one_sim_proxy(env, tokens=5, token_ms=5)
    direct = raw(sim.port, b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n'
                 b'Connection: close\r\nContent-Length: 16\r\n\r\n{"stream": true}')
    via = raw(px.port, b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n'
              b'Connection: close\r\nContent-Length: 16\r\n\r\n{"stream": true}')
    body_direct = direct.split(b"\r\n\r\n", 1)[1]
    body_via = via.split(b"\r\n\r\n", 1)[1]
    # ids and send times differ per request; compare the framing and the tokens
    def norm(b):
        b = re.sub(rb'"sent_ns":[0-9]+', b'"sent_ns":T', b)
        return b.replace(b"chatcmpl-1", b"ID").replace(b"chatcmpl-2", b"ID")
    assert norm(body_direct) == norm(body_via), (body_direct, body_via)
    assert body_via.count(b"data: ") == 6 and body_via.endswith(b"0\r\n\r\n")


def test_pipelined_requests_answer_in_order(env):
    sim, px = _one_sim_proxy(env)
    out = raw(px.port, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200") == 3, out
    assert out.index(b"GET /a") < out.index(b"GET /b") < out.index(b"GET /c")


def test_expect_100_continue(env):
    sim, px = _one_sim_proxy(env)
    s = socket.create_connection(("127.0.0.1", px.port), timeout=10)
    s.sendall(b"POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
              b"Content-Length: 5\r\nConnection: close\r\n\r\n")
    first = s.recv(4096)
    assert first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first
    s.sendall(b"hello")
    rest = read_all(s, first[25:])
    assert rest.startswith(b"HTTP/1.1 200") and b"(5 body bytes)" in rest, rest


def test_head_has_no_body(env):
    sim, px = _one_sim_proxy(env)
    out = raw(px.port, b"HEAD /x HTTP/1.1\r\nHost: x\r\n\r\nGET /y HTTP/1.1\r\nHost: x\r\n"
              b"Connection: close\r\n\r\n")
    head, rest = out.split(b"\r\n\r\n", 1)
    assert b"Content-Length:" in head
    assert rest.startswith(b"HTTP/1.1 200"), rest  # the next response follows at once


def test_forwarding_headers_and_request_id(env):
    sim, px = _one_sim_proxy(env)
    st, h, _ = request(px.port, "GET", "/x")
    rid = h["x-request-id"][0]
    assert len(rid) == 32, rid
    # a client outside trusted_proxies cannot choose its id (test_trace: a trusted one can)
    st, h, _ = request(px.port, "GET", "/x", headers={"X-Request-Id": "trace-42"})
    assert h["x-request-id"] != ["trace-42"] and len(h["x-request-id"][0]) == 32, h


def test_connection_close_and_http10(env):
    sim, px = _one_sim_proxy(env)
    out = raw(px.port, b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and b"Connection: close" in out, out
    out = raw(px.port, b"GET /ten HTTP/1.0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and b"GET /ten" in out, out


MALFORMED = [
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: \x01\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n\r\n", 400),
    (b"GET / HTTP/3.0\r\nHost: x\r\n\r\n", 505),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 40000 + b"\r\n\r\n", 431),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),
]


def test_malformed_requests_get_400_and_close(env):
    sim, px = _one_sim_proxy(env)
    for req, want in MALFORMED:
        out = raw(px.port, req)  # returns once the proxy has closed the connection
        assert out.startswith(b"HTTP/1.1 %d" % want), (req[:60], out[:200])
        assert b"Connection: close" in out
    # chunked errors are found while relaying; the head-level ones never reach the backend
    assert sim_stats(sim.port)["requests"] <= 2


def test_body_limit_413(env):
    sim, px = _one_sim_proxy(env, extra="limits: {max_body_bytes: 1000}\n")
    out = raw(px.port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413"), out
    out = raw(px.port, b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
              + b"3e9\r\n" + b"a" * 1001 + b"\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413"), out
    st, _, _ = request(px.port, "POST", "/", body=b"a" * 1000)
    assert st == 200
