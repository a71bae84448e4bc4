"""Every error the proxy itself answers on a route with api: openai, as a client of the OpenAI
API sees it (issue 14): the error object {"error": {"message", "type", "param", "code"}} as
application/json with the type and code the OpenAI API gives that status, the request id
beside it, Retry-After (whole seconds) on every 429 and 503, and the same object in the
event that ends an event stream the proxy began."""

import concurrent.futures
import json
import re
import socket

from harness import (complete, echo_backend, free_port, pool_yaml, read_all,
                     read_until, request, sim_stats, status, wait_until)


def _error(st, h, body, status_, type_, code, retry_after=None):
    """Check one answer: its status, the OpenAI error shape, and Retry-After."""
    assert st == status_, (st, body)
    assert h["content-type"] == ["application/json"], h
    doc = json.loads(body)
    e = doc["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["param"] is None, e
    assert (e["type"], e["code"]) == (type_, code), e
    assert isinstance(e["message"], str) and e["message"], e
    assert doc["request_id"] == h["x-request-id"][0], (doc, h)
    if retry_after is None:
        assert "retry-after" not in h, h
    else:
        assert len(h["retry-after"]) == 1 and re.fullmatch(r"[0-9]+", h["retry-after"][0]), h
        assert retry_after(int(h["retry-after"][0])), h
    return e


def _raw_answer(port, data, wait=None):
    """Send <data> on a fresh connection (then call wait(), if given); the answer's status,
    headers (dict of lists, lower-case names) and body, read until the proxy closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(data)
        if wait:
            wait()
        out = read_all(s)
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    h = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        h.setdefault(k.strip().lower(), []).append(v.strip())
    return int(lines[0].split()[1]), h, body


def test_openai_errors_of_the_request_itself(env):
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\nbeta sk-beta-0123456789abcdef\n")
    be = echo_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                   "  - match: {path_prefix: /v1/acme/}\n    pool: p\n    api: openai\n"
                   f"    auth: {{api_keys_file: {keys}, tenants: [acme]}}\n"
                   "  - match: {path_prefix: /v1/}\n    pool: p\n    api: openai\n"
                   f"    auth: {{api_keys_file: {keys}}}\n",
                   extra="limits: {max_body_bytes: 1000, max_uri_bytes: 200, max_headers: 20}\n"
                         "timeouts: {body_ms: 300}\n")
    beta = {"Authorization": "Bearer sk-beta-0123456789abcdef"}
    assert request(px.port, "GET", "/v1/x", headers=beta)[0] == 200
    # 401: no key, a wrong key
    for h in ({}, {"Authorization": "Bearer sk-nope-0123456789abcdef"}):
        st, rh, body = request(px.port, "GET", "/v1/x", headers=h)
        _error(st, rh, body, 401, "invalid_request_error", "invalid_api_key")
        assert rh["www-authenticate"] == ['Bearer realm="accelnet"'], rh
    # 403: a good key of a tenant this route does not admit
    st, rh, body = request(px.port, "GET", "/v1/acme/x", headers=beta)
    _error(st, rh, body, 403, "permission_error", None)
    # 413, 414, 431: too large a body, target or head
    st, rh, body = request(px.port, "POST", "/v1/x", body=b"x" * 2000, headers=beta)
    _error(st, rh, body, 413, "invalid_request_error", None)
    st, rh, body = request(px.port, "GET", "/v1/" + "a" * 300, headers=beta)
    _error(st, rh, body, 414, "invalid_request_error", None)
    many = dict(beta, **{f"X-Extra-{i}": "1" for i in range(30)})
    st, rh, body = request(px.port, "GET", "/v1/x", headers=many)
    _error(st, rh, body, 431, "invalid_request_error", None)
    # 400: a malformed chunked body
    st, rh, body = _raw_answer(px.port, b"POST /v1/x HTTP/1.1\r\nHost: x\r\n"
                               b"Authorization: Bearer sk-beta-0123456789abcdef\r\n"
                               b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
    _error(st, rh, body, 400, "invalid_request_error", None)
    # 408: a body that never finishes arriving
    st, rh, body = _raw_answer(px.port, b"POST /v1/x HTTP/1.1\r\nHost: x\r\n"
                               b"Authorization: Bearer sk-beta-0123456789abcdef\r\n"
                               b"Content-Length: 100\r\n\r\n{\"prompt\"")
    _error(st, rh, body, 408, "invalid_request_error", None)


def test_openai_429s_say_which_limit_and_when_to_come_back(env):
    sim = env.sim("a", latency_ms=0, token_ms=0, tokens=16)
    slow = env.sim("slow", latency_ms=3000, jitter=0, token_ms=0, slots=8)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]) + pool_yaml("slow", [slow.port]) +
                   "routes:\n"
                   "  - match: {path_prefix: /v1/rate/}\n    pool: p\n    api: openai\n"
                   "    tenant_header: X-Tenant\n"
                   "    rate_limit: {per_tenant: 6/m, burst: 1}\n"
                   "  - match: {path_prefix: /v1/tokens/}\n    pool: p\n    api: openai\n"
                   "    tenant_header: X-Tenant\n"
                   "    rate_limit: {tokens_per_minute: 60, token_burst: 150}\n"
                   "  - match: {header: {name: X-Route, value: conc}}\n    pool: slow\n"
                   "    api: openai\n"
                   "    tenant_header: X-Tenant\n"
                   "    rate_limit: {concurrency: 1}\n")
    post = dict(headers={"Content-Type": "application/json", "X-Tenant": "t"})
    # a request rate: the next request passes in 10 s
    assert request(px.port, "GET", "/v1/rate/x", headers={"X-Tenant": "t"})[0] == 200
    st, h, body = request(px.port, "GET", "/v1/rate/x", headers={"X-Tenant": "t"})
    _error(st, h, body, 429, "requests", "rate_limit_exceeded",
           retry_after=lambda s: 9 <= s <= 10)
    assert h["x-ratelimit-limit"] == ["1"], h
    # tokens per minute: typed "tokens", as the OpenAI API types its TPM limit
    body = json.dumps({"prompt": "hi", "max_tokens": 100})
    assert request(px.port, "POST", "/v1/tokens/completions", body=body, **post)[0] == 200
    st, h, text = request(px.port, "POST", "/v1/tokens/completions", body=body, **post)
    _error(st, h, text, 429, "tokens", "rate_limit_exceeded", retry_after=lambda s: s >= 1)
    # a concurrency cap: no one knows when a request ends; come back in a second
    conc = dict(headers=dict(post["headers"], **{"X-Route": "conc"}))
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        first = ex.submit(request, px.port, "POST", "/v1/completions", body=body, **conc)
        wait_until(lambda: sim_stats(slow.port)["active"] == 1, "the first request in service")
        st, h, text = request(px.port, "POST", "/v1/completions", body=body, **conc)
        _error(st, h, text, 429, "requests", "rate_limit_exceeded", retry_after=lambda s: s == 1)
        assert first.result()[0] == 200


def test_openai_503s_carry_retry_after_and_gateway_errors_do_not(env):
    slow = env.sim("slow", latency_ms=3000, jitter=0, token_ms=0, slots=8)
    px = env.proxy("pools:\n"
                   "  - name: one\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{slow.port}, max_concurrency: 1}}\n"
                   "    queue: {max: 1, timeout_ms: 300}\n" +
                   pool_yaml("dead", [free_port()]) +
                   "routes:\n"
                   "  - match: {path_prefix: /v1/dead/}\n    pool: dead\n    api: openai\n"
                   "  - match: {path_prefix: /v1/}\n    pool: one\n    api: openai\n")
    # 502: the only backend refuses; then it is out of rotation: 503, no backend
    st, h, body = complete(px.port, path="/v1/dead/completions")
    _error(st, h, body, 502, "server_error", None)
    st, h, body = complete(px.port, path="/v1/dead/completions")
    _error(st, h, body, 503, "server_error", "service_unavailable", retry_after=lambda s: s == 1)
    # 503: a queue wait past queue.timeout_ms, and a full queue
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        first = ex.submit(complete, px.port)
        wait_until(lambda: status(px.admin)["pools"][0]["backends"][0]["inflight"] == 1,
                   "the one slot taken")
        st, h, body = complete(px.port)
        _error(st, h, body, 503, "server_error", "service_unavailable",
               retry_after=lambda s: s == 1)
        assert b"queue.timeout_ms" in body
        second = ex.submit(complete, px.port)
        wait_until(lambda: status(px.admin)["pools"][0]["queue"]["length"] == 1,
                   "the second request to queue")
        st, h, body = complete(px.port)
        _error(st, h, body, 503, "server_error", "service_unavailable",
               retry_after=lambda s: s == 1)
        assert b"queue is full" in body
        assert first.result()[0] == 200
        assert second.result()[0] == 503  # its own wait timed out


def test_openai_504_when_no_first_byte_in_time(env):
    slow = env.sim("slow", latency_ms=60000, jitter=0)
    px = env.proxy("pools:\n" + pool_yaml("p", [slow.port]) +
                   "routes:\n  - pool: p\n    api: openai\n",
                   extra="timeouts: {first_byte_ms: 300}\n")
    st, h, body = complete(px.port)
    _error(st, h, body, 504, "server_error", None)


def test_openai_event_stream_ends_with_the_openai_error_object(env):
    slow = env.sim("slow", latency_ms=3000, jitter=0, token_ms=0, slots=8)
    px = env.proxy("pools:\n"
                   "  - name: one\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{slow.port}, max_concurrency: 1}}\n"
                   "    queue: {timeout_ms: 400}\n"
                   "routes:\n"
                   "  - match: {path_prefix: /v1/}\n    pool: one\n    api: openai\n"
                   "    sse_heartbeat_ms: 50\n")
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        first = ex.submit(complete, px.port)
        wait_until(lambda: sim_stats(slow.port)["active"] == 1, "the one slot taken")
        with socket.create_connection(("127.0.0.1", px.port), timeout=15) as s:
            body = b'{"prompt":"x","stream":true}'
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            got = read_until(s, lambda g: g.endswith(b"0\r\n\r\n"))
        assert first.result()[0] == 200
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b": waiting" in got, got
    rid = re.search(rb"\r\nX-Request-Id: ([0-9a-f]{32})\r\n", got).group(1).decode()
    ev = json.loads(re.search(rb"event: error\ndata: (.*)\n", got).group(1))
    assert ev["request_id"] == rid, ev
    e = ev["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["param"] is None, e
    assert (e["type"], e["code"]) == ("server_error", "service_unavailable"), e
    assert "queue.timeout_ms" in e["message"], e


def test_openai_404_for_no_model_or_an_unknown_one(env):
    """Routes that choose by model (issue 26): a completion naming no model, or a model no
    route takes, is a 404 in the OpenAI shape, code model_not_found and param "model", its
    message saying which; one that no route would take whatever its model is the plain
    404 of the route it asked for, still as JSON."""
    be = echo_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                   "  - match: {path_prefix: /v1/, model: 'llama*'}\n    pool: p\n    api: openai\n")
    hdr = {"Content-Type": "application/json"}
    assert request(px.port, "POST", "/v1/completions", headers=hdr,
                   body=json.dumps({"model": "llama-3", "prompt": "x"}))[0] == 200
    st, h, body = request(px.port, "POST", "/v1/completions", headers=hdr,
                          body=json.dumps({"prompt": "x"}))
    e = _error_param(st, h, body, 404, "invalid_request_error", "model_not_found", "model")
    assert "names no model" in e["message"], e
    st, h, body = request(px.port, "POST", "/v1/completions", headers=hdr,
                          body=json.dumps({"model": "gpt-4o", "prompt": "x"}))
    e = _error_param(st, h, body, 404, "invalid_request_error", "model_not_found", "model")
    assert e["message"] == "model 'gpt-4o' not found", e
    st, h, body = request(px.port, "POST", "/other", headers=hdr,
                          body=json.dumps({"model": "llama-3"}))
    _error(st, h, body, 404, "invalid_request_error", None)


def _error_param(st, h, body, status_, type_, code, param):
    """_error, for an error object whose "param" names the field at fault."""
    doc = json.loads(body)
    assert doc["error"]["param"] == param, doc
    doc["error"]["param"] = None
    return _error(st, h, json.dumps(doc).encode(), status_, type_, code)


def test_openai_shape_without_a_route_when_every_route_is_openai(env):
    """When every route is api: openai, what no route takes (another path, a request line
    that is no HTTP) is answered in the OpenAI shape too; with one route that is not, such
    an answer stays text/plain."""
    be = echo_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                   "  - match: {path_prefix: /v1/}\n    pool: p\n    api: openai\n")
    st, h, body = request(px.port, "GET", "/nothing/here")
    _error(st, h, body, 404, "invalid_request_error", None)
    st, h, body = _raw_answer(px.port, b"GARBAGE\r\n\r\n")
    assert st == 400 and h["content-type"] == ["application/json"], (st, h, body)
    assert json.loads(body)["error"]["type"] == "invalid_request_error", body
    env.stop(px)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                   "  - match: {path_prefix: /v1/}\n    pool: p\n    api: openai\n"
                   "  - match: {path_prefix: /plain/}\n    pool: p\n")
    st, h, body = request(px.port, "GET", "/nothing/here")
    assert st == 404 and h["content-type"] == ["text/plain"], (st, h, body)


def test_openai_401_names_only_the_methods_the_route_takes(env):
    """A 401's message names what the route takes: an API key route never mentions Basic
    (nor does its WWW-Authenticate), a Basic route asks for a user name and password and
    challenges Basic, a route with both names both."""
    from test_auth_jwt import htpasswd
    be = echo_backend(env)
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    secret = env.write("hs.key", "an HS256 secret of at least 32 bytes, for the test\n")
    users = htpasswd(env, "users", [("alice", "wonder land")])
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                   "  - match: {path_prefix: /v1/keys/}\n    pool: p\n    api: openai\n"
                   f"    auth: {{api_keys_file: {keys}}}\n"
                   "  - match: {path_prefix: /v1/jwt/}\n    pool: p\n    api: openai\n"
                   f"    auth: {{api_keys_file: {keys}, jwt: {{keys_file: {secret}}}}}\n"
                   "  - match: {path_prefix: /v1/basic/}\n    pool: p\n    api: openai\n"
                   f"    auth: {{basic: {{users_file: {users}}}}}\n"
                   "  - match: {path_prefix: /v1/both/}\n    pool: p\n    api: openai\n"
                   f"    auth: {{api_keys_file: {keys}, basic: {{users_file: {users}}}}}\n")
    for path, says, challenges in (
            ("/v1/keys/x", "an API key is required", ['Bearer realm="accelnet"']),
            ("/v1/jwt/x", "an API key or a token is required", ['Bearer realm="accelnet"']),
            ("/v1/basic/x", "a user name and password are required (Basic)",
             ['Basic realm="accelnet", charset="UTF-8"']),
            ("/v1/both/x", "Bearer or Basic", ['Basic realm="accelnet", charset="UTF-8"',
                                               'Bearer realm="accelnet"'])):
        st, h, body = request(px.port, "GET", path)
        e = _error(st, h, body, 401, "invalid_request_error", "invalid_api_key")
        assert says in e["message"], (path, e)
        assert ("Basic" in e["message"]) == ("basic" in path or "both" in path), (path, e)
        assert sorted(h["www-authenticate"]) == sorted(challenges), (path, h)
