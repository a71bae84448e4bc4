"""Backends that misbehave or use the corners of HTTP/1.1: interim responses, bodies ended by
close, responses cut short, malformed heads. The client must get a clear status or a
visibly truncated response, and the proxy must carry on."""

from harness import ScriptedBackend, pool_yaml, raw, request


def _proxy(env, script):
    be = ScriptedBackend(script)
    px = env.proxy("pools:\n" + pool_yaml("b", [be.port]))
    return be, px


def test_interim_103_is_relayed_before_the_response(env):
    be, px = _proxy(env, lambda n, req: (
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False))
    out = raw(px.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
                          b"HTTP/1.1 200 OK\r\n"), out
    assert out.endswith(b"\r\n\r\nok")


def test_close_delimited_body_reaches_the_client(env):
    be, px = _proxy(env, lambda n, req: (b"HTTP/1.1 200 OK\r\n\r\n" + b"z" * 100000, True))
    out = raw(px.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body = out.split(b"\r\n\r\n", 1)
    assert b"Connection: close" in head and body == b"z" * 100000, head
    # and the next request opens a fresh backend connection
    assert request(px.port, "GET", "/again")[0] == 200


def test_backend_dying_mid_body_truncates_visibly(env):
    be, px = _proxy(env, lambda n, req: (
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"a" * 10, True))
    out = raw(px.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body = out.split(b"\r\n\r\n", 1)
    assert b"Content-Length: 1000" in head and body == b"a" * 10  # closed short: client knows
    # a chunked stream cut short has no final chunk either
    be2 = ScriptedBackend(lambda n, req: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", True))
    px2 = env.proxy("pools:\n" + pool_yaml("b", [be2.port]))
    out = raw(px2.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.endswith(b"5\r\nhello\r\n"), out


def test_malformed_responses_become_502(env):
    bad = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    ]
    be, px = _proxy(env, lambda n, req: (bad[(n - 1) % len(bad)], True))
    for _ in bad:
        st, _, body = request(px.port, "GET", "/")
        assert st == 502 and b"malformed" in body, (st, body)


def test_backend_closing_before_answering(env):
    # a GET on a fresh connection that dies before any response: 502, nothing to retry on
    be, px = _proxy(env, lambda n, req: (b"", True))
    st, _, body = request(px.port, "GET", "/")
    assert st == 502 and b"closed" in body, (st, body)


def test_keepalive_backend_closing_idle_connections(env):
    # a backend that closes every connection right after answering, without saying so:
    # the proxy must notice (idle connection closed) and never hand a dead one to a request
    be, px = _proxy(env, lambda n, req: (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", True))
    for _ in range(20):
        st, _, body = request(px.port, "GET", "/")
        assert st == 200 and body == b"ok", (st, body)
