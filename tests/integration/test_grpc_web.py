"""gRPC-Web through the proxy (routes.grpc_web, docs/http2.md "gRPC-Web"): a browser's gRPC-Web
call, built here by hand over HTTP/1.1 (http.client) and HTTP/2 (Python h2), goes to a grpcio
server as gRPC over h2c, and its answer comes back as gRPC-Web: the messages, then the
trailers as the body's last message (flag 0x80). In text mode (application/grpc-web-text) both
bodies are base64, the answer's in runs each padded where a message ends."""

import base64
import http.client
import struct

from harness import pool_yaml
from test_grpc import SERVICE, grpc_backend
from test_h2 import H2Client

CT = "application/grpc-web+proto"
CT_TEXT = "application/grpc-web-text+proto"


def _proxy(env, port, grpc_web=True):
    return env.proxy("pools:\n" + pool_yaml("g", [port], extra="    protocol: h2c") +
                     "routes:\n  - pool: g\n" + ("    grpc_web: true\n" if grpc_web else ""))


def _msg(payload, flag=0):
    return struct.pack(">BI", flag, len(payload)) + payload


def _frames(body):
    """A gRPC-Web body as [(flag, payload)]; fails on a cut frame."""
    out, i = [], 0
    while i < len(body):
        flag, n = struct.unpack(">BI", body[i:i + 5])
        assert i + 5 + n <= len(body), body
        out.append((flag, body[i + 5:i + 5 + n]))
        i += 5 + n
    return out


def _trailers(payload):
    return dict(line.split(":", 1) for line in payload.decode().split("\r\n") if line)


def _call_h1(port, method, payload):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    c.request("POST", f"/{SERVICE}/{method}", body=_msg(payload),
              headers={"Content-Type": CT, "X-Grpc-Web": "1", "X-User-Agent": "grpc-web-test"})
    r = c.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    c.close()
    return out


def test_grpc_web_unary_and_server_streaming_over_http1(env):
    port, calls = grpc_backend(env)
    px = _proxy(env, port)
    status, h, body = _call_h1(px.port, "Unary", b"hi")
    # (grpcio says application/grpc: application/grpc-web back)
    assert status == 200 and h["content-type"] == "application/grpc-web", (status, h)
    fr = _frames(body)
    assert fr[0] == (0, b"echo:hi") and fr[-1][0] == 0x80 and len(fr) == 2, fr
    assert _trailers(fr[-1][1])["grpc-status"] == "0", fr
    status, h, body = _call_h1(px.port, "ServerStream", b"3")
    fr = _frames(body)
    assert [f for f in fr if f[0] == 0] == [(0, b"part 0"), (0, b"part 1"), (0, b"part 2")], fr
    assert fr[-1][0] == 0x80 and _trailers(fr[-1][1])["grpc-status"] == "0", fr
    assert calls == ["unary", "server_stream"]


def test_grpc_web_errors_and_http2_clients(env):
    port, calls = grpc_backend(env)
    px = _proxy(env, port)
    # the service's own error: grpc-status 9 and its message, where gRPC-Web says (the
    # trailer message, or a trailers-only answer's head)
    status, h, body = _call_h1(px.port, "Fail", b"x")
    fr = _frames(body)
    said = _trailers(fr[-1][1]) if fr else h
    assert status == 200 and said["grpc-status"].strip() == "9", (h, fr)
    assert "the backend says no" in said["grpc-message"], said
    # an unknown method: grpcio's UNIMPLEMENTED (12)
    status, h, body = _call_h1(px.port, "Nope", b"x")
    fr = _frames(body)
    said = _trailers(fr[-1][1]) if fr else h
    assert said["grpc-status"].strip() == "12", (h, fr)
    # over HTTP/2: the same body as DATA, no HTTP/2 trailers
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    sid = c.send("POST", f"/{SERVICE}/Unary", body=_msg(b"h2"), headers=[("content-type", CT)])
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert c.status[sid] == 200, c.headers
    assert c.headers[sid]["content-type"] == "application/grpc-web", c.headers
    fr = _frames(c.body[sid])
    assert fr[0] == (0, b"echo:h2") and _trailers(fr[-1][1])["grpc-status"] == "0", fr
    assert sid not in c.trailers


def test_grpc_web_needs_the_route_option(env):
    # without routes.grpc_web the request goes as it came (a gRPC server takes its
    # content-type as a malformed one), and its answer is not translated: gRPC's own
    port, calls = grpc_backend(env)
    px = _proxy(env, port, grpc_web=False)
    status, h, body = _call_h1(px.port, "Unary", b"hi")
    assert not h.get("content-type", "").startswith("application/grpc-web"), (status, h)
    assert all(f[0] != 0x80 for f in _frames(body)), body


