"""A hostile review of how the proxy reads a request (issue 24): every way found to make the
proxy and a backend that decodes paths and reads JSON as Python does (harness.LenientBackend)
disagree on the path, the host, the model, max_tokens or the temperature. Each test sends
the attacks that were tried; the proxy must refuse each, or act on what the backend reads."""

import concurrent.futures
import json

from harness import lenient_backend, pool_yaml, raw, request
from test_json_view import _model_routes_proxy, _models_pool_proxy, _post as post_json, _tokens_proxy
from test_path import KEY, _answer, _guarded, _post as post_raw


def test_temperature_below_the_normal_range_is_not_read_as_zero(env):
    """A temperature under 1e-308 (1e-310, 1e-320: a subnormal double, not 0, to Python and
    any engine) was read as 0 by the cache (10^310 overflowed to infinity and the value
    divided by it), so the answer, sampled at that temperature, was stored as deterministic;
    the one that is 0 to the engine (1e-400) may be stored."""
    be = lenient_backend(env)
    px = env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{be.port}}}\n"
        "routes:\n  - match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n"
        "    cache: {inference: true}\n", workers=1, extra="cache: {memory: 64MiB}\n")
    for t in ("1e-310", "1e-320", "100000000000000000000000e-330", "4e-324"):
        body = '{"prompt":"p","temperature":%s}' % t
        for _ in range(2):
            st, h, data = post_json(px.port, body, path="/v1/completions")
            assert st == 200 and json.loads(data)["temperature"] != 0, (t, st, data)
            assert "stored" not in h.get("cache-status", [""])[0], (t, h)
            assert "hit" not in h.get("cache-status", [""])[0], (t, h)
    assert len(be.seen) == 8, len(be.seen)
    st, h, data = post_json(px.port, '{"prompt":"p","temperature":1e-400}',
                            path="/v1/completions")
    assert st == 200 and json.loads(data)["temperature"] == 0, (st, data)
    assert "stored" in h.get("cache-status", [""])[0], h


# targets an attacker may try against the guarded /v1/completions (test_path._guarded: an API
# key there, an open catch-all before the same decoding, slash-merging, dot-resolving backend)
PATH_ATTACKS = [
    "/v1/completions%3B", "/v1;/completions", "/v1/completions;x=1", "/v1/%252e%252e/x",
    "/x/%252e%252e/v1/completions", "/x/%25%32%65%25%32%65/v1/completions",
    "/%C0%AE%C0%AE/v1/completions", "/x/%C0%AF../v1/completions", "/v1%EF%BC%8Fcompletions",
    "/x/%EF%BC%8E%EF%BC%8E/v1/completions", "/v1/completions%20", "/V1/completions",
    "/v1/completions%3F", "/x%3F/../v1/completions", "/v1/%u0063ompletions",
    "/x/..%3B/v1/completions", "/x/.%2e/v1/completions?a=/../..",
    "http://x//v1/completions", "http://x/./v1/%63ompletions", "HTTP://x/v1/completions",
    "http://x?/v1/completions", "http://x@y/v1/completions", "http://x#/v1/completions",
    "https://x/v1/completions", "*", "v1/completions",
]


def test_no_spelling_of_the_guarded_path_reaches_its_backend_unguarded(env):
    """Each target above, without the key: refused (400, 401, 404), or served by the open
    route on a path that the backend does not read as the guarded one."""
    px, be = _guarded(env)
    for target in PATH_ATTACKS:
        before = len(be.seen)
        st, doc = _answer(raw(px.port, post_raw(px.port, target)))
        assert st in (200, 400, 401, 404, 501), (target, st, doc)
        for seen in be.seen[before:]:
            assert not seen["path"].startswith("/v1/completions"), (target, st, seen)
    # the key opens the normal spellings, as a control
    st, doc = _answer(raw(px.port, post_raw(px.port, "http://x//v1/./%63ompletions", key=True)))
    assert st == 200 and doc["path"] == "/v1/completions", (st, doc)


def test_pipelined_and_http10_requests_meet_the_guard(env):
    """A normalised head shifts the buffer: a request pipelined after one, and an HTTP/1.0
    one without Host, are read on their own normal target, never the first one's."""
    px, be = _guarded(env)
    two = (post_raw(px.port, "/x/../%2e/v1/%63ompletions", key=True, keep=True) +
           post_raw(px.port, "//v1/%2e/completions"))
    out = raw(px.port, two)
    assert out.count(b"HTTP/1.1 200") == 1 and b"HTTP/1.1 401" in out, out[:600]
    body = b'{"prompt":"x"}'
    out = raw(px.port, b"POST /v1//completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s"
              % (len(body), body))
    assert out.split(b" ", 2)[1] == b"401", out[:300]
    assert [s["path"] for s in be.seen] == ["/v1/completions"], be.seen


