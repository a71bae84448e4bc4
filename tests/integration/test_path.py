"""Reading the request target (issue 24, finding 2): a backend such as uvicorn percent-decodes
the path before routing, nginx merges slashes, others resolve dot segments, so
"/v1/%63ompletions", "//v1/completions" and "/x/../v1/completions" are "/v1/completions" to
them. The proxy brings every target to one normal form (limits.path: normalize) or refuses
what is not normal (limits.path: refuse), and routes, caches, logs and forwards that one
string; encoded separators and controls are refused either way (docs/security.md)."""

import json
import os

from harness import lenient_backend, pool_yaml, raw, request, wait_until
from test_cache_purge import Origin, _proxy as cache_proxy, hit, miss, purged

KEY = "sk-acme-0123456789abcdef"

# each is "/v1/completions" to a backend that decodes, merges slashes and resolves dots
SPELLINGS = ["/v1/%63ompletions", "/v1/%63%6F%6d%70letions", "//v1/completions",
             "/v1//completions", "/./v1/completions", "/v1/./completions",
             "/x/../v1/completions", "/x/%2e%2E/v1/completions", "/%2E/v1/completions"]
# refused whatever limits.path says
REFUSED = ["/v1%2Fcompletions", "/v1%2fcompletions", "/v1%5Ccompletions", "/v1\\completions",
           "/v1/completions%00", "/v1/completions%0d%0a", "/v1/completions#x",
           "/v1/completions%zz", "/../v1/completions", "/v1/../../v1/completions"]


def _guarded(env, mode=None):
    """Route "secret" (/v1/completions, an API key, a rate limit) before an open catch-all,
    both to one lenient backend; limits.path as <mode> (None: the default)."""
    be = lenient_backend(env, merge_slashes=True, dots=True)
    keys = env.write("keys.txt", f"acme {KEY}\n")
    log = os.path.join(env.dir, "access.log")
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                  "  - match: {path_prefix: /v1/completions}\n    pool: p\n"
                  f"    auth: {{api_keys_file: {keys}}}\n"
                  "    rate_limit: {per_tenant: 600/m, burst: 100}\n"
                  "  - match: {path_prefix: /}\n    pool: p\n",
                  extra=(f"limits: {{path: {mode}}}\n" if mode else "") +
                  f"access_log: {{path: {log}}}\n")
    p.log = log
    return p, be


def _post(port, target, key=None, keep=False, prompt="hi"):
    """The raw bytes of a POST of a completion to <target>, exactly as written."""
    body = b'{"model": "m", "prompt": "%s", "max_tokens": 3}' % prompt.encode()
    return (b"POST " + target.encode() + b" HTTP/1.1\r\nHost: x\r\n"
            + (b"Authorization: Bearer " + KEY.encode() + b"\r\n" if key else b"")
            + b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
            + (b"" if keep else b"Connection: close\r\n") + b"\r\n" + body)


def _answer(data):
    """(status, JSON body or None) of one raw response."""
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def test_spellings_of_a_guarded_path_meet_its_guard(env):
    """Finding 2: without a key every spelling of /v1/completions gets 401 and never reaches
    the backend (on the raw bytes the %63 one matched only the open route: 200); with the key
    each reaches it through the guarded route (the identity it adds), as /v1/completions."""
    p, be = _guarded(env)
    for target in ["/v1/completions"] + SPELLINGS:
        before = len(be.seen)
        status, _ = _answer(raw(p.port, _post(p.port, target)))
        assert status == 401, (target, status, be.seen[before:])
        assert len(be.seen) == before, (target, be.seen[before:])
        status, doc = _answer(raw(p.port, _post(p.port, target, key=True)))
        assert status == 200, (target, status)
        assert doc["target"] == "/v1/completions", (target, doc["target"])
        assert doc["headers"].get("x-tenant") == ["acme"], (target, doc["headers"])


def test_refuse_mode_answers_400_for_each_spelling(env):
    """limits.path: refuse: a target not in normal form gets 400 and reaches no backend;
    the normal one is served as before."""
    p, be = _guarded(env, "refuse")
    for target in SPELLINGS + ["/a%c3%a9", "/a/"]:
        status, _ = _answer(raw(p.port, _post(p.port, target, key=True)))
        want = 200 if target == "/a/" else 400
        assert status == want, (target, status)
    assert [s["target"] for s in be.seen] == ["/a/"], be.seen
    assert _answer(raw(p.port, _post(p.port, "/v1/completions")))[0] == 401
    status, doc = _answer(raw(p.port, _post(p.port, "/v1/completions", key=True)))
    assert status == 200 and doc["target"] == "/v1/completions", (status, doc)
    assert _answer(raw(p.port, _post(p.port, "/a%C3%A9?q=%63", key=True)))[0] == 200