def _unb64(body):
    """A text-mode body back to bytes: 4-character quanta, each decoded alone (a run may end
    with padding anywhere, as gRPC-Web allows)."""
    assert len(body) % 4 == 0, body
    return b"".join(base64.b64decode(body[i:i + 4], validate=True)
                    for i in range(0, len(body), 4))


def _call_text(port, method, body, ct=CT_TEXT, pieces=None):
    """A text-mode call over HTTP/1.1: <body> as it is (already base64, or not), or in
    <pieces> (a chunked body). (status, head, body as it came)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    c.request("POST", f"/{SERVICE}/{method}", body=iter(pieces) if pieces else body,
              headers={"Content-Type": ct, "Accept": "application/grpc-web-text",
                       "X-Grpc-Web": "1"})
    r = c.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    c.close()
    return out


def test_grpc_web_text_unary_streaming_and_client_runs(env):
    # ~1 s. Text mode both ways: the request's base64 decoded as it streams, the answer's
    # messages encoded, each padded at its end
    port, calls = grpc_backend(env)
    px = _proxy(env, port)
    status, h, body = _call_text(px.port, "Unary", base64.b64encode(_msg(b"hi")))
    assert status == 200 and h["content-type"] == "application/grpc-web-text", (status, h)
    fr = _frames(_unb64(body))
    assert fr[0] == (0, b"echo:hi") and fr[-1][0] == 0x80 and len(fr) == 2, fr
    assert _trailers(fr[-1][1])["grpc-status"] == "0", fr
    # server streaming: three messages of 11 bytes, each its own padded run, then the trailers
    status, h, body = _call_text(px.port, "ServerStream", base64.b64encode(_msg(b"3")))
    assert body.count(b"=") >= 3 and not body.endswith(b"=" * 3), body
    fr = _frames(_unb64(body))
    assert fr[:3] == [(0, b"part 0"), (0, b"part 1"), (0, b"part 2")], fr
    assert fr[-1][0] == 0x80 and _trailers(fr[-1][1])["grpc-status"] == "0", fr
    # a client stream whose messages are runs of their own (padded), sent chunked in pieces
    # that split quanta, its content-type in another case with a parameter
    runs = b"".join(base64.b64encode(_msg(m)) for m in (b"ab", b"cde", b"f"))
    status, h, body = _call_text(px.port, "ClientStream", None,
                                 ct="Application/GRPC-Web-Text+proto; charset=utf-8",
                                 pieces=[runs[:3], runs[3:10], runs[10:]])
    fr = _frames(_unb64(body))
    assert status == 200 and fr[0] == (0, b"ab+cde+f"), (status, h, fr)
    assert calls == ["unary", "server_stream", "client_stream"]
    # over HTTP/2 the same
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    sid = c.send("POST", f"/{SERVICE}/Unary", body=base64.b64encode(_msg(b"h2")),
                 headers=[("content-type", CT_TEXT)])
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert c.headers[sid]["content-type"] == "application/grpc-web-text", c.headers
    fr = _frames(_unb64(c.body[sid]))
    assert fr[0] == (0, b"echo:h2") and _trailers(fr[-1][1])["grpc-status"] == "0", fr


def test_grpc_web_text_bad_base64_is_a_grpc_error(env):
    # ~1 s. A body that is not base64 (a stray character, whitespace, a cut quantum, padding
    # where none may be) is answered by the proxy in gRPC's terms, which a gRPC-Web client
    # reads: INVALID_ARGUMENT (3) and why; the service is never called, the proxy goes on
    port, calls = grpc_backend(env)
    px = _proxy(env, port)
    good = base64.b64encode(_msg(b"hi"))
    for bad, why in ((b"AAAA!AAA", "not base64"), (good[:8] + b" " + good[8:], "whitespace"),
                     (good[:-1], "ends inside a quantum"), (b"A===" + good, "padding")):
        status, h, body = _call_text(px.port, "Unary", bad)
        assert status == 200 and h.get("grpc-status") == "3", (bad, status, h, body)
        assert why in h.get("grpc-message", ""), (bad, h)
        assert h["content-type"].startswith("application/grpc-web-text"), h
    # the same when the bad part comes late, in a chunked body
    status, h, body = _call_text(px.port, "ClientStream", None, pieces=[good, b"AA\nA"])
    assert h.get("grpc-status") == "3", (status, h, body)
    assert calls == [], calls
    status, h, body = _call_text(px.port, "Unary", good)
    assert _frames(_unb64(body))[0] == (0, b"echo:hi"), body
