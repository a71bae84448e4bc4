"""One strict reading of a JSON request body (issue 24, findings 3, 4 and 5 and the temperature
suspicion), against a backend that reads JSON as Python's json.loads does (the last of two
equal keys wins, NaN and Infinity accepted): every body the two could read differently is
refused with 400 and never forwarded; a body read the same way is routed, reserved and cached
on what the backend reads."""

import concurrent.futures
import json
import socket

from harness import lenient_backend, read_all, request

H = {"Content-Type": "application/json"}


def _post(port, body, path="/v1/chat/completions", headers=None):
    return request(port, "POST", path, body=body, headers=dict(H, **(headers or {})))


def _model_routes_proxy(env, be, extra=""):
    """An open route for the "free" model and a keyed one for "premium-*", one backend."""
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    return env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{be.port}}}\n"
        "routes:\n"
        "  - match: {path_prefix: /v1/, model: \"premium-*\"}\n    pool: gpu\n    api: openai\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "  - match: {path_prefix: /v1/, model: free}\n    pool: gpu\n    api: openai\n",
        workers=1, extra=extra)


def test_model_route_never_decided_past_a_nan(env):
    """Finding 3: {"model":"free","x":NaN,"model":"premium-gpt"} was routed as "free" (the
    duplicate check gave up at the NaN it could not read) while the backend served
    premium-gpt without a key."""
    be = lenient_backend(env)
    px = _model_routes_proxy(env, be)
    assert _post(px.port, '{"model":"premium-gpt","messages":[]}')[0] == 401
    st, _, data = _post(px.port, '{"model":"free","messages":[]}')
    assert st == 200 and json.loads(data)["model"] == "free", (st, data)
    served = len(be.seen)
    for bad in ("NaN", "Infinity", "-Infinity", "1e", "[1,]"):
        for body in ('{"model":"free","x":%s,"model":"premium-gpt","messages":[]}' % bad,
                     '{"model":"free","x":%s,"mod\\u0065l":"premium-gpt"}' % bad,
                     '{"model":"free","x":%s}' % bad):
            st, _, data = _post(px.port, body)
            assert st == 400, (body, st, data)
            # before any route is chosen, the answer has the shape of the model routes'
            # api: openai (an SDK reads error.message)
            err = json.loads(data)["error"]
            assert err["type"] == "invalid_request_error" and err["message"], (body, data)
    # a lone surrogate, bytes that are not UTF-8, a body cut short
    for body in ('{"model":"free","x":"\\ud800"}', b'{"model":"free","x":"\xff"}',
                 '{"model":"free","messages":['):
        st, _, data = _post(px.port, body)
        assert st == 400, (body, st, data)
    assert len(be.seen) == served, be.seen[served:]  # none reached the backend


def _tokens_proxy(env, be, extra=""):
    """A token-limited route (1 token a second, a burst of 100) on one tenant."""
    return env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{be.port}}}\n"
        "routes:\n  - pool: gpu\n    api: openai\n    tenant_header: X-Tenant\n"
        "    rate_limit: {tokens_per_minute: 60, token_burst: 100, default_max_tokens: 16}\n",
        workers=1, extra=extra)


def _parallel(port, body, n=10):
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        return list(ex.map(lambda _: _post(port, body)[0], range(n)))


def test_token_reservation_reads_the_max_tokens_the_backend_reads(env):
    """Finding 4: max_tokens twice (1, then 5000) was reserved as one the backend does not
    read; ten at once with a 100-token burst, 7 passed and 35,007 tokens were generated."""
    be = lenient_backend(env)
    px = _tokens_proxy(env, be)
    for bad in ('{"prompt":"x","max_tokens":1,"max_tokens":5000}',
                '{"prompt":"x","max_tokens":1,"max_t\\u006fkens":5000}',
                '{"prompt":"x","max_tokens":"5000"}',
                '{"prompt":"x","max_tokens":1.5}',
                '{"prompt":"x","max_tokens":NaN}'):
        got = _parallel(px.port, bad)
        assert got == [400] * 10, (bad, got)
    assert be.seen == [], be.seen
    # the OpenAI error on an api: openai route
    st, h, data = _post(px.port, '{"prompt":"x","max_tokens":1,"max_tokens":5000}')
    e = json.loads(data)["error"]
    assert st == 400 and h["content-type"] == ["application/json"], (st, h)
    assert e["type"] == "invalid_request_error" and "twice" in e["message"], e
    # read as the backend reads it: 60 tokens and the prompt each, so exactly one of ten fits
    # in the burst of 100
    got = _parallel(px.port, '{"prompt":"x","max_tokens":60}')
    assert sorted(got) == [200] + [429] * 9, got
    assert [s["max_tokens"] for s in be.seen] == [60], be.seen