def test_encoded_separators_and_controls_are_refused_in_both_modes(env):
    """%2F, %5C, a backslash, encoded controls, a bad escape, a fragment and a .. above the
    root: 400 in either mode, never the backend (which would read some of them as another
    path); the query is not the path, and keeps its own escapes."""
    for mode in (None, "refuse"):
        p, be = _guarded(env, mode)
        for target in REFUSED:
            status, _ = _answer(raw(p.port, _post(p.port, target, key=True)))
            assert status == 400, (mode, target, status)
        assert be.seen == [], (mode, be.seen)
        status, doc = _answer(raw(p.port, _post(p.port, "/a?x=%2F%00%63&y=//../", key=True)))
        assert status == 200 and doc["target"] == "/a?x=%2F%00%63&y=//../", (mode, doc)
        env.stop(p)
        env.procs.remove(p)


def test_forwarded_target_is_the_normal_one(env):
    """The backend gets the normal target, whatever the form of the request line: origin
    form with a query (kept as sent), absolute form (its path normalised), several requests
    pipelined on one connection, each with a body; OPTIONS * is answered as it was."""
    p, be = _guarded(env)
    status, doc = _answer(raw(p.port, b"GET /a//b/%7euser/./x/..?q=%7e//.. HTTP/1.1\r\n"
                                      b"Host: x\r\nConnection: close\r\n\r\n"))
    assert status == 200 and doc["target"] == "/a/b/~user/?q=%7e//..", doc
    status, doc = _answer(raw(p.port, b"GET http://x//a/%2e/b HTTP/1.1\r\nHost: x\r\n"
                                      b"Connection: close\r\n\r\n"))
    assert status == 200 and doc["target"] == "/a/b", doc
    data = raw(p.port, _post(p.port, "//v1/%63ompletions", key=True, keep=True)
               + _post(p.port, "/x/../v1/completions", key=True, keep=True)
               + _post(p.port, "/v1/completions%2F", key=True))
    assert data.count(b"HTTP/1.1 200 ") == 2 and data.count(b"HTTP/1.1 400 ") == 1, data
    assert [s["target"] for s in be.seen[-2:]] == ["/v1/completions"] * 2, be.seen
    # "*" begins no route's path_prefix: 404, as before
    data = raw(p.port, b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 404 ") and b"no route" in data, data


def test_access_log_shows_the_normal_target(env):
    p, be = _guarded(env)
    status, _ = _answer(raw(p.port, _post(p.port, "/x/../v1/%63ompletions?q=%63", key=True)))
    assert status == 200
    assert _answer(raw(p.port, _post(p.port, "//a")))[0] == 200

    def lines():
        if not os.path.exists(p.log):
            return []
        with open(p.log) as f:
            return [json.loads(line) for line in f]
    wait_until(lambda: len(lines()) >= 2, "two access log lines")
    assert sorted(r["path"] for r in lines()) == ["/a", "/v1/completions?q=%63"], lines()
    # bytes_in counts what the client sent, the spelling's bytes too
    for target in ("/abc", "/a%62c"):
        assert _answer(raw(p.port, b"GET " + target.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                                   b"Connection: close\r\n\r\n"))[0] == 200
    wait_until(lambda: len(lines()) >= 4, "four access log lines")
    sizes = [r["bytes_in"] for r in lines() if r["path"] == "/abc"]
    assert len(sizes) == 2 and abs(sizes[0] - sizes[1]) == 2, lines()


def test_cache_keeps_one_object_for_two_spellings(env):
    """/a%62c and /abc are one object (one backend fetch, stored under the normal target),
    and a purge of either spelling (or of the normal one) purges it."""
    origin = Origin()
    px = cache_proxy(env, origin)
    miss(px, origin, "/abc")
    hit(px, origin, "/abc")
    for spelling in ("/a%62c", "//abc", "/x/../abc", "/%61bc"):
        _, cs = _get_cs(px, spelling)
        assert cs.startswith("accelnet; hit"), (spelling, cs)
    assert set(origin.count) == {"/abc"} and origin.count["/abc"] == 1, origin.count
    assert purged(px, "uri=/abc&host=example.com") == 1
    _, cs = _get_cs(px, "/a%62c")
    assert "fwd=miss" in cs, cs
    assert origin.count["/abc"] == 2, origin.count
    # the purge's own target normalised: %25 is a % in a parameter, so this is /a%62c
    assert purged(px, "uri=http://example.com/a%2562c") == 1
    miss(px, origin, "/abc")
    assert purged(px, "prefix=//a%2562&host=example.com") == 1
    miss(px, origin, "/abc")
    st, _, doc = _purge_raw(px, "uri=http://example.com/a%252Fb")
    assert st == 400 and "encoded /" in doc["error"], doc


def _get_cs(px, target):
    st, hdrs, data = request(px.port, "GET", target, headers={"Host": "example.com"})
    assert st == 200, (target, st, data)
    return st, hdrs.get("cache-status", [""])[0]


def _purge_raw(px, query):
    st, hdrs, data = request(px.admin, "POST", "/cache/purge?" + query)
    return st, hdrs, json.loads(data)


def test_an_escaped_reserved_character_meets_the_route_of_the_character(env):
    """A reserved character stays encoded in the normal form, but uvicorn decodes "%3A" to
    ":" all the same: a route for /v1/models/m:generate guards /v1/models/m%3agenerate too."""
    be = lenient_backend(env)
    keys = env.write("keys.txt", f"acme {KEY}\n")
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                  "  - match: {path_prefix: \"/v1/models/m:generate\"}\n    pool: p\n"
                  f"    auth: {{api_keys_file: {keys}}}\n"
                  "  - match: {path_prefix: /}\n    pool: p\n")
    for target in ("/v1/models/m:generate", "/v1/models/m%3agenerate",
                   "/v1/models/m%3Agenerate?x=1", "/v1/%6dodels//m%3Agenerate"):
        assert _answer(raw(p.port, _post(p.port, target)))[0] == 401, target
    assert be.seen == [], be.seen
    status, doc = _answer(raw(p.port, _post(p.port, "/v1/models/m%3agenerate", key=True)))
    assert status == 200 and doc["target"] == "/v1/models/m%3Agenerate", (status, doc)
    assert doc["path"] == "/v1/models/m:generate"
    # not an escape of that character: the open route
    assert _answer(raw(p.port, _post(p.port, "/v1/models/m%3Bgenerate")))[0] == 200


