"""gRPC through the proxy (docs/http2.md, "gRPC"): grpcio clients and servers, client h2c ->
proxy -> backend h2c, with a tiny service written with grpcio's generic handlers and bytes
serializers (no .proto compiled): unary, server streaming, client streaming and bidi; routes
on :path; the proxy's own errors as gRPC status codes; grpc-timeout as the deadline."""

import socket
import threading
from concurrent import futures

import grpc

from harness import pool_yaml, request, wait_until
from test_h2 import H2Client
from test_h2_upstream import H2Backend

SERVICE = "accel.test.Echo"


def _handlers(calls):
    def unary(req, ctx):
        calls.append("unary")
        return b"echo:" + req

    def server_stream(req, ctx):
        calls.append("server_stream")
        for i in range(int(req)):
            yield b"part %d" % i

    def client_stream(it, ctx):
        calls.append("client_stream")
        return b"+".join(it)

    def bidi(it, ctx):
        calls.append("bidi")
        for m in it:
            yield m.upper()

    def slow(req, ctx):
        threading.Event().wait(5)
        return b"late"

    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, "the backend says no")

    ident = dict(request_deserializer=None, response_serializer=None)
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, **ident),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, **ident),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, **ident),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi, **ident),
        "Slow": grpc.unary_unary_rpc_method_handler(slow, **ident),
        "Fail": grpc.unary_unary_rpc_method_handler(fail, **ident),
    })


def grpc_backend(env):
    """A grpcio server on a free loopback port (h2c). Returns (port, calls)."""
    calls = []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((_handlers(calls),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    env.on_cleanup.append(lambda: server.stop(0))
    return port, calls


def _channel(env, port):
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    env.on_cleanup.append(ch.close)
    return ch


def _m(ch, kind, name):
    return getattr(ch, kind)(f"/{SERVICE}/{name}")


def test_grpc_all_four_kinds_through_the_proxy(env):
    port, calls = grpc_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("g", [port], extra="    protocol: h2c"))
    ch = _channel(env, px.port)
    assert _m(ch, "unary_unary", "Unary")(b"hi", timeout=10) == b"echo:hi"
    assert list(_m(ch, "unary_stream", "ServerStream")(b"3", timeout=10)) == [
        b"part 0", b"part 1", b"part 2"]
    assert _m(ch, "stream_unary", "ClientStream")(iter([b"a", b"b", b"c"]),
                                                  timeout=10) == b"a+b+c"
    assert list(_m(ch, "stream_stream", "Bidi")(iter([b"x", b"y"]), timeout=10)) == [
        b"X", b"Y"]
    assert calls == ["unary", "server_stream", "client_stream", "bidi"]
    # the backend's own status comes through, message and all
    try:
        _m(ch, "unary_unary", "Fail")(b"", timeout=10)
        raise AssertionError("no error")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e
        assert e.details() == "the backend says no"


def _code(call):
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details()
    raise AssertionError("the call succeeded")


def test_grpc_proxy_errors_are_grpc_statuses(env):
    port, calls = grpc_backend(env)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    keys = env.write("keys", "alice alice-secret-key-0123456789\nbob bob-secret-key-0123456789\n")
    px = env.proxy(
        "pools:\n" + pool_yaml("g", [port], extra="    protocol: h2c") +
        pool_yaml("dead", [dead], extra="    protocol: h2c") +
        "routes:\n"
        f"  - match: {{path_prefix: /{SERVICE}/}}\n    pool: g\n"
        "    auth:\n"
        f"      api_keys_file: {keys}\n"
        "      tenants: [alice]\n"
        "  - match: {path_prefix: /accel.test.Dead/}\n    pool: dead\n",
        extra="limits:\n  max_body_bytes: 64\n")
    ch = _channel(env, px.port)
    alice = (("authorization", "Bearer alice-secret-key-0123456789"),)
    bob = (("authorization", "Bearer bob-secret-key-0123456789"),)
    unary = _m(ch, "unary_unary", "Unary")
    assert unary(b"ok", metadata=alice, timeout=10) == b"echo:ok"
    # no route for the method: UNIMPLEMENTED
    code, _ = _code(lambda: ch.unary_unary("/other.Service/Method")(b"", timeout=10))
    assert code == grpc.StatusCode.UNIMPLEMENTED
    # no backend: UNAVAILABLE
    code, _ = _code(lambda: ch.unary_unary("/accel.test.Dead/M")(b"", timeout=10))
    assert code == grpc.StatusCode.UNAVAILABLE
    # auth: no key UNAUTHENTICATED, a tenant the route does not admit PERMISSION_DENIED
    code, _ = _code(lambda: unary(b"x", timeout=10))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    code, _ = _code(lambda: unary(b"x", metadata=bob, timeout=10))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    # a limit (limits.max_body_bytes): RESOURCE_EXHAUSTED, with the proxy's reason
    code, details = _code(lambda: unary(b"x" * 200, metadata=alice, timeout=10))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_body_bytes" in details
    assert calls == ["unary"]  # none of the refused reached the backend


def test_grpc_timeout_is_the_request_deadline(env):
    """grpc-timeout ends the request at the proxy: a backend that never answers (and keeps no
    deadline of its own) leaves the proxy to answer DEADLINE_EXCEEDED, and its stream is
    cancelled; a raw HTTP/2 client that keeps no deadline either sees the proxy's answer.
    grpcio's own deadline works through the proxy too."""
    silent = H2Backend(env, behave=lambda *a: True)  # takes each request, answers none
    px = env.proxy("pools:\n" + pool_yaml("g", [silent.port], extra="    protocol: h2c"))
    c = H2Client(px.port)
    sid = c.send("POST", f"/{SERVICE}/Slow", body=b"\0\0\0\0\0",
                 headers=[("content-type", "application/grpc"), ("te", "trailers"),
                          ("grpc-timeout", "300m")])
    c.wait(lambda: sid in c.ended or sid in c.reset)
    c.close()
    hs = c.headers[sid]
    assert hs["grpc-status"] == "4" and "grpc-timeout" in hs["grpc-message"], hs
    wait_until(lambda: silent.resets >= 1, "the backend's stream cancelled")
    ch = _channel(env, px.port)
    code, _ = _code(lambda: _m(ch, "unary_unary", "Slow")(b"", timeout=0.3))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_grpc_health_checking_protocol(env):
    """pools.health.protocol: grpc asks grpc.health.v1.Health/Check: SERVING keeps the
    backend up, NOT_SERVING takes it out."""
    state = {"serving": True}

    def check(req, ctx):
        return b"\x08\x01" if state["serving"] else b"\x08\x02"

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health",
        {"Check": grpc.unary_unary_rpc_method_handler(check)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    env.on_cleanup.append(lambda: server.stop(0))
    px = env.proxy("pools:\n" + pool_yaml(
        "g", [port], extra="    protocol: h2c\n"
        "    health: {protocol: grpc, interval_ms: 50, fall: 1, rise: 1}"), workers=1)
    ready = lambda: request(px.admin, "GET", "/readyz")[0]  # noqa: E731
    wait_until(lambda: ready() == 200, "the backend up: SERVING")
    state["serving"] = False
    wait_until(lambda: ready() == 503, "the backend down: NOT_SERVING")
    state["serving"] = True
    wait_until(lambda: ready() == 200, "the backend up again")