# bodies read differently by a lenient reader, or not at all by the proxy: none may be routed
# to the open "free" route while the backend reads the keyed "premium-gpt"
MODEL_ATTACKS = [
    b'\xef\xbb\xbf{"model":"premium-gpt"}',                      # a UTF-8 BOM: json.loads reads it
    '{"model":"premium-gpt"}'.encode("utf-16"),                  # UTF-16: json.loads reads it
    '{"model":"premium-gpt"}'.encode("utf-16-le"),
    '{"model":"premium-gpt"}'.encode("utf-32"),
    b'{"model":"free"}\x0c',                                     # a form feed after it
    b'{"model":"free"} {"model":"premium-gpt"}',                 # a second document
    b'{"model":"free"}/*x*/', b'{"model":"free", // x\n "y":1}',  # comments
    b'{"model":"free","model":"premium-gpt"}',
    b'{"model":"free","\\u006dodel":"premium-gpt"}', b'{"model":"free","model\\u0000":"x"}',
    b'{"model":"free\\u0000premium-gpt"}', b'{"model":"premium-gpt\\u0000"}',
    b'{"model":"fre\\u0065"}', b'{"model":["premium-gpt"]}', b'{"model":null}',
    b'{"model":"free","x":{"model":"premium-gpt","model":"y"}}',
    b'{"model":"free","messages":[{"role":"user","content":"a","content":"b"}]}',
    b'{"model":"free","x":"\xc0\xaf"}', b'{"model":"free","x":"\xed\xa0\x80"}',
    b'{"model":"free","x":1e400}', b'{"model":"free","x":-0}',
    b'{"model":"free"' + b',"x":[' * 70 + b']' * 70 + b'}',
    b'{"model":"' + b"free" * 100 + b'"}',
]


def test_no_body_routes_the_premium_model_as_free(env):
    be = lenient_backend(env)
    px = _model_routes_proxy(env, be)
    for body in MODEL_ATTACKS:
        before = len(be.seen)
        st, _, data = post_json(px.port, body)
        assert st in (200, 400, 404), (body, st, data)
        for seen in be.seen[before:]:
            assert seen["model"] == "free" or (seen["json_error"] and seen["model"] is None), \
                (body, st, seen)
    # the Content-Type does not change what the proxy reads, nor what FastAPI would
    for ctype in ("text/plain", "application/json; charset=utf-16", "application/x-www-form-urlencoded"):
        st, _, data = post_json(px.port, '{"model":"premium-gpt"}', headers={"Content-Type": ctype})
        assert st == 401, (ctype, st, data)
    # chunked, or a Content-Encoding the proxy cannot read: never routed as naming no model
    part = b'{"model":"premium-gpt"}'
    out = raw(px.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
              b"chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(part), part))
    assert out.startswith(b"HTTP/1.1 411"), out[:200]
    import gzip
    z = gzip.compress(part)
    st, _, data = post_json(px.port, z, headers={"Content-Encoding": "gzip"})
    assert st == 400, (st, data)
    st, _, data = post_json(px.port, part, headers={"Expect": "100-continue"})
    assert st == 401, (st, data)
    assert all(s["model"] == "free" for s in be.seen), be.seen


def test_max_tokens_spellings_reserve_what_the_backend_generates(env):
    """Numbers a lenient reader takes for another value, and both names at once: reserved
    as the backend reads them (the larger of the two names), or refused."""
    be = lenient_backend(env)
    px = _tokens_proxy(env, be)
    for body in ('{"prompt":"x","max_tokens":1e400}', '{"prompt":"x","max_tokens":9007199254740993}',
                 '{"prompt":"x","max_tokens":5.0000000000000001}', '{"prompt":"x","max_tokens":true}',
                 '{"prompt":"x","max_tokens":[1]}', '{"prompt":"x","max_tokens":-1}'):
        st, _, data = post_json(px.port, body)
        assert st in (400, 429), (body, st, data)
    assert be.seen == [], be.seen
    for body, n in (('{"prompt":"x","max_tokens":1E1}', 10), ('{"prompt":"x","max_tokens":-0}', 0),
                    ('{"prompt":"x","max_tokens":2.0e0}', 2),
                    ('{"prompt":"x","max_tokens":50000000000000000000000001e-25}', 5)):
        st, _, data = post_json(px.port, body)
        assert st == 200 and json.loads(data)["max_tokens"] == n, (body, st, data)


def test_a_model_the_proxy_cannot_hold_is_refused_not_taken_for_none(env):
    """"premium-gpt\\u0000" and a name over 255 bytes: the proxy could not hold them and
    routed them as naming no model -- through the open catch-all, while the backend read a
    name the keyed "premium-*" route matches. Now refused (400), on the route's model and on
    the backend's (pools.backends.models)."""
    be = lenient_backend(env)
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    px = env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{be.port}}}\n"
        "routes:\n"
        "  - match: {path_prefix: /v1/, model: \"premium-*\"}\n    pool: gpu\n    api: openai\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "  - match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n",
        workers=1)
    long_name = "premium-" + "x" * 300
    for body in ('{"model":"premium-gpt\\u0000","messages":[]}',
                 '{"model":"%s","messages":[]}' % long_name):
        st, _, data = post_json(px.port, body)
        assert st == 400, (body[:60], st, data[:300])
    # a model the proxy holds is routed as before: "free" through the open route, a premium
    # one meets the key
    assert post_json(px.port, '{"model":"free","messages":[]}')[0] == 200
    assert post_json(px.port, '{"model":"premium-gpt","messages":[]}')[0] == 401
    assert [s["model"] for s in be.seen] == ["free"], be.seen
    px, a, b = _models_pool_proxy(env)
    for body in ('{"model":"large\\u0000","messages":[]}',
                 '{"model":"large%s","messages":[]}' % ("x" * 300)):
        st, _, data = post_json(px.port, body)
        assert st == 400, (body[:60], st, data[:300])
    assert not a.seen and not b.seen, (a.seen, b.seen)