def test_a_route_on_the_model_sees_the_normal_target(env):
    """A route with match.model reads the body before routing, behind the head in the same
    buffer: the head, normalised in place, is still the one routed and forwarded."""
    be = lenient_backend(env, merge_slashes=True, dots=True)
    keys = env.write("keys.txt", f"acme {KEY}\n")
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                  "  - match: {path_prefix: /v1/completions, model: m}\n    pool: p\n"
                  f"    auth: {{api_keys_file: {keys}}}\n"
                  "  - match: {path_prefix: /}\n    pool: p\n")
    for target in SPELLINGS:
        assert _answer(raw(p.port, _post(p.port, target)))[0] == 401, target
        status, doc = _answer(raw(p.port, _post(p.port, target, key=True)))
        assert status == 200 and doc["target"] == "/v1/completions", (target, status, doc)
        assert doc["model"] == "m" and doc["headers"].get("x-tenant") == ["acme"], doc
    # a body past the first buffer: read into a larger one, the head parsed again there
    status, doc = _answer(raw(p.port, _post(p.port, "/x/../v1/%63ompletions", key=True,
                                            prompt="y" * 200000)))
    assert status == 200 and doc["target"] == "/v1/completions", (status, doc)


def test_an_unsafe_request_invalidates_the_normal_target_of_its_location(env):
    """RFC 9111 4.4: a POST answered with Location: /a%62c drops what is stored for /abc,
    the key a GET of /a%62c would have."""
    origin = Origin(tag_field="Location")
    origin.tags["/new"] = ["/a%62c"]
    px = cache_proxy(env, origin)
    miss(px, origin, "/abc")
    hit(px, origin, "/abc")
    st, hdrs, _ = request(px.port, "POST", "/new", body=b"x", headers={"Host": "example.com"})
    assert st == 200 and hdrs["location"] == ["/a%62c"], (st, hdrs)
    miss(px, origin, "/abc")
