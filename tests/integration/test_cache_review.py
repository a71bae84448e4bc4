"""The response cache attacked (issue 15's review): answers a client could get crossed,
truncated or doubled, by a hostile or failing origin, by races between workers, by a client
that reads slowly. Each test reproduces a bug that was found and fixed, as a client sees it.

The origin (test_cache.Origin) embeds the path in each body, so that a crossed answer shows."""

import socket
import time

from harness import read_all, wait_until
from test_cache import Origin, Reply, cached, cs, get, host, parse_response, start


def test_stale_if_error_answer_larger_than_one_write_is_sent_whole_once(env):
    # The origin is gone and out of rotation: admission finds no backend, and the stale copy
    # answers from the admission stage. A body the client cannot take in one
    # write made the exchange wait there, and the next write event ran admission again:
    # another connect, another failure, and a 502 written after part of the stale body.
    o = Origin(env)
    body = b"".join(b"%08d stale body line of /big\n" % i for i in range(300000))  # 9 MiB
    o.paths["/big"] = cached(body, ("Age", "100"), cc="max-age=10, stale-if-error=600")
    px = start(env, o, cache="{memory: 256MiB, max_object: 32MiB, shards: 1}")
    st, h, b = get(px, "/big")
    assert st == 200 and b == body, st
    o.close()
    # the first answer after that takes the backend out of rotation; then admission finds
    # no backend at all, and the stale copy answers from there
    st, h, b = get(px, "/big")
    assert st == 200 and b == body and cs(h).endswith("; detail=stale-if-error"), (st, h)
    s = socket.create_connection(("127.0.0.1", px.port), timeout=30)
    s.sendall(b"GET /big HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host(px))
    time.sleep(0.5)  # the proxy fills the socket and waits for the client to read
    got = read_all(s)
    s.close()
    st, h, b = parse_response(got)
    assert st == 200 and cs(h).endswith("; detail=stale-if-error"), (st, h)
    assert b == body, (len(b), len(body), got[-300:])


def test_the_proxys_own_error_answer_to_a_head_has_no_body(env):
    # Found by the soak: a 502/503 of the proxy's own (the origin gone) to a HEAD carried its
    # text body, which a keep-alive client reads as the start of the next answer.
    o = Origin(env)
    px = start(env, o)
    o.close()
    for _ in range(2):  # a failed connect (502), then no backend in rotation (503)
        s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        s.sendall(b"HEAD /a HTTP/1.1\r\nHost: %s\r\n\r\n"
                  b"GET /b HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                  % (host(px), host(px)))
        got = read_all(s)
        s.close()
        first, sep, rest = got.partition(b"\r\n\r\n")
        assert first.split(b" ")[1] in (b"502", b"503") and b"Content-Length: " in first, got
        assert rest.startswith(b"HTTP/1.1 50"), got  # the GET's answer, right after the head
        st, h, b = parse_response(rest)
        assert st in (502, 503) and b.startswith(b"%d " % st), got
