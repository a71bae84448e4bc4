"""Defaults that fit a cache in front of inference engines (issue 26): routes.cache.
default_ttl_s for responses that carry no freshness (vLLM sends none), and CDN-Cache-Control
(RFC 9213), the field an origin aims at caches like this one, read before Cache-Control.
The origins are test_cache's scripted Origin and harness's LenientBackend (FastAPI-like: a
JSON answer with no Cache-Control, no Expires, no Last-Modified)."""

import json

from harness import lenient_backend, pool_yaml, request
from test_cache import Origin, Reply, cs, get, hit_ttl, is_hit, start

PROMPT = json.dumps({"model": "m", "prompt": "say hi", "temperature": 0})


def _inference_proxy(env, be, route_cache, auth=""):
    return env.proxy("cache: {memory: 64MiB}\npools:\n" + pool_yaml("vllm", [be.port])
                     + "routes:\n  - match: {path_prefix: /v1/}\n    pool: vllm\n"
                     + f"    api: openai\n    cache: {route_cache}\n" + auth)


def _complete(px, headers=None):
    return request(px.port, "POST", "/v1/completions", body=PROMPT,
                   headers=dict({"Content-Type": "application/json"}, **(headers or {})))


def test_inference_without_freshness_is_a_hit_with_default_ttl(env):
    """The must-show: a backend that sends no freshness at all. With default_ttl_s: 60 the
    second identical completion is a hit (ttl at most 60) and the backend saw one request;
    without it every request goes to the backend (stored, then fwd=stale each time)."""
    be = lenient_backend(env)
    px = _inference_proxy(env, be, "{inference: true, default_ttl_s: 60}")
    st, h, first = _complete(px)
    assert st == 200 and cs(h) == "accelnet; fwd=miss; stored", h
    assert "cache-control" not in h and "expires" not in h, h  # nothing added to the answer
    for _ in range(2):
        st, h, again = _complete(px)
        assert st == 200 and again == first and is_hit(h), h
        assert 0 < hit_ttl(h) <= 60, h
    assert len(be.seen) == 1

    env.stop(px)
    be2 = lenient_backend(env)
    px = _inference_proxy(env, be2, "{inference: true}")
    st, h, _ = _complete(px)
    assert st == 200 and cs(h) == "accelnet; fwd=miss; stored", h
    for _ in range(2):
        st, h, _ = _complete(px)
        assert st == 200 and not is_hit(h) and cs(h).startswith("accelnet; fwd=stale"), h
    assert len(be2.seen) == 3


def test_default_ttl_never_stores_what_may_not_be_stored(env):
    """default_ttl_s gives freshness only to a storable 2xx/3xx that gives none: no-store
    and private are still not stored, no-cache is still revalidated, explicit freshness wins,
    a 404 or a 500 without freshness is not made fresh, and a credentialed request still
    bypasses the cache."""
    o = Origin(env)
    o.paths["/nostore"] = lambda r: Reply(headers=[("Cache-Control", "no-store")], body=b"x")
    o.paths["/private"] = lambda r: Reply(headers=[("Cache-Control", "private")], body=b"x")
    o.paths["/nocache"] = lambda r: Reply(headers=[("Cache-Control", "no-cache"),
                                                   ("ETag", '"n"')], body=b"x")
    o.paths["/short"] = lambda r: Reply(headers=[("Cache-Control", "max-age=5")], body=b"x")
    o.paths["/bare"] = lambda r: Reply(body=b"plain")
    o.paths["/gone"] = lambda r: Reply(status=404, body=b"no")
    o.paths["/err"] = lambda r: Reply(status=500, body=b"err")
    px = start(env, o, route_cache="{default_ttl_s: 3600}")
    for path in ("/nostore", "/private", "/nocache", "/gone", "/err"):
        for _ in range(2):
            st, h, _ = get(px, path)
            assert not is_hit(h), (path, h)
        assert o.count(path) == 2, path
    get(px, "/short")
    st, h, _ = get(px, "/short")
    assert is_hit(h) and hit_ttl(h) <= 5, h
    get(px, "/bare")
    st, h, b = get(px, "/bare")
    assert b == b"plain" and is_hit(h) and 3500 < hit_ttl(h) <= 3600, h
    st, h, _ = get(px, "/bare", headers={"Authorization": "Bearer k"})
    assert not is_hit(h) and o.count("/bare") == 2, h