def test_token_reservation_needs_the_whole_body(env):
    """A body longer than limits.body_buffer_bytes could name another max_tokens after what
    is held, and a chunked one is not read: refused, never reserved with the default."""
    be = lenient_backend(env)
    px = _tokens_proxy(env, be, extra="limits: {body_buffer_bytes: 4096}\n")
    # 8 KiB of a 1 MiB body sent: the proxy holds 4 KiB and more is on its way
    with socket.create_connection(("127.0.0.1", px.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 1048576\r\n\r\n" + b'{"prompt":"' + b"x" * 8192)
        out = read_all(s)
    assert out.startswith(b"HTTP/1.1 413") and b"body_buffer_bytes" in out, out[:300]
    with socket.create_connection(("127.0.0.1", px.port), timeout=10) as s:
        part = b'{"prompt":"x","max_tokens":5000}'
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                  % (len(part), part))
        out = read_all(s)
    assert out.startswith(b"HTTP/1.1 411"), out[:200]
    assert be.seen == [], be.seen


def test_model_routed_request_reserves_its_own_max_tokens(env):
    """Finding 5: on a route matching on "model", tokens_per_minute reserved
    default_max_tokens (256) instead of the request's max_tokens (5): with a budget of 100
    only one request in a while passed (429, Remaining: 90)."""
    be = lenient_backend(env)
    px = env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{be.port}}}\n"
        "routes:\n  - match: {path_prefix: /v1/, model: \"m\"}\n    pool: gpu\n"
        "    api: openai\n    tenant_header: X-Tenant\n"
        "    rate_limit: {tokens_per_minute: 100, token_burst: 100, default_max_tokens: 256}\n",
        workers=1)
    body = '{"model":"m","prompt":"hello","max_tokens":5}'
    got = []
    for _ in range(4):
        st, h, data = _post(px.port, body)
        got.append((st, h.get("x-ratelimit-remaining")))
    assert [st for st, _ in got] == [200] * 4, got
    assert [s["max_tokens"] for s in be.seen] == [5] * 4


def test_duplicate_temperature_never_steers_the_cache(env):
    """The review's suspicion: a duplicate "temperature" (0 for the proxy, 1 for the engine)
    storing a sampled completion as the deterministic answer. The cache's canonical form
    refused it (not stored: the suspicion does not hold on the base); now the body is refused
    (400) before anything reads it, and a following request at temperature 0 is a miss."""
    be = lenient_backend(env)
    px = env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{be.port}}}\n"
        "routes:\n  - match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n"
        "    cache: {inference: true}\n", workers=1, extra="cache: {memory: 64MiB}\n")
    for body in ('{"prompt":"p","temperature":0,"temperature":1}',
                 '{"prompt":"p","temperature":0,"temp\\u0065rature":1}',
                 '{"prompt":"p","temperature":NaN}'):
        st, h, data = _post(px.port, body, path="/v1/completions")
        assert st == 400, (body, st, data)
    assert be.seen == [], be.seen
    st, h, data = _post(px.port, '{"prompt":"p","temperature":0}', path="/v1/completions")
    assert st == 200 and json.loads(data)["temperature"] == 0, (st, data)
    assert "stored" in h.get("cache-status", [""])[0], h
    assert len(be.seen) == 1


def _models_pool_proxy(env):
    """One open api: openai route to a pool of two lenient backends, one listing the model
    "small", the other "large" (pools.backends.models): (proxy, small's, large's)."""
    a, b = lenient_backend(env), lenient_backend(env)
    px = env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{a.port}, models: [small]}}\n"
        f"      - {{address: 127.0.0.1:{b.port}, models: [large]}}\n"
        "routes:\n  - match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n",
        workers=1)
    return px, a, b


def test_backend_chosen_by_model_only_on_what_the_backend_reads(env):
    """pools.backends.models: the backend is chosen by the body's model after the guard; a
    body naming it twice, or past a NaN, would be sent to the backend that serves the first
    name while the engine reads the last."""
    px, a, b = _models_pool_proxy(env)
    st, _, data = _post(px.port, '{"model":"large","messages":[]}')
    assert st == 200 and len(b.seen) == 1 and not a.seen, (st, data)
    for body in ('{"model":"small","model":"large","messages":[]}',
                 '{"model":"small","x":NaN,"mod\\u0065l":"large"}'):
        st, h, data = _post(px.port, body)
        assert st == 400 and json.loads(data)["error"]["type"] == "invalid_request_error", \
            (body, st, data)
    assert not a.seen and len(b.seen) == 1