def test_a_trailing_dot_on_the_host_meets_the_route_of_the_host(env):
    """"Host: admin.example.com." is admin.example.com to DNS and to nginx (which drops the
    dot before choosing a server): it dodged the keyed route with match.host and took the
    open catch-all. Now it meets the key; the port, the case and a configured dot too."""
    be = lenient_backend(env)
    keys = env.write("keys.txt", f"acme {KEY}\n")
    px = env.proxy(
        "pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
        "  - match: {host: admin.example.com, path_prefix: /}\n    pool: p\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "  - match: {host: \"ops.example.com.\", path_prefix: /}\n    pool: p\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "  - match: {path_prefix: /}\n    pool: p\n", workers=1)
    for host in ("admin.example.com.", "ADMIN.Example.COM.:8080", "admin.example.com:80",
                 "ops.example.com", "ops.example.com.:1"):
        st, _, data = request(px.port, "GET", "/x", headers={"Host": host})
        assert st == 401, (host, st, data[:200])
        st, _, data = request(px.port, "GET", "/x", headers={
            "Host": host, "Authorization": "Bearer " + KEY})
        assert st == 200, (host, st, data[:200])
    for host in ("admin.example.com..", "admin.example.co", "x.admin.example.com", "."):
        st, _, data = request(px.port, "GET", "/x", headers={"Host": host})
        assert st == 200, (host, st, data[:200])
    assert len(be.seen) == 9, be.seen  # the 401s never reached it


def test_token_reservation_counts_each_of_n_answers(env):
    """"n": 10 (or "best_of") makes the backend write ten answers of up to max_tokens each, but
    one answer's worth was reserved: ten such requests at once on a 100-token burst, four
    passed, up to 800 tokens written on a budget of 100. Now each reserves n x max_tokens: one passes
    (a full bucket admits one reservation larger than it, into debt), and an "n" that is not
    a whole number is refused as such a max_tokens is."""
    be = lenient_backend(env)
    px = _tokens_proxy(env, be)
    for bad in ('{"prompt":"x","max_tokens":2,"n":"10"}', '{"prompt":"x","n":1.5}',
                '{"prompt":"x","best_of":-2}', '{"prompt":"x","n":1,"n":10}'):
        st, _, data = post_json(px.port, bad)
        assert st == 400, (bad, st, data)
    assert be.seen == []
    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        got = list(ex.map(lambda _: post_json(px.port, '{"prompt":"x","max_tokens":20,"n":10}')[0],
                          range(10)))
    assert sorted(got) == [200] + [429] * 9, got


def test_a_head_meets_the_guard_of_a_get_route(env):
    """A route with match.method GET and a key, before an open catch-all: HEAD took the
    catch-all, while the backend ran its GET handler for it (Starlette adds HEAD to every GET
    route; RFC 9110 9.3.2), headers and side effects included. Now a HEAD meets the key."""
    be = lenient_backend(env)
    keys = env.write("keys.txt", f"acme {KEY}\n")
    px = env.proxy(
        "pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
        "  - match: {method: GET, path_prefix: /admin}\n    pool: p\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "  - match: {path_prefix: /}\n    pool: p\n", workers=1)
    for method in ("GET", "HEAD"):
        assert request(px.port, method, "/admin/users")[0] == 401, method
        st, _, _ = request(px.port, method, "/admin/users",
                           headers={"Authorization": "Bearer " + KEY})
        assert st == 200, (method, st)
    # other methods are not GET: they take the open route, as the backend has no GET for them
    assert request(px.port, "POST", "/admin/users", body=b"{}")[0] == 200
    assert [s["target"] for s in be.seen] == ["/admin/users"] * 3, be.seen