def test_cdn_cache_control_takes_precedence_over_cache_control(env):
    """RFC 9213: a valid CDN-Cache-Control replaces Cache-Control (and Expires) for this
    cache, both ways, and reaches the client as it came."""
    o = Origin(env)
    o.paths["/cdn-longer"] = lambda r: Reply(
        headers=[("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=60")], body=b"a")
    o.paths["/cdn-nostore"] = lambda r: Reply(
        headers=[("Cache-Control", "max-age=600"), ("CDN-Cache-Control", "no-store")], body=b"b")
    o.paths["/cdn-private"] = lambda r: Reply(
        headers=[("Cache-Control", "public, max-age=600"), ("CDN-Cache-Control", "private")],
        body=b"c")
    o.paths["/cdn-expires"] = lambda r: Reply(
        headers=[("CDN-Cache-Control", "must-revalidate"),
                 ("Expires", "Fri, 01 Jan 2100 00:00:00 GMT")], body=b"d")
    o.paths["/cdn-last-wins"] = lambda r: Reply(
        headers=[("CDN-Cache-Control", "max-age=0, max-age=30"), ("Cache-Control", "no-store")],
        body=b"e")
    o.paths["/cdn-two-lines"] = lambda r: Reply(
        headers=[("Cache-Control", "no-store"), ("CDN-Cache-Control", "public"),
                 ("CDN-Cache-Control", "max-age=40")], body=b"f")
    o.paths["/cdn-false"] = lambda r: Reply(
        headers=[("CDN-Cache-Control", "no-store=?0, max-age=50")], body=b"g")
    px = start(env, o)
    st, h, _ = get(px, "/cdn-longer")
    assert h["cdn-cache-control"] == ["max-age=60"] and h["cache-control"] == ["no-store"], h
    st, h, b = get(px, "/cdn-longer")
    assert b == b"a" and is_hit(h) and hit_ttl(h) <= 60, h
    assert o.count("/cdn-longer") == 1
    for path in ("/cdn-nostore", "/cdn-private", "/cdn-expires"):
        get(px, path)
        st, h, _ = get(px, path)
        assert not is_hit(h), (path, h)
        assert o.count(path) == 2, path
    # a credentialed request still bypasses the cache, whatever the targeted field says
    st, h, _ = get(px, "/cdn-longer", headers={"Authorization": "Bearer k"})
    assert not is_hit(h) and o.count("/cdn-longer") == 2, h
    for path, ttl in (("/cdn-last-wins", 30), ("/cdn-two-lines", 40), ("/cdn-false", 50)):
        get(px, path)
        st, h, _ = get(px, path)
        assert is_hit(h) and 0 < hit_ttl(h) <= ttl, (path, h)
        assert o.count(path) == 1, path


def test_invalid_cdn_cache_control_is_ignored_for_cache_control(env):
    """A CDN-Cache-Control that is no Structured Fields dictionary (RFC 8941: an upper-case
    key, a trailing comma, an unterminated string, a bad number) is not used: the response's
    Cache-Control decides, whichever way it points. An empty one is not used either."""
    bad = ("Max-Age=60", "max-age=60,", 'max-age=60, no-cache="x', "max-age=1234567890123456",
           "max-age=60;", "max-age=60 x", "")
    o = Origin(env)
    for i, v in enumerate(bad):
        o.paths[f"/bad{i}"] = (lambda v: lambda r: Reply(
            headers=[("Cache-Control", "no-store"), ("CDN-Cache-Control", v)], body=b"x"))(v)
        o.paths[f"/ok{i}"] = (lambda v: lambda r: Reply(
            headers=[("Cache-Control", "max-age=60"), ("CDN-Cache-Control", v)], body=b"y"))(v)
    px = start(env, o)
    for i, v in enumerate(bad):
        get(px, f"/bad{i}")
        st, h, _ = get(px, f"/bad{i}")
        assert not is_hit(h) and o.count(f"/bad{i}") == 2, (v, h)
        get(px, f"/ok{i}")
        st, h, _ = get(px, f"/ok{i}")
        assert is_hit(h) and o.count(f"/ok{i}") == 1, (v, h)
